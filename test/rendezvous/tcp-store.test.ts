/**
 * TcpStore and TcpStoreServer specifics: malformed bytes never crash the server, pipelining,
 * server-held waits (one frame each), connecting before the server listens, a server that
 * goes away, and openStore's URL handling.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Socket } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { WeftError } from '../../src/errors.js';
import { TcpStoreServer } from '../../src/rendezvous/stores/tcp/server.js';
import { TcpStore } from '../../src/rendezvous/stores/tcp/store.js';
import { FileStore } from '../../src/rendezvous/stores/file/store.js';
import { PrefixStore } from '../../src/rendezvous/prefix-store.js';
import { RedisStore } from '../../src/rendezvous/stores/redis/store.js';
import { openStore } from '../../src/rendezvous/open.js';
import { FrameReader, FrameSplitter, FrameWriter, MAGIC, Op, ProtocolError, VERSION } from '../../src/rendezvous/stores/tcp/protocol.js';
import { dec, enc, failure, redisUrl } from './backends.js';


/** Sends raw bytes; resolves when the server closed the connection (or after 3 s: false). */
function sendRaw(port: number, bytes: Buffer, thenEnd = false): Promise<boolean> {
  return new Promise((resolve) => {
    const s = new Socket();
    const t = setTimeout(() => (s.destroy(), resolve(false)), 3000);
    s.on('error', () => {});
    s.on('data', () => {}); // drain answers (to the HELLO), else 'close' never comes
    s.on('close', () => (clearTimeout(t), resolve(true)));
    s.connect(port, '127.0.0.1', () => (thenEnd ? s.end(bytes) : s.write(bytes)));
  });
}

const hello = () => new FrameWriter(Op.HELLO, 1).u32(MAGIC).u16(VERSION).finish();

test('frames round-trip through the codec; splitting is chunk-size independent', () => {
  const f = new FrameWriter(Op.MSET, 77).u8(1).u32(2).str('k/é').bytes(enc('v1')).str('k2').bytes(new Uint8Array(300)).finish();
  for (const chunk of [1, 3, 7, f.length]) {
    const sp = new FrameSplitter(1 << 20);
    const bodies: Buffer[] = [];
    for (let o = 0; o < f.length; o += chunk) bodies.push(...sp.push(f.subarray(o, o + chunk)));
    assert.is(bodies.length, 1);
    const r = new FrameReader(bodies[0]);
    assert.equal([r.code, r.id, r.u8(), r.u32(), r.str(), dec(r.bytes()), r.str(), r.bytes().length], [Op.MSET, 77, 1, 2, 'k/é', 'v1', 'k2', 300]);
    r.end();
  }
  assert.throws(() => new FrameSplitter(100).push(Buffer.from([0xff, 0xff, 0xff, 0x7f])), (e: unknown) => e instanceof ProtocolError);
  assert.throws(() => new FrameReader(Buffer.from([Op.GET, 1, 0, 0, 0, 5, 0])).u32(), (e: unknown) => e instanceof ProtocolError);
});

test('malformed bytes close that connection with a logged error; the server keeps serving', async () => {
  const logs: string[] = [];
  const server = await TcpStoreServer.listen({ log: (m) => logs.push(m), maxFrameBytes: 1 << 16 });
  const client = await TcpStore.connect(server.url);
  try {
    const { port } = server.address;
    const bad: [string, Buffer][] = [
      ['no HELLO first', new FrameWriter(Op.GET, 1).u32(0).str('k').finish()],
      ['wrong magic', new FrameWriter(Op.HELLO, 1).u32(0xdeadbeef).u16(VERSION).finish()],
      ['unknown opcode', Buffer.concat([hello(), new FrameWriter(0x7f, 2).finish()])],
      ['truncated field', Buffer.concat([hello(), new FrameWriter(Op.SET, 2).u8(0).u16(50).finish()])],
      ['trailing bytes', Buffer.concat([hello(), new FrameWriter(Op.DELETE, 2).str('k').u32(1).finish()])],
      ['huge length', Buffer.concat([hello(), Buffer.from([0xff, 0xff, 0xff, 0xff, 1])])],
      ['length below the header', Buffer.from([1, 0, 0, 0, 0])],
      ['absurd count', Buffer.concat([hello(), new FrameWriter(Op.MGET, 2).u32(0).u32(0xffffffff).finish()])],
      ['HTTP', Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n')],
    ];
    for (const [why, bytes] of bad) assert.ok(await sendRaw(port, bytes), `server closed the connection on: ${why}`);
    assert.is(logs.length, bad.length, logs.join('\n'));
    for (const l of logs) assert.match(l, /closing the connection from 127\.0\.0\.1:\d+: malformed frame/);
    // Random garbage too (half of it an incomplete frame: we end the connection after it).
    let seed = 12345;
    const rnd = () => ((seed = (seed * 1103515245 + 12345) >>> 0), seed >>> 24);
    for (let i = 0; i < 50; i++) await sendRaw(port, Buffer.from([...Array(1 + (rnd() % 64))].map(rnd)), true);
    // The well-behaved client never noticed.
    await client.set('still', enc('alive'));
    assert.is(dec(await client.get('still')), 'alive');
  } finally {
    await client.close();
    await server.close();
  }
});

test('pipelining: many requests in flight on one connection, answers matched by id', async () => {
  const server = await TcpStoreServer.listen({ log: () => {} });
  const client = await TcpStore.connect(server.url);
  try {
    const waits = [...Array(100).keys()].map((i) => client.get(`p/${i}`, { timeoutMs: 10_000 }));
    const sets = [...Array(100).keys()].reverse().map((i) => client.set(`p/${i}`, enc(`v${i}`)));
    await Promise.all(sets);
    assert.equal((await Promise.all(waits)).map(dec), [...Array(100).keys()].map((i) => `v${i}`));
    // A held wait is one frame however long it waits: no polling.
    const before = { ...client.stats };
    const later = client.wait(['slow'], { timeoutMs: 10_000 });
    await new Promise((r) => setTimeout(r, 300));
    await client.set('slow', enc('x'));
    await later;
    assert.equal({ commands: client.stats.commands - before.commands, roundTrips: client.stats.roundTrips - before.roundTrips }, { commands: 2, roundTrips: 2 });
    // An aborted wait is cancelled on the server too.
    const ac = new AbortController();
    const aborted = client.get('never', { signal: ac.signal });
    ac.abort();
    assert.is((await failure(aborted)).code, 'EABORTED');
  } finally {
    await client.close();
    await server.close();
  }
});

test('a client started before the server connects once it listens', async () => {
  const probe = await TcpStoreServer.listen();
  const { port } = probe.address;
  await probe.close();
  const pending = TcpStore.connect(`tcp://127.0.0.1:${port}`, { timeoutMs: 10_000 });
  await new Promise((r) => setTimeout(r, 300));
  const server = await TcpStoreServer.listen({ port });
  const client = await pending;
  await client.set('k', enc('v'));
  await client.close();
  await server.close();
});

test('nothing listening: ETIMEDOUT naming the address; a non-weft server: EPROTO', async () => {
  const probe = await TcpStoreServer.listen();
  const { port } = probe.address;
  await probe.close();
  const e = await failure(TcpStore.connect(`tcp://127.0.0.1:${port}`, { timeoutMs: 300 }));
  assert.is(e.code, 'ETIMEDOUT');
  assert.match(e.message, `tcp://127.0.0.1:${port}`);
  assert.match(e.message, /TcpStoreServer/);
  const redisPort = new URL(redisUrl()).port;
  const p = await failure(TcpStore.connect(`tcp://127.0.0.1:${redisPort}`, { timeoutMs: 2000 }));
  assert.is(p.code, 'EPROTO', p.message);
});

test('the server going away fails pending calls naming the address; a restarted one is reconnected to', async () => {
  let server = await TcpStoreServer.listen({ log: () => {} });
  const { port } = server.address;
  const client = await TcpStore.connect(server.url, { opTimeoutMs: 5000 });
  const pending = client.get('k', { timeoutMs: 10_000 });
  await new Promise((r) => setTimeout(r, 50));
  await server.close();
  const e = await failure(pending);
  assert.is(e.code, 'EPEERDEAD');
  assert.match(e.message, `tcp://127.0.0.1:${port}`);
  assert.match(e.message, /rank 0 or the launcher/);
  server = await TcpStoreServer.listen({ port, log: () => {} });
  await client.set('k', enc('again'));
  assert.is(dec(await client.get('k')), 'again');
  await client.close();
  await server.close();
});

test('openStore: every scheme, ?prefix=, serve for rank 0, and clear errors', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'weft-open-'));
  try {
    const f = await openStore(`${pathToFileURL(dir)}?prefix=job1`);
    assert.instance(f, PrefixStore);
    assert.instance((f as PrefixStore).inner, FileStore);
    await f.set('a', enc('1'));
    await f.close();

    const host = await openStore('tcp://127.0.0.1:0', { serve: true });
    assert.instance(host, TcpStore);
    const url = (host as TcpStore).url;
    const peer = await openStore(`${url}?prefix=j`);
    await peer.set('x', enc('y'));
    assert.is(dec(await host.get('j/x')), 'y');
    await peer.close();
    await host.close(); // stops the server it hosts
    assert.is((await failure(TcpStore.connect(url, { timeoutMs: 200 }))).code, 'ETIMEDOUT');

    const r = await openStore(`${redisUrl()}?prefix=openjob`);
    assert.instance((r as PrefixStore).inner, RedisStore);
    await r.close();

    for (const bad of ['ftp://x', 'not a url', 'tcp://host-without-port']) assert.is((await failure(openStore(bad))).code, 'EINVAL');
    const saved = process.env.WEFT_STORE;
    delete process.env.WEFT_STORE;
    assert.match((await failure(openStore())).message, /WEFT_STORE/);
    if (saved !== undefined) process.env.WEFT_STORE = saved;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
