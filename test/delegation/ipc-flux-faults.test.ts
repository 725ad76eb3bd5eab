/**
 * Faults of ipc and Flux a review found (and two shared with delegationrpc): counts, ids and
 * views that went wrong under races, load or errors. Each race is staged for certain: a
 * party is held at the racy point (a hook in the thread it runs in) while the other side
 * acts. Real worker_threads; no timing thresholds (the deadlines only end a hung test).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Worker } from 'node:worker_threads';
import { DelegationClient, DelegationServer, FluxNode, IpcClient, IpcServer } from '../../src/delegation/index.js';
import { native } from '../../src/native/binding.js';

const SRC = new URL('../../src/', import.meta.url).href;
const enc = (s: string) => new TextEncoder().encode(s.padEnd(8));
const dec = (u: Uint8Array) => new TextDecoder().decode(u).trim();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
type Coded = Error & { code?: string };

/** A worker_thread running `body` (an async function body; `D` is dist/src/, `workerData` its data). */
function party(body: string, data: Record<string, unknown>): { worker: Worker; exited: Promise<void>; errors: string[] } {
  const worker = new Worker(
    `const { workerData, parentPort } = require('node:worker_threads');
     (async () => { const D = workerData.SRC; ${body} })().catch((e) => parentPort.postMessage(String((e && e.stack) || e)));`,
    { eval: true, workerData: { SRC, ...data } },
  );
  const errors: string[] = [];
  worker.on('message', (m) => errors.push(String(m)));
  worker.on('error', (e) => errors.push(e.message));
  return { worker, errors, exited: new Promise((r) => worker.once('exit', () => r())) };
}

/** Waits (event loop running) until `cond`; fails after 30 s, which only a hang reaches. */
async function until(cond: () => boolean, what: string): Promise<void> {
  const end = performance.now() + 30_000;
  while (!cond()) {
    if (performance.now() > end) throw new Error(`no ${what} within 30 s`);
    await sleep(2);
  }
}

/** The next request (recv() until the server has admitted the client), copied out. */
function take(server: IpcServer): { clientId: number; tag: number; text: string } {
  let r = server.recv();
  for (let pass = 0; r === null && pass < 1000; pass++) r = server.recv();
  assert.ok(r, 'a request is waiting');
  return { clientId: r.clientId, tag: r.tag, text: dec(r.payload) };
}

/** Takes one request, if one is waiting, and echoes it; returns it (or null). */
function serveOne(server: IpcServer): ReturnType<IpcServer['recv']> {
  const r = server.recv();
  if (r) server.reply(r.clientId, r.tag, r.payload);
  return r;
}

/** Client c's state word (0 free, 1 attached, 2 dead, 3 released, 4 closing, 5 claiming). */
function ipcState(server: IpcServer, c: number): number {
  const i32 = (server as unknown as { i32: Int32Array }).i32;
  return Atomics.load(i32, (192 + c * server.layout.block) >> 2);
}

test('ipc: a reply refused for its size leaves the count as it was: a closing client keeps its id until its last answer, and the next owner never gets it', () => {
  const server = IpcServer.create({ maxClients: 1, depth: 4, requestBytes: 8, responseBytes: 8 });
  const a = IpcClient.connect<string>(server.name);
  assert.ok(a.call(enc('A-0'), 'A0'));
  assert.ok(a.call(enc('A-1'), 'A1'));
  const r0 = take(server);
  const r1 = take(server);
  a.close(); // two answers owed: CLOSING
  assert.throws(() => server.reply(0, r0.tag, new Uint8Array(9)), (e: Coded) => e.code === 'EINVAL' && /9 bytes, responses are 8/.test(e.message));
  server.reply(0, r0.tag, enc('ansA-0'));
  assert.throws(() => IpcClient.connect(server.name), /already has maxClients = 1/, 'A-1 is still owed: the id stays taken');
  assert.throws(() => server.reply(0, 7, enc('x')), (e: Coded) => e.code === 'EINVAL' && /tag 7, out of \[0, 4\)/.test(e.message));
  server.reply(0, r1.tag, enc('ansA-1'));
  assert.throws(() => server.reply(0, r1.tag, enc('again')), (e: Coded) => e.code === 'EINVAL' && /no request waiting/.test(e.message));
  const b = IpcClient.connect<string>(server.name);
  assert.is(b.clientId, 0, 'released after the last answer');
  assert.ok(b.call(enc('B-0'), 'B0'));
  assert.ok(b.call(enc('B-1'), 'B1'));
  for (let k = 0; k < 2; k++) {
    const r = take(server);
    server.reply(r.clientId, r.tag, enc(`ans${r.text}`));
  }
  const got: string[] = [];
  assert.is(b.poll((u, r) => got.push(`${u}:${dec(r)}`)), 2);
  assert.equal(got, ['B0:ansB-0', 'B1:ansB-1']);
  b.close();
  server.close();
});

test('commit() after close() throws ECLOSED and never publishes into the id\'s next owner\'s ring (ipc and delegationrpc)', () => {
  const server = IpcServer.create({ maxClients: 1, depth: 4, requestBytes: 8, responseBytes: 8 });
  const a = IpcClient.connect<string>(server.name);
  a.begin('A')!.set(enc('from-A'));
  a.close(); // abandons the begun request: nothing in flight, the id is released
  const b = IpcClient.connect<string>(server.name);
  assert.is(b.clientId, a.clientId);
  assert.throws(() => a.commit(), (e: Coded) => e.code === 'ECLOSED' && /commit\(\) after close\(\)/.test(e.message));
  for (let pass = 0; pass < 100; pass++) assert.is(server.recv(), null, 'nothing of A reaches the server');
  assert.ok(b.call(enc('from-B'), 'B'));
  const r = take(server);
  assert.is(r.text, 'from-B');
  server.reply(r.clientId, r.tag, enc('ans-B'));
  const got: string[] = [];
  assert.is(b.poll((u, v) => got.push(`${u}:${dec(v)}`)), 1);
  assert.equal(got, ['B:ans-B']);
  assert.is(b.inFlight, 0);
  b.close();
  server.close();

  const dlg = DelegationServer.create({ maxClients: 1, ringDepth: 4, respDepth: 2, requestBytes: 8, responseBytes: 8 });
  const da = DelegationClient.connect<string>(dlg.name);
  da.begin('A')!.set(enc('from-A'));
  da.close();
  const db = DelegationClient.connect<string>(dlg.name);
  assert.is(db.clientId, da.clientId);
  assert.throws(() => da.commit(), (e: Coded) => e.code === 'ECLOSED' && /commit\(\) after close\(\)/.test(e.message));
  db.close();
  dlg.close();
});

/**
 * Stages the reaper's ABA: the server found client A attached and asks whether A's thread
 * lives; inside that question, A closes and its thread ends, and B claims the id. The
 * answer (A is dead) must not detach B.
 */
async function stageReapAba(connect: () => { close(): void }, reap: () => void, clientKind: 'IpcClient' | 'DelegationClient', name: string): Promise<{ close(): void }> {
  const ctl = new Int32Array(new SharedArrayBuffer(8));
  const a = party(
    `const { ${clientKind} } = await import(D + 'delegation/index.js');
     const c = ${clientKind}.connect(workerData.name);
     Atomics.store(workerData.ctl, 0, 1);
     while (Atomics.load(workerData.ctl, 1) === 0) Atomics.wait(workerData.ctl, 1, 0, 100);
     c.close();`,
    { name, ctl },
  );
  await until(() => Atomics.load(ctl, 0) === 1, 'client A attached');
  const real = native.threadAlive;
  let b: { close(): void } | undefined;
  native.threadAlive = (pid: number, tid: number, start: number) => {
    native.threadAlive = real; // once: B's own connect checks the server's thread
    Atomics.store(ctl, 1, 1);
    Atomics.notify(ctl, 1);
    const nap = new Int32Array(new SharedArrayBuffer(4));
    const end = performance.now() + 30_000;
    while (real.call(native, pid, tid, start) && performance.now() < end) Atomics.wait(nap, 0, 0, 1);
    b = connect();
    return real.call(native, pid, tid, start);
  };
  try {
    reap();
  } finally {
    native.threadAlive = real;
  }
  await a.exited;
  assert.equal(a.errors, []);
  assert.ok(b, 'the staged question was asked: B connected inside it');
  return b!;
}

test('the reaper never detaches an id\'s next owner: A released and B claimed while A\'s liveness was checked (ipc)', async () => {
  const server = IpcServer.create({ maxClients: 1, depth: 4, requestBytes: 8, responseBytes: 8, reapIntervalMs: 0 });
  let b: IpcClient<string> | undefined;
  await stageReapAba(() => (b = IpcClient.connect<string>(server.name)), () => server.ready(), 'IpcClient', server.name);
  assert.is(server.stats.clientsReaped, 0);
  assert.is(ipcState(server, 0), 1, 'B is still attached');
  assert.throws(() => IpcClient.connect(server.name), /already has maxClients = 1/, 'the id is not handed out twice');
  assert.ok(b!.call(enc('B'), 'B'));
  const r = take(server);
  server.reply(r.clientId, r.tag, enc(`ans-${r.text}`));
  const got: string[] = [];
  b!.poll((u, v) => got.push(`${u}:${dec(v)}`));
  assert.equal(got, ['B:ans-B']);
  b!.close();
  server.close();
});

test('the reaper never detaches an id\'s next owner: A released and B claimed while A\'s liveness was checked (delegationrpc)', async () => {
  const server = DelegationServer.create({ maxClients: 1, ringDepth: 4, respDepth: 2, requestBytes: 8, responseBytes: 8, reapIntervalMs: 1 });
  let b: DelegationClient<string> | undefined;
  const reap = () => (server as unknown as { maybeReap(): void }).maybeReap();
  await stageReapAba(() => (b = DelegationClient.connect<string>(server.name)), reap, 'DelegationClient', server.name);
  assert.is(server.stats.clientsReaped, 0);
  assert.throws(() => DelegationClient.connect(server.name), /max_clients = 1/, 'the id is not handed out twice');
  assert.ok(b!.call(enc('B'), 'B'));
  assert.is(server.poll(), 1);
  const e = server.recv()!;
  server.reply(e.clientId, e.respSlot, enc(`ans-${dec(e.payload)}`));
  server.advanceTail();
  const got: string[] = [];
  b!.poll((u, v) => got.push(`${u}:${dec(v)}`));
  assert.equal(got, ['B:ans-B']);
  b!.close();
  server.close();
});

test('ipc: a client that refills as it is drained cannot keep the server: a turn takes at most depth requests', () => {
  const depth = 4;
  const server = IpcServer.create({ maxClients: 2, depth, requestBytes: 8, responseBytes: 8 });
  const a = IpcClient.connect<number>(server.name);
  const b = IpcClient.connect<string>(server.name);
  server.ready(); // admits both
  const req = new Uint8Array(8);
  while (a.call(req, 0));
  assert.ok(b.call(req, 'b'));
  let answeredAt = -1;
  for (let i = 0; i < 100 && answeredAt < 0; i++) {
    const r = server.recv();
    assert.ok(r, 'requests are waiting');
    server.reply(r.clientId, r.tag, r.payload);
    a.poll();
    while (a.call(req, 0)); // a refills at once, as a pipelined client on another core does
    if (b.poll() === 1) answeredAt = i;
  }
  assert.ok(answeredAt >= 0 && answeredAt <= depth, `b was answered at recv ${answeredAt} (never: -1)`);
  a.close();
  b.close();
  server.close();
});

test('ipc: a long-idle client is still looked at while the others keep the server busy', () => {
  const server = IpcServer.create({ maxClients: 4, depth: 8, requestBytes: 8, responseBytes: 8 });
  const a = IpcClient.connect<number>(server.name);
  const quiet = IpcClient.connect<string>(server.name);
  const b = IpcClient.connect<number>(server.name);
  const req = new Uint8Array(8);
  const serve = () => serveOne(server);
  // Every client idle for 64 looks, then a and b take turns so that no pass is ever empty:
  // the skip count once advanced only on empty passes, and stayed where it skipped `quiet`.
  server.ready();
  for (let i = 0; i < 65; i++) server.recv();
  a.call(req, 0);
  b.call(req, 0);
  while (!serve());
  serve();
  a.poll();
  b.poll();
  serve();
  assert.ok(quiet.call(req, 'quiet'));
  let answered = false;
  for (let i = 0; i < 1000 && !answered; i++) {
    a.call(req, 0);
    b.call(req, 0);
    serve();
    serve();
    a.poll();
    b.poll();
    answered = quiet.poll() === 1;
  }
  assert.ok(answered, 'the quiet client\'s call was answered');
  for (const c of [a, quiet, b]) c.close();
  server.close();
});

test('ipc: a busy server (never an empty pass) still admits new clients and reaps dead ones', async () => {
  const server = IpcServer.create({ maxClients: 4, depth: 8, requestBytes: 8, responseBytes: 8, reapIntervalMs: 0 });
  const a = IpcClient.connect<number>(server.name);
  const b = IpcClient.connect<number>(server.name);
  const req = new Uint8Array(8);
  const serve = () => serveOne(server);
  const busy = (rounds: number, done: () => boolean) => {
    for (let i = 0; i < rounds && !done(); i++) {
      a.call(req, 0);
      b.call(req, 0);
      assert.ok(serve() && serve(), 'the server is never idle');
      a.poll();
      b.poll();
    }
  };
  server.ready();
  busy(10, () => false);
  // A client connects and its thread ends without close(); the server sees nothing of it
  // meanwhile (this thread serves no requests while it awaits).
  const dead = party(`const { IpcClient } = await import(D + 'delegation/index.js'); IpcClient.connect(workerData.name);`, { name: server.name });
  await dead.exited;
  assert.equal(dead.errors, []);
  const late = IpcClient.connect<string>(server.name);
  assert.ok(late.call(req, 'late'));
  let answered = false;
  busy(4096, () => (answered ||= late.poll() === 1) && server.stats.clientsReaped > 0);
  assert.ok(answered, 'the client that connected under load was admitted and answered');
  assert.is(server.stats.clientsReaped, 1, 'the dead client was reaped under load');
  for (const c of [a, b, late]) c.close();
  server.close();
});

test('ipc: a client that closes with calls in flight and then exits has every call served, then its id is freed', async () => {
  const server = IpcServer.create({ maxClients: 1, depth: 16, requestBytes: 8, responseBytes: 8, reapIntervalMs: 0 });
  const w = party(
    `const { IpcClient } = await import(D + 'delegation/index.js');
     const c = IpcClient.connect(workerData.name);
     for (let i = 0; i < 10; i++) c.call(Uint8Array.of(i), i);
     c.close();`,
    { name: server.name },
  );
  await w.exited;
  assert.equal(w.errors, []);
  const executed: number[] = [];
  for (let pass = 0; pass < 100 && executed.length < 10; pass++) {
    server.ready(); // reaps (reapIntervalMs 0): the closing client's thread is gone
    for (let r = server.recv(); r !== null; r = server.recv()) {
      executed.push(r.payload[0]);
      server.reply(r.clientId, r.tag, r.payload);
    }
  }
  assert.equal(executed, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  assert.is(server.stats.clientsReaped, 0, 'a closing client is served, not reaped');
  const next = IpcClient.connect<string>(server.name);
  assert.is(next.clientId, 0, 'freed after the last answer');
  assert.ok(next.call(enc('next'), 'next'));
  const r = take(server);
  server.reply(r.clientId, r.tag, enc(`ans-${r.text}`));
  const got: string[] = [];
  next.poll((u, v) => got.push(`${u}:${dec(v)}`));
  assert.equal(got, ['next:ans-next']);
  next.close();
  server.close();
});

/** An IpcClient.connect in a worker, held while its id is CLAIMING at the point `hook` installs. */
function heldConnect(name: string, ctl: Int32Array, hook: string): ReturnType<typeof party> {
  return party(
    `const { IpcClient } = await import(D + 'delegation/index.js');
     const { openSegment } = await import(D + 'host/segments.js');
     const { native } = await import(D + 'native/binding.js');
     const seg = new Int32Array(openSegment(workerData.name));
     const ctl = workerData.ctl;
     const claiming = () => Atomics.load(seg, 192 >> 2) === 5;
     const hold = () => {
       Atomics.store(ctl, 0, 1);
       Atomics.notify(ctl, 0);
       while (Atomics.load(ctl, 1) === 0) Atomics.wait(ctl, 1, 0, 100);
     };
     ${hook}
     const c = IpcClient.connect(workerData.name);
     c.call(new Uint8Array(8), 0);
     while (c.poll() === 0) c.waitSync({ timeoutMs: 30000 });
     c.close();`,
    { name, ctl },
  );
}

test('ipc: a client killed while it claims its id (its views being built) is reaped, and the id reused', async () => {
  const server = IpcServer.create({ maxClients: 1, depth: 64, requestBytes: 8, responseBytes: 8, reapIntervalMs: 0 });
  const ctl = new Int32Array(new SharedArrayBuffer(8));
  // The constructor fills its table of user data: hold the thread there, after the claim.
  const w = heldConnect(server.name, ctl, `
    const fill = Array.prototype.fill;
    Array.prototype.fill = function (...args) {
      if (claiming()) { Array.prototype.fill = fill; hold(); }
      return fill.apply(this, args);
    };`);
  await until(() => Atomics.load(ctl, 0) === 1, 'the worker held inside connect');
  assert.is(ipcState(server, 0), 5, 'held while CLAIMING');
  await w.worker.terminate();
  server.ready();
  assert.is(server.stats.clientsReaped, 1);
  assert.is(ipcState(server, 0), 3, 'released');
  const next = IpcClient.connect<string>(server.name);
  assert.is(next.clientId, 0);
  assert.ok(next.call(enc('next'), 'next'));
  const r = take(server);
  server.reply(r.clientId, r.tag, enc(r.text));
  assert.is(next.poll(), 1);
  next.close();
  server.close();
});

test('delegationrpc: a client killed while it claims its id (its views being built) is reaped, and the id reused', async () => {
  const server = DelegationServer.create({ maxClients: 1, ringDepth: 64, respDepth: 4, requestBytes: 8, responseBytes: 8, reapIntervalMs: 1 });
  const stateWord = (server as unknown as { clientBase(c: number): number }).clientBase(0);
  const i32 = (server as unknown as { i32: Int32Array }).i32;
  const ctl = new Int32Array(new SharedArrayBuffer(8));
  // The constructor fills its table of user data: hold the thread there, after the claim.
  const w = party(
    `const { DelegationClient } = await import(D + 'delegation/index.js');
     const { openSegment } = await import(D + 'host/segments.js');
     const seg = new Int32Array(openSegment(workerData.name));
     const ctl = workerData.ctl;
     const fill = Array.prototype.fill;
     Array.prototype.fill = function (...args) {
       if (Atomics.load(seg, workerData.stateWord) === 5) {
         Array.prototype.fill = fill;
         Atomics.store(ctl, 0, 1);
         Atomics.notify(ctl, 0);
         while (Atomics.load(ctl, 1) === 0) Atomics.wait(ctl, 1, 0, 100);
       }
       return fill.apply(this, args);
     };
     DelegationClient.connect(workerData.name);`,
    { name: server.name, ctl, stateWord },
  );
  await until(() => Atomics.load(ctl, 0) === 1, 'the worker held inside connect');
  assert.is(Atomics.load(i32, stateWord), 5, 'held while CLAIMING');
  await w.worker.terminate();
  // The server reaps from its poll loop (every 1024th empty poll, reapIntervalMs apart).
  const end = performance.now() + 30_000;
  while (server.stats.clientsReaped === 0 && performance.now() < end) server.poll();
  assert.is(server.stats.clientsReaped, 1);
  assert.is(Atomics.load(i32, stateWord), 3, 'released');
  const next = DelegationClient.connect<string>(server.name);
  assert.is(next.clientId, 0);
  assert.ok(next.call(enc('next'), 'next'));
  for (let k = 0; k < 1000 && server.poll() === 0; k++);
  for (let e = server.recv(); e !== null; e = server.recv()) server.reply(e.clientId, e.respSlot, e.payload);
  server.advanceTail();
  const got: string[] = [];
  next.poll((u) => got.push(u));
  assert.equal(got, ['next']);
  next.close();
  server.close();
});

test('ipc: a live claimer that has not written its owner yet is left alone by the reaper', async () => {
  const server = IpcServer.create({ maxClients: 1, depth: 4, requestBytes: 8, responseBytes: 8, reapIntervalMs: 0 });
  const ctl = new Int32Array(new SharedArrayBuffer(8));
  // Its first owner write asks the native core who it is: hold the thread there.
  const w = heldConnect(server.name, ctl, `
    const identity = native.threadIdentity;
    native.threadIdentity = () => {
      if (claiming()) { native.threadIdentity = identity; hold(); }
      return identity.call(native);
    };`);
  await until(() => Atomics.load(ctl, 0) === 1, 'the worker held inside connect');
  for (let k = 0; k < 3; k++) server.ready();
  assert.is(server.stats.clientsReaped, 0);
  assert.is(ipcState(server, 0), 5, 'still CLAIMING');
  Atomics.store(ctl, 1, 1);
  Atomics.notify(ctl, 1);
  let served = 0;
  await until(() => {
    for (let r = server.recv(); r !== null; r = server.recv(), served++) server.reply(r.clientId, r.tag, r.payload);
    return served === 1;
  }, 'the claimer\'s call');
  await w.exited;
  assert.equal(w.errors, []);
  server.close();
});

test('Flux: a joining node is never seen joined without its owner, so a caller waiting on it does not report it dead', async () => {
  const n0 = FluxNode.create<string>({ nodes: 2, payloadBytes: 8 });
  assert.ok(n0.call(1, enc('early'), 'early call')); // node 1 has not joined yet
  const ctl = new Int32Array(new SharedArrayBuffer(12));
  const w = party(
    `const { native } = await import(D + 'native/binding.js');
     const { FluxNode } = await import(D + 'delegation/index.js');
     const ctl = workerData.ctl;
     const identity = native.threadIdentity;
     native.threadIdentity = () => { // join's owner write: hold the thread there
       native.threadIdentity = identity;
       Atomics.store(ctl, 0, 1);
       while (Atomics.load(ctl, 1) === 0) Atomics.wait(ctl, 1, 0, 100);
       return identity.call(native);
     };
     const n1 = FluxNode.join(workerData.name, 1);
     for (let r = n1.tryRecv(); ; r = n1.tryRecv()) {
       if (r) { n1.reply(r.replyToken, r.payload); break; }
       n1.waitSync({ timeoutMs: 30000 });
     }
     while (Atomics.load(ctl, 2) === 0) Atomics.wait(ctl, 2, 0, 100);
     n1.close();`,
    { name: n0.name, ctl },
  );
  await until(() => Atomics.load(ctl, 0) === 1, 'node 1 held inside join');
  const i32 = (n0 as unknown as { i32: Int32Array }).i32;
  assert.is.not(Atomics.load(i32, (128 + 64) >> 2), 0, 'node 1 has claimed its line');
  // What a wait does between sleeps: node 1 is joining, not dead.
  try {
    (n0 as unknown as { checkPeers(what: string): void }).checkPeers('waitSync');
  } catch (e) {
    assert.unreachable(`a joining node was reported gone: ${(e as Error).message}`);
  }
  Atomics.store(ctl, 1, 1);
  await n0.wait({ timeoutMs: 30_000 });
  const got: string[] = [];
  n0.poll((token, reply) => got.push(`${token}:${dec(reply)}`));
  assert.equal(got, ['early call:early']);
  Atomics.store(ctl, 2, 1);
  await w.exited;
  assert.equal(w.errors, []);
  n0.close();
});

test('ipc and Flux: a response stays intact through its callback even when the callback calls again (the call is in flight until it returns)', () => {
  const s = IpcServer.create({ maxClients: 1, depth: 1, requestBytes: 8, responseBytes: 8 });
  const c = IpcClient.connect<number>(s.name);
  assert.ok(c.call(enc('q0'), 0));
  const q = take(s);
  s.reply(q.clientId, q.tag, enc('resp-0'));
  let read = '';
  let refilled: boolean | undefined;
  const delivered = c.poll((_u, resp) => {
    if (refilled !== undefined) return; // once (where the refill is taken, it would be answered again and again)
    refilled = c.call(enc('q1'), 1); // a closed loop refills from its callback
    for (let r = s.recv(); r !== null; r = s.recv()) s.reply(r.clientId, r.tag, enc('resp-1')); // the server answers meanwhile
    read = dec(resp);
  });
  assert.is(read, 'resp-0');
  assert.is(delivered, 1);
  assert.is(refilled, false, 'depth 1: the call being delivered still holds the only tag');
  assert.is(c.inFlight, 0);
  assert.ok(c.call(enc('q1'), 1), 'the tag is free once the callback returned');
  const q1 = take(s);
  s.reply(q1.clientId, q1.tag, enc('resp-1'));
  assert.throws(() => c.poll(() => {
    throw new Error('handler failed');
  }), /handler failed/);
  assert.is(c.inFlight, 0, 'a callback that throws frees its tag all the same');
  c.close();
  s.close();

  const n0 = FluxNode.create<number>({ nodes: 2, capacity: 1, maxInflight: 1, payloadBytes: 8 });
  const n1 = FluxNode.join<number>(n0.name, 1);
  assert.ok(n1.call(0, enc('f0'), 0));
  const fr = n0.tryRecv()!;
  n0.reply(fr.replyToken, enc('rep-0'));
  read = '';
  refilled = undefined;
  const replies = n1.poll((_t, reply) => {
    if (refilled !== undefined) return;
    refilled = n1.call(0, enc('f1'), 1);
    for (let r = n0.tryRecv(); r !== null; r = n0.tryRecv()) n0.reply(r.replyToken, enc('rep-1'));
    read = dec(reply);
  });
  assert.is(read, 'rep-0');
  assert.is(replies, 1);
  assert.is(refilled, false, 'maxInflight 1: the call being delivered still holds the only tag');
  assert.is(n1.inFlight, 0);
  n1.close();
  n0.close();
});

test('layouts of 2 GiB or more are refused at creation with EINVAL naming the sizes and the limit', () => {
  const refused = (what: string, make: () => unknown, total: number, sizes: RegExp) => {
    assert.throws(make, (e: Coded) => e.code === 'EINVAL' && e.message.includes(`${total} bytes`) && /2\^31 = 2147483648 bytes/.test(e.message) && sizes.test(e.message), what);
  };
  refused('ipc', () => IpcServer.create({ maxClients: 1, depth: 65536, requestBytes: 16384, responseBytes: 16384 }), 2155872512, /depth 65536.*requestBytes 16384/);
  refused('Flux', () => FluxNode.create({ nodes: 16, payloadBytes: 4096 }), 2181039232, /nodes 16.*capacity 1024.*payloadBytes 4096/);
  refused('delegationrpc', () => DelegationServer.create({ maxClients: 1, ringDepth: 1 << 17, respDepth: 1, requestBytes: 16384 }), 256 + (1 << 17) * 16448 + 64 + 64 + 128, /ringDepth 131072/);
});

/** A delegationrpc server with one client whose two calls (A0, A1) the server has taken. */
function twoTaken(respDepth: number) {
  const server = DelegationServer.create({ maxClients: 1, ringDepth: 8, respDepth, requestBytes: 8, responseBytes: 8 });
  const a = DelegationClient.connect<string>(server.name);
  assert.ok(a.call(enc('A-0'), 'A0'));
  assert.ok(a.call(enc('A-1'), 'A1'));
  assert.is(server.poll(), 2);
  const r0 = { ...server.recv()! };
  const r1 = { ...server.recv()! };
  server.advanceTail();
  return { server, a, r0, r1 };
}

test('delegationrpc: a reply refused for its size, or owing nothing, leaves the count as it was: the id stays taken until the last answer, and the next owner never gets it', () => {
  const { server, a, r0, r1 } = twoTaken(2);
  a.close(); // two answers owed: CLOSING
  assert.throws(() => server.reply(r0.clientId, r0.respSlot, new Uint8Array(9)), (e: Coded) => e.code === 'EINVAL' && /reply of 9 bytes/.test(e.message));
  server.reply(r0.clientId, r0.respSlot, enc('ansA-0'));
  assert.throws(() => DelegationClient.connect(server.name), /max_clients = 1/, 'A-1 is still owed: the id stays taken');
  server.reply(r1.clientId, r1.respSlot, enc('ansA-1'));
  assert.throws(() => server.reply(r1.clientId, r1.respSlot, enc('again')), (e: Coded) => e.code === 'EINVAL' && /no request waiting/.test(e.message));
  const b = DelegationClient.connect<string>(server.name);
  assert.is(b.clientId, 0, 'released after the last answer');
  assert.ok(b.call(enc('B-0'), 'B0'));
  assert.is(server.poll(), 1);
  const rb = server.recv()!;
  server.reply(rb.clientId, rb.respSlot, enc('ansB-0'));
  const got: string[] = [];
  assert.is(b.poll((u, r) => got.push(`${u}:${dec(r)}`)), 1);
  assert.equal(got, ['B0:ansB-0']);
  b.close();
  server.close();
});

test('a second reply to one request is refused while another request of the client waits (delegationrpc and ipc): the slot\'s next call never gets it', () => {
  const { server, a, r0, r1 } = twoTaken(4);
  server.reply(r0.clientId, r0.respSlot, enc('ansA-0'));
  // The per-client count alone (one answer still owed, A-1's) let this through.
  assert.throws(() => server.reply(r0.clientId, r0.respSlot, enc('dup')), (e: Coded) => e.code === 'EINVAL' && new RegExp(`response slot ${r0.respSlot}, which has no request waiting`).test(e.message));
  server.reply(r1.clientId, r1.respSlot, enc('ansA-1'));
  const got: string[] = [];
  assert.is(a.poll((u, r) => got.push(`${u}:${dec(r)}`)), 2);
  assert.equal(got.sort(), ['A0:ansA-0', 'A1:ansA-1']);
  a.close();
  server.close();

  const ipc = IpcServer.create({ maxClients: 1, depth: 4, requestBytes: 8, responseBytes: 8 });
  const b = IpcClient.connect<string>(ipc.name);
  assert.ok(b.call(enc('B-0'), 'B0'));
  assert.ok(b.call(enc('B-1'), 'B1'));
  const q0 = take(ipc);
  const q1 = take(ipc);
  ipc.reply(0, q0.tag, enc('ansB-0'));
  assert.throws(() => ipc.reply(0, q0.tag, enc('dup')), (e: Coded) => e.code === 'EINVAL' && new RegExp(`tag ${q0.tag}, which has no request waiting`).test(e.message));
  ipc.reply(0, q1.tag, enc('ansB-1'));
  const seen: string[] = [];
  assert.is(b.poll((u, r) => seen.push(`${u}:${dec(r)}`)), 2);
  assert.equal(seen, ['B0:ansB-0', 'B1:ansB-1']);
  b.close();
  ipc.close();
});

test('delegationrpc: a response handler that throws gets its response once; the call is no longer in flight', () => {
  const server = DelegationServer.create({ maxClients: 1, ringDepth: 8, respDepth: 4, requestBytes: 8, responseBytes: 8 });
  const a = DelegationClient.connect<string>(server.name);
  assert.ok(a.call(enc('A-0'), 'A0'));
  assert.is(server.poll(), 1);
  const r = server.recv()!;
  server.reply(r.clientId, r.respSlot, enc('ans'));
  server.advanceTail();
  let calls = 0;
  assert.throws(() => a.poll(() => {
    calls++;
    throw new Error('handler failed');
  }), /handler failed/);
  assert.is(a.poll(() => calls++), 0, 'the response is not handed out again');
  assert.is(calls, 1);
  assert.is(a.inFlight, 0);
  assert.ok(a.call(enc('A-1'), 'A1'), 'its slot is free again');
  a.close();
  server.close();
});

test("a closed client's poll and wait throw ECLOSED: they never take the answers of the id's next owner (delegationrpc and ipc)", async () => {
  {
    const server = DelegationServer.create({ maxClients: 1, ringDepth: 8, respDepth: 2, requestBytes: 8, responseBytes: 8 });
    const a = DelegationClient.connect<string>(server.name);
    assert.ok(a.call(enc('A-0'), 'A0'));
    a.close(); // CLOSING with one call in flight
    assert.is(server.poll(), 1);
    const ra = server.recv()!;
    server.reply(ra.clientId, ra.respSlot, enc('ansA-0')); // the last answer: the id is released
    server.advanceTail();
    const b = DelegationClient.connect<string>(server.name);
    assert.is(b.clientId, a.clientId, 'the next owner has the id');
    assert.ok(b.call(enc('B-0'), 'B0'));
    assert.is(server.poll(), 1);
    const rb = server.recv()!;
    server.reply(rb.clientId, rb.respSlot, enc('ansB-0'));
    assert.throws(() => a.poll(), (e: Coded) => e.code === 'ECLOSED' && /after close\(\)/.test(e.message));
    assert.throws(() => a.waitSync({ timeoutMs: 100 }), (e: Coded) => e.code === 'ECLOSED');
    await a.wait({ timeoutMs: 100 }).then(() => assert.unreachable('wait after close resolved'), (e: Coded) => assert.is(e.code, 'ECLOSED'));
    const got: string[] = [];
    assert.is(b.poll((u, r) => got.push(`${u}:${dec(r)}`)), 1);
    assert.equal(got, ['B0:ansB-0'], "B's answer reached B");
    b.close();
    server.close();
  }
  {
    const server = IpcServer.create({ maxClients: 1, depth: 2, requestBytes: 8, responseBytes: 8 });
    const a = IpcClient.connect<string>(server.name);
    assert.ok(a.call(enc('A-0'), 'A0'));
    const ra = take(server);
    a.close();
    server.reply(ra.clientId, ra.tag, enc('ansA-0'));
    const b = IpcClient.connect<string>(server.name);
    assert.is(b.clientId, a.clientId, 'the next owner has the id');
    assert.ok(b.call(enc('B-0'), 'B0'));
    const rb = take(server);
    server.reply(rb.clientId, rb.tag, enc('ansB-0'));
    assert.throws(() => a.poll(), (e: Coded) => e.code === 'ECLOSED' && /after close\(\)/.test(e.message));
    assert.throws(() => a.waitSync({ timeoutMs: 100 }), (e: Coded) => e.code === 'ECLOSED');
    const got: string[] = [];
    assert.is(b.poll((u, r) => got.push(`${u}:${dec(r)}`)), 1);
    assert.equal(got, ['B0:ansB-0'], "B's answer reached B");
    b.close();
    server.close();
  }
});

test('a client that only polls (never waits) learns that its server closed: ServerDisconnected from poll() and from a call with no free slot (delegationrpc, ipc, Flux)', () => {
  const isGone = (e: unknown) => e instanceof Error && e.name === 'ServerDisconnected';
  {
    const server = DelegationServer.create({ maxClients: 1, ringDepth: 8, respDepth: 1, requestBytes: 8, responseBytes: 8 });
    const c = DelegationClient.connect<number>(server.name);
    assert.ok(c.call(enc('x'), 0));
    server.close();
    assert.throws(() => c.call(enc('y'), 1), isGone, 'a call with no free slot');
    assert.throws(() => c.poll(), isGone, 'an empty poll');
    c.close();
  }
  {
    const server = IpcServer.create({ maxClients: 1, depth: 1, requestBytes: 8, responseBytes: 8 });
    const c = IpcClient.connect<number>(server.name);
    assert.ok(c.call(enc('x'), 0));
    server.close();
    assert.throws(() => c.call(enc('y'), 1), isGone, 'a call with no free slot');
    assert.throws(() => {
      for (let i = 0; i < 1e6; i++) c.poll(); // the flag is checked at each empty poll
    }, isGone, 'an empty poll');
    c.close();
  }
  {
    const n0 = FluxNode.create<number>({ nodes: 2, capacity: 4, maxInflight: 1, payloadBytes: 8 });
    const n1 = FluxNode.join<number>(n0.name, 1);
    assert.ok(n1.call(0, enc('x'), 0));
    n0.close();
    assert.throws(() => n1.call(0, enc('y'), 1), (e: unknown) => isGone(e) && /left the mesh with 1 call/.test((e as Error).message));
    n1.close();
  }
});

test('Flux: a node that keeps its ring to us full cannot starve another: receives go round robin', () => {
  const n0 = FluxNode.create<number>({ nodes: 3, capacity: 8, maxInflight: 8, payloadBytes: 8 });
  const n1 = FluxNode.join<number>(n0.name, 1);
  const n2 = FluxNode.join<number>(n0.name, 2);
  while (n1.call(0, enc('one'), 1));
  assert.ok(n2.call(0, enc('two'), 2));
  let answeredAt = -1;
  for (let i = 0; i < 50 && answeredAt < 0; i++) {
    const r = n0.tryRecv();
    assert.ok(r, 'calls are waiting');
    n0.reply(r.replyToken, r.payload);
    n1.poll();
    while (n1.call(0, enc('one'), 1)); // node 1 refills at once
    if (n2.poll() === 1) answeredAt = i;
  }
  assert.ok(answeredAt >= 0 && answeredAt <= 2, `node 2 was answered at receive ${answeredAt} (never: -1)`);
  n1.close();
  n2.close();
  n0.close();
});

test.run();
