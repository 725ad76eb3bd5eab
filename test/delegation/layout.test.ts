/**
 * The DLGRPCV1 layout byte for byte (section 2.1 of the design notes, docs/wire-format.md),
 * and segments that are not what they claim: refused at open with EPROTO.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { DelegationClient, DelegationServer, FluxNode, IpcClient, IpcServer } from '../../src/delegation/index.js';
import { createSegment, openSegment, unlinkSegment } from '../../src/host/segments.js';
import { localIdentity } from '../../src/host/identity.js';

test('DLGRPCV1: header, ring control, request slots and response slots at the notes\' offsets', () => {
  const server = DelegationServer.create({ maxClients: 3, ringDepth: 4, respDepth: 2, requestBytes: 40, responseBytes: 60 });
  const b = new Uint8Array(openSegment(server.name));
  const dv = new DataView(b.buffer);
  // Header: magic "DLGRPCV1" as u64 0x444C_4752_5043_5631 little-endian, then version and sizes.
  assert.equal([...b.subarray(0, 8)], [0x31, 0x56, 0x43, 0x50, 0x52, 0x47, 0x4c, 0x44]);
  assert.is(dv.getBigUint64(0, true), 0x444c_4752_5043_5631n);
  assert.is(dv.getUint32(8, true), 1, 'version');
  assert.is(dv.getUint32(12, true), 3, 'max_clients');
  assert.is(dv.getUint32(16, true), 4, 'ring_depth');
  assert.is(dv.getUint32(20, true), 2, 'resp_depth');
  assert.is(dv.getUint32(24, true), 0, 'next_client_id');
  assert.is(b[28], 1, 'server_alive');
  assert.is(dv.getBigUint64(128, true), 0n, 'head');
  assert.is(dv.getBigUint64(192, true), 0n, 'tail');
  const reqSlot = 64; // align_up(16 + 40, 64)
  const respSlot = 128; // align_up(8 + 60, 64)
  const respArea = 256 + 4 * reqSlot;

  const c0 = DelegationClient.connect<string>(server.name);
  const c1 = DelegationClient.connect<string>(server.name);
  assert.is(dv.getUint32(24, true), 2, 'next_client_id after two connects');
  const req = new Uint8Array(40).map((_, i) => i + 1);
  assert.ok(c1.call(req, 'x'));
  // Slot 0: committed=1, client_id=1, resp_slot_idx=0, payload at +16; head 1.
  assert.is(b[256], 1, 'committed');
  assert.equal([...b.subarray(257, 260)], [0, 0, 0], 'padding');
  assert.is(dv.getUint32(256 + 4, true), 1, 'client_id');
  assert.is(dv.getUint32(256 + 8, true), 0, 'resp_slot_idx');
  assert.equal([...b.subarray(256 + 16, 256 + 56)], [...req]);
  assert.is(dv.getBigUint64(128, true), 1n, 'head after a call');
  // Second call of client 1 takes response slot 1 (round robin) and ring slot 1.
  assert.ok(c1.call(req, 'y'));
  assert.is(dv.getUint32(256 + reqSlot + 8, true), 1, 'round-robin response slot');

  assert.is(server.poll(), 2);
  const e = server.recv()!;
  assert.equal([e.clientId, e.respSlot], [1, 0]);
  assert.is(b[256], 0, 'recv clears committed');
  const resp = new Uint8Array(60).fill(7);
  server.reply(e.clientId, e.respSlot, resp);
  // Response slot (client 1, slot 0) at resp_area + (1 * resp_depth + 0) * resp_slot_size.
  const r = respArea + (1 * 2 + 0) * respSlot;
  assert.is(b[r], 1, 'valid');
  assert.equal([...b.subarray(r + 8, r + 68)], [...resp]);
  server.recv();
  server.advanceTail();
  assert.is(dv.getBigUint64(192, true), 2n, 'tail = cursor after advance_tail');
  const got: string[] = [];
  assert.is(c1.poll((u, view) => got.push(`${u}:${view[0]}`)), 1);
  assert.equal(got, ['x:7']);
  assert.is(b[r], 0, 'client poll clears valid');
  c0.close();
  c1.close();
  server.close();
  assert.is(b[28], 0, 'server_alive false after close');
});

function forge(bytes: number, fill: (dv: DataView) => void): string {
  const id = localIdentity();
  const name = `/weft.test.${id.pid}.${id.startTime}.forged${Math.floor(Math.random() * 1e9)}.x`;
  fill(new DataView(createSegment(name, bytes)));
  return name;
}

test('fences words: the server says whether its sleepers fence; a client says so in its record, which release clears', () => {
  const server = DelegationServer.create({ maxClients: 2, ringDepth: 4, respDepth: 2 });
  const i32 = new Int32Array(openSegment(server.name));
  const srv = server.layout.ext >> 2;
  const record = (c: number) => (server.layout.ext + 64 + c * 128) >> 2;
  try {
    const fences = i32[srv + 10];
    assert.ok(fences === 0 || fences === 1, `server line word 10 is ${fences}`);
    const client = DelegationClient.connect(server.name);
    assert.is(i32[record(client.clientId) + 7], fences, 'the client copies the server\'s word into its record');
    client.close();
    assert.is(i32[record(client.clientId) + 7], 0, 'a released id says nothing about a next owner\'s sleeps');
    // A client of a weft before the fences never writes word 7: the next owner's record starts at 0.
    const again = DelegationClient.connect(server.name);
    i32[record(again.clientId) + 7] = 0;
    const req = new Uint8Array(32);
    again.call(req, 1);
    assert.is(server.poll(), 1);
    const e = server.recv()!;
    server.reply(e.clientId, e.respSlot, req); // answered with Atomics.store: still delivered
    server.advanceTail();
    let got = 0;
    while (got === 0) got = again.poll();
    assert.is(got, 1);
    again.close();
  } finally {
    server.close();
  }
});

test('segments that are not a ring of this version are refused at open (EPROTO), never mapped as one', () => {
  const good = DelegationServer.create({ maxClients: 2, ringDepth: 4, respDepth: 2, requestBytes: 8, responseBytes: 8 });
  const image = new Uint8Array(openSegment(good.name));
  const copy = (mutate: (dv: DataView) => void, bytes = image.length) =>
    forge(bytes, (dv) => {
      new Uint8Array(dv.buffer).set(image.subarray(0, Math.min(bytes, image.length)));
      mutate(dv);
    });
  const cases: [string, string, RegExp][] = [
    ['wrong magic', copy((dv) => dv.setUint8(0, 0x30)), /bad magic/],
    ['wrong version', copy((dv) => dv.setUint32(8, 2, true)), /version 2/],
    ['ring_depth not a power of two', copy((dv) => dv.setUint32(16, 6, true)), /ringDepth must be a power of two/],
    ['max_clients zero', copy((dv) => dv.setUint32(12, 0, true)), /maxClients/],
    ['sizes disagree', copy((dv) => dv.setUint32(32, 4000, true)), /disagree|truncated/],
    ['truncated', copy(() => {}, 300), /truncated/],
    ['shorter than a header', forge(100, () => {}), /shorter than the 256-byte header/],
  ];
  for (const [what, name, re] of cases) {
    assert.throws(() => DelegationClient.connect(name), (e: Error & { code?: string }) => e.code === 'EPROTO' && re.test(e.message), what);
    unlinkSegment(name);
  }
  good.close();
  const ipc = IpcServer.create({ maxClients: 1, depth: 2 });
  const flux = FluxNode.create({ nodes: 2, capacity: 4, maxInflight: 2 });
  const dlg = DelegationServer.create({});
  assert.throws(() => IpcClient.connect(dlg.name), /magic .* want "WEFTIPC1"/);
  assert.throws(() => FluxNode.join(ipc.name, 1), /want "WEFTFLX1"/);
  assert.throws(() => DelegationClient.connect(flux.name), /bad magic/);
  assert.throws(() => FluxNode.create({ nodes: 2, capacity: 4, maxInflight: 8 }), /maxInflight must be an integer in \[1, 4\]/);
  assert.throws(() => DelegationServer.create({ ringDepth: 1000 }), /ringDepth must be a power of two/);
  assert.throws(() => IpcServer.create({ depth: 0 }), /depth must be/);
  assert.throws(() => DelegationClient.connect('/weft.nothing.1.1.x.y'), (e: Error & { code?: string }) => e.code === 'EPEERDEAD' && /is the server running/.test(e.message));
  ipc.close();
  flux.close();
  dlg.close();
});

test('bad calls are refused with the reason: oversized payloads, unknown ids, begin twice', () => {
  const server = DelegationServer.create({ maxClients: 2, ringDepth: 4, respDepth: 1, requestBytes: 8, responseBytes: 8 });
  const c = DelegationClient.connect(server.name);
  assert.throws(() => c.call(new Uint8Array(9)), /request of 9 bytes, the ring .* takes 8/);
  assert.ok(c.call(new Uint8Array(8)));
  assert.is(c.call(new Uint8Array(8)), false, 'every response slot taken: false, not a wait');
  assert.throws(() => server.reply(5, 0, new Uint8Array(8)), /client id 5 out of \[0, 2\)/);
  assert.throws(() => server.reply(0, 3), /response slot 3 out of \[0, 1\)/);
  assert.throws(() => c.commit(), /commit\(\) without begin\(\)/);
  c.close();
  assert.throws(() => c.call(new Uint8Array(8)), /closed/);
  server.close();
});

test('every payload length arrives intact and leaves the slot bytes past it as they were, in all three', () => {
  // 37 is not a multiple of 4 (short copies end with single bytes); 100 is past the
  // word-by-word limit of 64, where TypedArray.set takes over.
  for (const size of [37, 100]) {
    const lengths = [size, 0, 1, 3, 4, 5, 8, 31, 32, 33, 36, size, 2];
    const bytes = (len: number, seed: number) => new Uint8Array(len).map((_, i) => (i * 7 + seed + 1) & 0xff);
    const held = new Map<string, Uint8Array>();
    // A message of n bytes must leave the rest of its slot as the slot's last message left it.
    const check = (what: string, key: string, slot: Uint8Array, sent: Uint8Array) => {
      const want = (held.get(key) ?? new Uint8Array(size)).slice();
      want.set(sent);
      assert.equal([...slot], [...want], `${what} of ${sent.length} B (slots of ${size} B)`);
      held.set(key, slot.slice());
    };
    const dl = DelegationServer.create({ maxClients: 1, ringDepth: 2, respDepth: 1, requestBytes: size, responseBytes: size });
    const dc = DelegationClient.connect<number>(dl.name);
    const ipcServer = IpcServer.create({ maxClients: 1, depth: 1, requestBytes: size, responseBytes: size });
    const ic = IpcClient.connect<number>(ipcServer.name);
    const fa = FluxNode.create<number>({ nodes: 2, capacity: 1, maxInflight: 1, payloadBytes: size });
    const fb = FluxNode.join<number>(fa.name, 1);
    try {
      lengths.forEach((len, k) => {
        const req = bytes(len, k);
        const resp = bytes(len, k + 101);
        assert.ok(dc.call(req, k));
        assert.is(dl.poll(), 1);
        const e = dl.recv()!;
        check('delegationrpc request', `dreq${k & 1}`, e.payload, req);
        dl.reply(e.clientId, e.respSlot, resp);
        dl.advanceTail();
        assert.is(dc.poll((_u, r) => check('delegationrpc response', 'dresp', r, resp)), 1);

        assert.ok(ic.call(req, k));
        // The server notices a new client on a later pass: recv until it does.
        let r = ipcServer.recv();
        for (let pass = 0; r === null && pass < 1000; pass++) r = ipcServer.recv();
        assert.ok(r, 'the ipc server sees the request');
        check('ipc request', 'ireq', r.payload, req);
        ipcServer.reply(r.clientId, r.tag, resp);
        assert.is(ic.poll((_u, v) => check('ipc response', 'iresp', v, resp)), 1);

        assert.ok(fa.call(1, req, k));
        const q = fb.tryRecv();
        assert.ok(q, 'Flux node 1 sees the call');
        check('Flux call', 'fcall', q.payload, req);
        fb.reply(q.replyToken, resp);
        assert.is(fa.poll((_u, v) => check('Flux reply', 'freply', v, resp)), 1);
      });
    } finally {
      dc.close();
      dl.close();
      ic.close();
      ipcServer.close();
      fb.close();
      fa.close();
    }
  }
});

test('a worker_thread that alone loaded the addon and made a segment exits cleanly (the addon is never unloaded)', () => {
  const script = `
    import { Worker } from 'node:worker_threads';
    const w = new Worker(${JSON.stringify(`import(${JSON.stringify(new URL('../../src/delegation/index.js', import.meta.url).href)}).then((m) => m.DelegationServer.create({}).close())`)}, { eval: true });
    w.on('exit', (code) => console.log('worker exit', code));`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 30_000 });
  assert.is(r.signal, null, `killed by ${r.signal}: ${r.stderr}`);
  assert.is(r.status, 0, r.stderr);
  assert.match(r.stdout, /worker exit 0/);
});

test.run();
