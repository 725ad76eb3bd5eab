/**
 * TcpStore and TcpStoreServer specifics: malformed bytes never crash the server, pipelining,
 * server-held waits (one frame each), connecting before the server listens, a server that
 * goes away, openStore's URL handling, and authentication with the shared secret (right,
 * wrong and missing secrets; raw sockets that skip, fake or replay the handshake).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Socket } from 'node:net';
import { randomBytes } from 'node:crypto';
import { inspect } from 'node:util';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
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
import { FLAG_AUTH, FrameReader, FrameSplitter, FrameWriter, handshakeProof, MAGIC, NONCE_BYTES, Op, ProtocolError, secretKey, Status, VERSION } from '../../src/rendezvous/stores/tcp/protocol.js';
import { dec, enc, failure, redisUrl, runChild } from './backends.js';


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

const hello = (nonce: Uint8Array = randomBytes(NONCE_BYTES)) => new FrameWriter(Op.HELLO, 1).u32(MAGIC).u16(VERSION).bytes(nonce).finish();

/** Sets environment variables for the duration of `fn` (undefined: unset), then restores them. */
async function withEnv<T>(vars: Record<string, string | undefined>, fn: () => Promise<T>): Promise<T> {
  const saved = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
  const put = (v: Record<string, string | undefined>) => {
    for (const [k, x] of Object.entries(v)) if (x === undefined) delete process.env[k];
    else process.env[k] = x;
  };
  put(vars);
  try {
    return await fn();
  } finally {
    put(saved);
  }
}

/** A hand-driven connection: send frames, read the server's frames one by one, see it close. */
class RawClient {
  private readonly socket = new Socket();
  private readonly frames: FrameReader[] = [];
  private readonly splitter = new FrameSplitter(1 << 20);
  private wake: (() => void) | undefined;
  closed = false;

  static async open(port: number): Promise<RawClient> {
    const c = new RawClient();
    c.socket.on('error', () => {});
    c.socket.on('data', (d: Buffer) => {
      for (const f of c.splitter.push(d)) c.frames.push(new FrameReader(f));
      c.wake?.();
    });
    c.socket.on('close', () => ((c.closed = true), c.wake?.()));
    await new Promise<void>((resolve) => c.socket.connect(port, '127.0.0.1', resolve));
    return c;
  }

  send(...frames: Buffer[]): void {
    this.socket.write(Buffer.concat(frames));
  }

  /** The next frame from the server, or 'closed' once it hung up (bounded by 10 s: 'silent'). */
  async next(): Promise<FrameReader | 'closed' | 'silent'> {
    for (;;) {
      const f = this.frames.shift();
      if (f) return f;
      if (this.closed) return 'closed';
      let timer: NodeJS.Timeout | undefined;
      const woken = await new Promise<boolean>((r) => ((this.wake = () => r(true)), (timer = setTimeout(() => r(false), 10_000))));
      clearTimeout(timer);
      this.wake = undefined;
      if (!woken) return 'silent';
    }
  }

  /** Reads frames until the server closes; true if it did (false: it stayed silent for 10 s). */
  async untilClosed(): Promise<boolean> {
    for (;;) {
      const f = await this.next();
      if (f === 'closed') return true;
      if (f === 'silent') return false;
    }
  }

  destroy(): void {
    this.socket.destroy();
  }
}

/** The server's challenge to a HELLO with `nonce`: its nonce and proof. */
async function challenge(c: RawClient, nonce: Uint8Array): Promise<{ serverNonce: Uint8Array; proof: Uint8Array }> {
  c.send(hello(nonce));
  const r = await c.next();
  assert.ok(typeof r === 'object' && r.code === Status.OK, `challenge: ${typeof r === 'string' ? r : r.code}`);
  assert.is(r.u8(), FLAG_AUTH);
  return { serverNonce: r.bytes(), proof: r.bytes() };
}

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
  // Without a secret, so that the frames after HELLO reach the request parser.
  const server = await TcpStoreServer.listen({ log: (m) => logs.push(m), maxFrameBytes: 1 << 16, secret: null });
  const client = await TcpStore.connect(server.url, { secret: null });
  try {
    const { port } = server.address;
    const bad: [string, Buffer][] = [
      ['no HELLO first', new FrameWriter(Op.GET, 1).u32(0).str('k').finish()],
      ['wrong magic', new FrameWriter(Op.HELLO, 1).u32(0xdeadbeef).u16(VERSION).bytes(randomBytes(NONCE_BYTES)).finish()],
      ['old protocol version', new FrameWriter(Op.HELLO, 1).u32(MAGIC).u16(1).finish()],
      ['short nonce', new FrameWriter(Op.HELLO, 1).u32(MAGIC).u16(VERSION).bytes(new Uint8Array(3)).finish()],
      ['AUTH to a server without a secret', Buffer.concat([hello(), new FrameWriter(Op.AUTH, 2).bytes(new Uint8Array(32)).finish()])],
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
  const client = await TcpStore.connect(server.url, { secret: server.secret });
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
  const secret = randomBytes(32).toString('hex');
  const pending = TcpStore.connect(`tcp://127.0.0.1:${port}`, { timeoutMs: 10_000, secret });
  await new Promise((r) => setTimeout(r, 300));
  const server = await TcpStoreServer.listen({ port, secret });
  const client = await pending;
  await client.set('k', enc('v'));
  await client.close();
  await server.close();
});

test('a wait with timeoutMs Infinity waits (Node fires timers over 2^31 - 1 ms after 1 ms); an accept error after listen does not kill the host', async () => {
  const secret = randomBytes(32).toString('hex');
  const server = await TcpStoreServer.listen({ secret });
  const a = await TcpStore.connect(server.url, { secret });
  const b = await TcpStore.connect(server.url, { secret });
  try {
    const got = a.get('later', { timeoutMs: Infinity });
    const early = await Promise.race([got.then(() => 'settled', () => 'settled'), new Promise((r) => setTimeout(() => r('waiting'), 200))]);
    assert.is(early, 'waiting', 'the get must still wait 200 ms later');
    await b.set('later', enc('v'));
    assert.is(dec(await got), 'v');
    // An accept error (EMFILE) after the server listens: reported, and the store serves on.
    const internal = (server as unknown as { server: import('node:net').Server }).server;
    const err = Object.assign(new Error('accept EMFILE'), { code: 'EMFILE' });
    internal.emit('error', err);
    internal.emit('error', err);
    assert.is(server.acceptErrors, 2);
    await b.set('after', enc('w'));
    assert.is(dec(await a.get('after', { timeoutMs: 2000 })), 'w');
  } finally {
    await a.close();
    await b.close();
    await server.close();
  }
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
  const secret = server.secret as string;
  const client = await TcpStore.connect(server.url, { opTimeoutMs: 5000, secret });
  const pending = client.get('k', { timeoutMs: 10_000 });
  await new Promise((r) => setTimeout(r, 50));
  await server.close();
  const e = await failure(pending);
  assert.is(e.code, 'EPEERDEAD');
  assert.match(e.message, `tcp://127.0.0.1:${port}`);
  assert.match(e.message, /rank 0 or the launcher/);
  server = await TcpStoreServer.listen({ port, log: () => {}, secret });
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
    // Secrets never ride in a URL (it ends up on command lines), and are not echoed back.
    const inUrl = await failure(openStore('tcp://:hunter2@127.0.0.1:1'));
    assert.is(inUrl.code, 'EINVAL');
    assert.match(inUrl.message, /WEFT_STORE_SECRET/);
    assert.not.match(inUrl.message, /hunter2/);
    const saved = process.env.WEFT_STORE;
    delete process.env.WEFT_STORE;
    assert.match((await failure(openStore())).message, /WEFT_STORE/);
    if (saved !== undefined) process.env.WEFT_STORE = saved;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// ---------------------------------------------------------------- authentication

test('the right secret works, from the option, WEFT_STORE_SECRET or WEFT_STORE_SECRET_FILE; printing never shows it', async () => {
  const secret = randomBytes(32).toString('hex');
  const server = await TcpStoreServer.listen({ secret, log: () => {} });
  const dir = mkdtempSync(path.join(tmpdir(), 'weft-secret-'));
  try {
    const a = await TcpStore.connect(server.url, { secret });
    await a.set('mesh/0', enc('addr0'), { once: true });
    const b = await withEnv({ WEFT_STORE_SECRET: secret, WEFT_STORE_SECRET_FILE: undefined }, () => TcpStore.connect(server.url));
    const file = path.join(dir, 'secret');
    writeFileSync(file, `${secret}\n`); // a trailing newline is not part of it
    chmodSync(file, 0o600);
    const c = await withEnv({ WEFT_STORE_SECRET: undefined, WEFT_STORE_SECRET_FILE: file }, () => TcpStore.connect(server.url));
    for (const s of [b, c]) assert.is(dec(await s.get('mesh/0')), 'addr0');
    assert.is(server.secret, secret);
    for (const o of [server, a, b, c]) assert.not.match(inspect(o, { depth: 5, showHidden: true }), secret);
    // The server's own default: WEFT_STORE_SECRET, else a random one.
    const fromEnv = await withEnv({ WEFT_STORE_SECRET: 'job-secret-from-env' }, () => TcpStoreServer.listen({ log: () => {} }));
    assert.is(fromEnv.secret, 'job-secret-from-env');
    const random = await withEnv({ WEFT_STORE_SECRET: undefined, WEFT_STORE_SECRET_FILE: undefined }, () => TcpStoreServer.listen({ log: () => {} }));
    assert.match(random.secret ?? '', /^[0-9a-f]{64}$/);
    await Promise.all([a, b, c].map((s) => s.close()));
    await Promise.all([fromEnv, random].map((s) => s.close()));
  } finally {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a wrong or missing secret fails at once with EINVAL naming the address and the fix; keys untouched', async () => {
  const logs: string[] = [];
  const server = await TcpStoreServer.listen({ secret: 'the-job-secret', log: (m) => logs.push(m) });
  const owner = await TcpStore.connect(server.url, { secret: 'the-job-secret' });
  try {
    await owner.set('mesh/1', enc('rank1-addr'), { once: true });
    // A long timeout: an answer other than ETIMEDOUT shows that nothing waited it out.
    const wrong = await failure(TcpStore.connect(server.url, { secret: 'another-secret', timeoutMs: 60_000 }));
    assert.is(wrong.code, 'EINVAL', wrong.message);
    assert.match(wrong.message, server.url);
    assert.match(wrong.message, /does not know this process's secret \(the secret option\)/);
    assert.match(wrong.message, /set WEFT_STORE_SECRET/);
    assert.not.match(wrong.message, /another-secret|the-job-secret/);
    const none = await withEnv({ WEFT_STORE_SECRET: undefined, WEFT_STORE_SECRET_FILE: undefined }, () => failure(TcpStore.connect(server.url, { timeoutMs: 60_000 })));
    assert.is(none.code, 'EINVAL', none.message);
    assert.match(none.message, server.url);
    assert.match(none.message, /requires a secret and this process has none: set WEFT_STORE_SECRET/);
    const viaEnv = await withEnv({ WEFT_STORE_SECRET: 'stale' }, () => failure(openStore(`${server.url}?prefix=x`, { timeoutMs: 60_000 })));
    assert.is(viaEnv.code, 'EINVAL');
    assert.match(viaEnv.message, /\(WEFT_STORE_SECRET\)/);
    // A client with a secret does not talk to a server without one (someone else's, on the port).
    const open = await TcpStoreServer.listen({ secret: null, log: () => {} });
    const unproven = await failure(TcpStore.connect(open.url, { secret: 'the-job-secret', timeoutMs: 60_000 }));
    assert.is(unproven.code, 'EINVAL');
    assert.match(unproven.message, /runs without a secret, but this process has one/);
    await open.close();
    // Bad secret settings are refused before connecting.
    assert.is((await withEnv({ WEFT_STORE_SECRET: '' }, () => failure(TcpStore.connect(server.url)))).code, 'EINVAL');
    const missingFile = await withEnv({ WEFT_STORE_SECRET: undefined, WEFT_STORE_SECRET_FILE: '/nonexistent/weft-secret' }, () => failure(TcpStore.connect(server.url)));
    assert.match(missingFile.message, /cannot read WEFT_STORE_SECRET_FILE=\/nonexistent\/weft-secret/);
    assert.is(dec(await owner.get('mesh/1')), 'rank1-addr');
  } finally {
    await owner.close();
    await server.close();
  }
});

test('raw sockets: requests before AUTH, garbage, a wrong or a replayed proof are cut off; no key is touched', async () => {
  const logs: string[] = [];
  const secret = 'raw-socket-secret';
  const key = secretKey(secret);
  const server = await TcpStoreServer.listen({ secret, log: (m) => logs.push(m) });
  const owner = await TcpStore.connect(server.url, { secret });
  const { port } = server.address;
  const attacks = [
    new FrameWriter(Op.SET, 2).u8(0).str('mesh/1').bytes(enc('evil')).finish(),
    new FrameWriter(Op.DELETE, 3).str('mesh/1').finish(),
    new FrameWriter(Op.PURGE, 4).str('').finish(),
    new FrameWriter(Op.GET, 5).u32(0).str('mesh/1').finish(),
  ];
  try {
    await owner.set('mesh/1', enc('rank1-addr'), { once: true });
    await owner.set('mesh/0', enc('rank0-addr'), { once: true });

    // Requests without any handshake, and requests right after HELLO (no AUTH): closed, no answer.
    for (const first of [[], [hello()]]) {
      const c = await RawClient.open(port);
      c.send(...first, ...attacks);
      if (first.length) assert.is(((await c.next()) as FrameReader).code, Status.OK, 'the challenge');
      assert.ok(await c.untilClosed(), 'closed without answering the requests');
    }
    // A huge frame announced before authenticating: cut off at its length word, never buffered.
    {
      const c = await RawClient.open(port);
      const head = Buffer.alloc(4);
      head.writeUInt32LE(32 << 20, 0);
      c.send(head);
      assert.ok(await c.untilClosed(), 'a 32 MiB frame before AUTH closes the connection');
      assert.ok(logs.some((l) => /frame length 33554432 outside \[5, 1024\]/.test(l)), logs.join('\n'));
    }
    // Garbage where the AUTH belongs.
    {
      const c = await RawClient.open(port);
      await challenge(c, randomBytes(NONCE_BYTES));
      c.send(Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n'));
      assert.ok(await c.untilClosed());
    }
    // A made-up proof: DENIED, then closed; the requests pipelined after it are never served.
    {
      const c = await RawClient.open(port);
      await challenge(c, randomBytes(NONCE_BYTES));
      c.send(new FrameWriter(Op.AUTH, 9).bytes(randomBytes(32)).finish(), ...attacks);
      const r = await c.next();
      assert.ok(typeof r === 'object' && r.code === Status.DENIED && r.id === 9, 'DENIED');
      assert.match((r as FrameReader).str(), /authentication failed/);
      assert.ok(await c.untilClosed());
    }
    // Replay: record a legitimate AUTH (this test knows the secret), send it on a new connection
    // with the same client nonce: the server's nonce differs, so the proof is worthless.
    const nonce = randomBytes(NONCE_BYTES);
    let recorded: Buffer;
    {
      const c = await RawClient.open(port);
      const { serverNonce, proof } = await challenge(c, nonce);
      assert.equal([...proof], [...handshakeProof(key, 'server', nonce, serverNonce)], 'the server proves it knows the secret');
      recorded = new FrameWriter(Op.AUTH, 2).bytes(handshakeProof(key, 'client', serverNonce, nonce)).finish();
      c.send(recorded);
      assert.is(((await c.next()) as FrameReader).code, Status.OK, 'the genuine proof passes');
      c.destroy();
    }
    {
      const c = await RawClient.open(port);
      await challenge(c, nonce);
      c.send(recorded, ...attacks);
      assert.is(((await c.next()) as FrameReader).code, Status.DENIED, 'the replayed proof is refused');
      assert.ok(await c.untilClosed());
    }
    // The server's own proof, reflected back as a client proof, is refused too.
    {
      const c = await RawClient.open(port);
      const { proof } = await challenge(c, nonce);
      c.send(new FrameWriter(Op.AUTH, 2).bytes(proof).finish());
      assert.is(((await c.next()) as FrameReader).code, Status.DENIED, 'a reflected proof is refused');
      assert.ok(await c.untilClosed());
    }
    assert.ok(logs.some((l) => /authentication failed/.test(l)), logs.join('\n'));
    assert.equal((await owner.multiGet(['mesh/0', 'mesh/1'])).map(dec), ['rank0-addr', 'rank1-addr']);
    assert.is(await owner.purge(''), 2, 'exactly the two keys the owner set');
  } finally {
    await owner.close();
    await server.close();
  }
});

test('a connection that never completes the handshake is closed', async () => {
  const logs: string[] = [];
  const server = await TcpStoreServer.listen({ secret: 's', handshakeTimeoutMs: 100, log: (m) => logs.push(m) });
  try {
    const idle = await RawClient.open(server.address.port);
    assert.ok(await idle.untilClosed(), 'closed');
    assert.is(logs.length, 1);
    assert.match(logs[0], /no completed handshake within 100 ms/);
  } finally {
    await server.close();
  }
});

test('a client turned away while 256 connections sit in their handshake dials again and gets in once they time out', async () => {
  const logs: string[] = [];
  const secret = randomBytes(32).toString('hex');
  const server = await TcpStoreServer.listen({ secret, handshakeTimeoutMs: 300, log: (m) => logs.push(m) });
  const idle: Socket[] = [];
  try {
    for (let i = 0; i < 256; i++) idle.push(await new Promise<Socket>((resolve, reject) => {
      const s = new Socket();
      s.once('error', reject);
      s.connect(server.address.port, '127.0.0.1', () => resolve(s));
    }));
    // Until they time out (300 ms), a new connection is closed at once; it used to fail open().
    const client = await TcpStore.connect(server.url, { secret, timeoutMs: 10_000 });
    await client.set('k', enc('v'));
    assert.is(dec(await client.get('k')), 'v');
    assert.ok(logs.some((l) => /256 connections are already in their handshake/.test(l)), 'the client was turned away first');
    await client.close();
  } finally {
    for (const s of idle) s.destroy();
    await server.close();
  }
});

test('openStore serve: rank 0 hosts with WEFT_STORE_SECRET; peers need it', async () => {
  await withEnv({ WEFT_STORE_SECRET: 'torchrun-job-secret', WEFT_STORE_SECRET_FILE: undefined }, async () => {
    const host = (await openStore('tcp://127.0.0.1:0', { serve: true })) as TcpStore;
    try {
      const peer = await openStore(`${host.url}?prefix=t`);
      await peer.set('x', enc('y'));
      assert.is(dec(await host.get('t/x')), 'y');
      await peer.close();
      const outsider = await failure(TcpStore.connect(host.url, { secret: null, timeoutMs: 60_000 }));
      assert.is(outsider.code, 'EINVAL');
    } finally {
      await host.close();
    }
  });
});

test('writes to a server that stopped answering end with their own AbortSignal or timeoutMs, not the store\'s 30 s; an aborted signal sends nothing', async () => {
  process.env.WEFT_STORE_SECRET = randomBytes(16).toString('hex');
  const host = runChild('', 'serve');
  const { url } = await new Promise<{ url: string }>((r) => host.child.once('message', (m) => r(m as { url: string })));
  const store = await TcpStore.connect(url, { timeoutMs: 10_000 });
  try {
    await store.set('k', enc('v'));
    // Aborted already: nothing goes out.
    const before = store.stats.commands;
    for (const write of [
      () => store.set('k', enc('w'), { signal: AbortSignal.abort() }),
      () => store.multiSet([['k', enc('w')]], { signal: AbortSignal.abort() }),
      () => store.add('n', 1, { signal: AbortSignal.abort() }),
      () => store.delete('k', { signal: AbortSignal.abort() }),
      () => store.compareSet('k', enc('v'), enc('w'), { signal: AbortSignal.abort() }),
    ]) assert.is((await failure(write())).code, 'EABORTED');
    assert.is(store.stats.commands, before, 'an aborted write was sent');
    assert.is(dec(await store.get('k')), 'v');
    // The server stops answering (SIGSTOP): each write ends with its own bound.
    process.kill(host.child.pid!, 'SIGSTOP');
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 200);
    const aborted = store.add('n', 1, { signal: ac.signal }).catch((e: WeftError) => e);
    const timed = store.compareSet('k', enc('v'), enc('w'), { timeoutMs: 300 }).catch((e: WeftError) => e);
    const [a, t] = await Promise.all([aborted, timed]);
    assert.is((a as WeftError).code, 'EABORTED', String(a));
    assert.match((a as WeftError).message, /add\('n'\) aborted by the caller's AbortSignal/);
    assert.is((t as WeftError).code, 'ETIMEDOUT', String(t));
    assert.match((t as WeftError).message, /compareSet\('k'\): the store server did not answer within 300 ms/);
  } finally {
    process.kill(host.child.pid!, 'SIGCONT');
    host.child.kill('SIGKILL');
    await host;
    await store.close();
  }
});

test.run();
