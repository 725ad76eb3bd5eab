/**
 * The ofi provider against a peer in a separate real process (test/nic/workers/ofi-peer.ts), over
 * libfabric tcp;ofi_rxm and shm: ordered WRITE_IMM streams, READ, refused accesses (bad key,
 * out of bounds, deregistered) leaving target memory unchanged, credit back-pressure, a
 * SIGKILLed peer, and quick latency/bandwidth numbers (printed, not asserted).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { native } from '../../src/native/binding.js';
import { createDevice, sweepProcessSegments, CompletionBatch, Opcode, Status, statusName, type Device, type MemoryRegion, type QueuePair, type RemoteRegion } from '../../src/nic/index.js';
import { DESCRIPTOR_KEY_OFFSET } from '../../src/nic/ofi/wire.js';
import { prng, randomPool } from '../../harness/data.js';
import { keepFabricMoving } from '../../src/rendezvous/full-mesh.js';
import { readFile } from 'node:fs/promises';
import { createServer, connect } from 'node:net';
import v8 from 'node:v8';
import vm from 'node:vm';

const HELPER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'workers', 'ofi-peer.js');
const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
const unhex = (s: string) => new Uint8Array(Buffer.from(s, 'hex'));

interface Pair {
  child: ChildProcess;
  dev: Device;
  mr: MemoryRegion;
  qp: QueuePair;
  remote: RemoteRegion;
  desc: Uint8Array;
  desc2: Uint8Array;
  next(type: string, timeoutMs?: number): Promise<Record<string, unknown>>;
  stop(): Promise<void>;
}

/** Forks a peer playing `role`, connects a QP to it, and returns both ends. */
async function pair(provider: string, role: string, opts: Record<string, number> = {}, devOpts: { opTimeoutMs?: number; bytes?: number } = {}): Promise<Pair> {
  const child = fork(HELPER, [provider, role, JSON.stringify(opts)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const inbox: Record<string, unknown>[] = [];
  let wake: (() => void) | undefined;
  let failure: Error | undefined;
  child.on('message', (m: Record<string, unknown>) => {
    if (m.type === 'error') failure = new Error(`peer: ${String(m.message)}`);
    inbox.push(m);
    wake?.();
  });
  child.on('exit', () => {
    // A peer killed with SIGKILL (the dead-peer test) cannot unlink its libfabric shm region.
    sweepProcessSegments(child.pid!);
    wake?.();
  });
  const next = async (type: string, timeoutMs = 60_000): Promise<Record<string, unknown>> => {
    const until = Date.now() + timeoutMs;
    for (;;) {
      if (failure) throw failure;
      const i = inbox.findIndex((m) => m.type === type);
      if (i >= 0) return inbox.splice(i, 1)[0];
      if (Date.now() > until) throw new Error(`no '${type}' from the peer within ${timeoutMs} ms`);
      await new Promise<void>((r) => {
        wake = r;
        setTimeout(r, 50);
      });
    }
  };
  const hello = await next('hello');
  const dev = await createDevice({ provider, label: 'rank 0', opTimeoutMs: devOpts.opTimeoutMs });
  const mr = dev.allocate(devOpts.bytes ?? 1 << 21);
  const qp = dev.createQueuePair({ peerLabel: 'rank 1' });
  qp.connect(unhex(hello.addr as string));
  const desc = unhex(hello.desc as string);
  const remote = qp.importRegion(desc);
  child.send({ type: 'connect', addr: hex(qp.address()), desc: hex(mr.descriptor()) });
  await next('ready');
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.send({ type: 'stop' });
      await new Promise<void>((r) => {
        const t = setTimeout(() => (child.kill('SIGKILL'), r()), 3000);
        child.once('exit', () => (clearTimeout(t), r()));
      });
    }
    dev.close();
  };
  return { child, dev, mr, qp, remote, desc, desc2: unhex(hello.desc2 as string), next, stop };
}

const batch = new CompletionBatch(256);

/** Polls until `done`, handing each completion to `handle`. */
async function pump(dev: Device, handle: (i: number) => void, done: () => boolean, timeoutMs = 30_000): Promise<void> {
  const until = performance.now() + timeoutMs;
  while (!done()) {
    const k = dev.cq.poll(batch);
    for (let i = 0; i < k; i++) handle(i);
    if (k === 0 && !done()) {
      if (performance.now() > until) throw new Error(`no progress for ${timeoutMs} ms`);
      await dev.cq.wait({ timeoutMs: Math.max(1, until - performance.now()) });
    }
  }
}

/** The error code `f` throws, or 'no error'. */
function code(f: () => void): string | undefined {
  try {
    f();
  } catch (err) {
    return (err as { code?: string }).code;
  }
  return 'no error';
}

function mustSucceed(i: number): void {
  if (batch.status[i] !== Status.SUCCESS) throw new Error(`unexpected ${statusName(batch.status[i])}: ${batch.errors[i]?.message}`);
}

/** The stream the 'sink' role checks: random lengths, offsets and immediates from prng(99). */
async function stream(p: Pair, count: number): Promise<void> {
  const slots = 64, maxLen = 4096;
  p.mr.bytes.set(randomPool(1 << 20, 7));
  const gen = prng(99);
  let signaled = 0, completed = 0;
  for (let i = 0; i < count; i++) {
    const len = gen() % (maxLen + 1), off = gen() % ((1 << 20) - maxLen), imm = gen();
    const sig = (i & 63) === 63 || i === count - 1;
    if (sig) signaled++;
    p.qp.postWriteImm(p.mr, off, p.remote, (i % slots) * maxLen, len, imm, i, sig);
    while (p.qp.pendingOps > 256) {
      const k = p.dev.cq.poll(batch);
      for (let j = 0; j < k; j++) (mustSucceed(j), completed++);
      if (k === 0) await p.dev.cq.wait({ timeoutMs: 30_000 });
    }
  }
  await pump(p.dev, (j) => (mustSucceed(j), completed++), () => completed === signaled);
  const r = await p.next('result');
  assert.equal(r.errors, []);
  assert.is(r.received, count);
}

async function readBack(p: Pair): Promise<void> {
  // The peer's region starts as 0x5a everywhere; write a pattern, read it back.
  const src = p.mr.bytes;
  for (let i = 0; i < 4096; i++) src[i] = (i * 7) & 255;
  p.qp.postWrite(p.mr, 0, p.remote, 8192, 4096, 1, false);
  p.qp.postRead(p.mr, 65536, p.remote, 8192 - 16, 4096 + 32, 2, true);
  let done = false;
  await pump(p.dev, (i) => (mustSucceed(i), assert.is(batch.opcode[i], Opcode.READ), assert.is(batch.wrId[i], 2), (done = true)), () => done);
  const got = src.subarray(65536, 65536 + 4096 + 32);
  for (let i = 0; i < 16; i++) assert.is(got[i], 0x5a);
  for (let i = 0; i < 4096; i++) if (got[16 + i] !== ((i * 7) & 255)) assert.unreachable(`byte ${i} read back as ${got[16 + i]}`);
  for (let i = 0; i < 16; i++) assert.is(got[16 + 4096 + i], 0x5a);
}

const providers: [string, string][] = [['ofi:tcp', 'tcp;ofi_rxm'], ['ofi:shm', 'shm']];
const available = native.ofi.available ? native.ofi.providers?.() ?? [] : [];

const api = suite('ofi provider: local API checks');
api('malformed address and descriptor bytes are EPROTO; waits time out and abort', async () => {
  for (const [provider, fabric] of providers) {
    if (!available.includes(fabric)) continue;
    const dev = await createDevice({ provider, label: 'rank 0' });
    try {
      const qp = dev.createQueuePair({ peerLabel: 'rank 1' });
      const good = qp.address();
      assert.is(code(() => qp.connect(new Uint8Array(10))), 'EPROTO');
      assert.is(code(() => qp.connect(good.subarray(0, good.length - 1))), 'EPROTO');
      const bad = new Uint8Array(good);
      bad[0] ^= 1;
      assert.is(code(() => qp.connect(bad)), 'EPROTO');
      const peer = dev.createQueuePair({ peerLabel: 'self' });
      qp.connect(peer.address());
      assert.is(code(() => qp.importRegion(new Uint8Array(72))), 'EPROTO');
      assert.is(code(() => qp.importRegion(new Uint8Array(5))), 'EPROTO');
      // Memory that may move as it grows cannot be registered (peers would write where it was).
      const Resizable = ArrayBuffer as unknown as new (n: number, o: { maxByteLength: number }) => ArrayBuffer;
      assert.is(code(() => dev.register(new Uint8Array(new Resizable(4096, { maxByteLength: 1 << 20 })))), 'EINVAL');
      const t0 = performance.now();
      assert.is(code(() => dev.cq.waitSync({ timeoutMs: 100 })), 'ETIMEDOUT');
      assert.ok(performance.now() - t0 < 1000);
      const rejected = await dev.cq.wait({ timeoutMs: 100 }).then(() => 'resolved', (e: { code: string }) => e.code);
      assert.is(rejected, 'ETIMEDOUT');
      const ac = new AbortController();
      setTimeout(() => ac.abort(), 30);
      assert.is(await dev.cq.wait({ timeoutMs: 5000, signal: ac.signal }).then(() => 'resolved', (e: { code: string }) => e.code), 'EABORTED');
    } finally {
      dev.close();
    }
  }
});
/** A QP of `dev` connected to a second QP of the same device (label 'self'). */
function loopback(dev: Device): QueuePair {
  const qp = dev.createQueuePair({ peerLabel: 'self' });
  const peer = dev.createQueuePair({ peerLabel: 'rank 0 (loop)' });
  qp.connect(peer.address());
  peer.connect(qp.address());
  return qp;
}

/** Runs V8's full GC three times, 20 ms apart (the allocator's frees and finalizers run). */
async function collectGarbage(): Promise<void> {
  v8.setFlagsFromString('--expose-gc');
  const gc = vm.runInNewContext('gc') as () => void;
  for (let i = 0; i < 3; i++) {
    gc();
    await new Promise((r) => setTimeout(r, 20));
  }
}

api('a registered heap buffer that is transferred away and collected: its memory stays registered, a READ into it succeeds (no write into freed memory)', async () => {
  // The registration pins the buffer's backing store: after a transfer (postMessage or
  // structuredClone with transfer) the receiver owns the memory, and once the receiver is
  // collected the allocator would free it (64 MiB: an mmap of its own, unmapped at free) while
  // the provider still writes READ responses and peers' WRITEs there.
  for (const [provider, fabric] of providers) {
    if (!available.includes(fabric)) continue;
    const dev = await createDevice({ provider, label: 'rank 0' });
    try {
      const qp = loopback(dev);
      const src = dev.allocate(4096);
      src.bytes.fill(0x77);
      const remote = qp.importRegion(src.descriptor());
      let heap: ArrayBuffer | undefined = new ArrayBuffer(64 << 20);
      const mr = dev.register(new Uint8Array(heap));
      let moved: ArrayBuffer | undefined = structuredClone(heap, { transfer: [heap] });
      assert.is(heap.byteLength, 0, 'the transfer detached the registered buffer');
      assert.is(moved.byteLength, 64 << 20);
      heap = undefined;
      moved = undefined;
      await collectGarbage();
      for (let k = 0; k < 8; k++) qp.postRead(mr, k * (8 << 20), remote, 0, 4096, k, true);
      let done = 0;
      await pump(dev, (i) => (mustSucceed(i), done++), () => done === 8);
      mr.deregister();
      src.deregister();
    } finally {
      dev.close();
    }
  }
});
api('a region deregistered with operations on it in flight keeps its memory until they complete; one still queued fails with ECLOSED and never reaches the fabric', async () => {
  // Without the deferral, deregister() let go of the heap buffer's memory at once: collected
  // after a transfer (64 MiB: an mmap of its own, unmapped at free), the READs' bytes then
  // landed in unmapped memory. And an operation queued behind a full in-flight ring was issued
  // later with its region's freed registration handle, which a new registration may reuse.
  for (const [provider, fabric] of providers) {
    if (!available.includes(fabric)) continue;
    const dev = await createDevice({ provider, label: 'rank 0' });
    try {
      const qp = loopback(dev);
      const src = dev.allocate(1 << 20);
      src.bytes.fill(0x77);
      const remote = qp.importRegion(src.descriptor());
      const a = dev.allocate(4096);
      const b = dev.allocate(4096);
      // A first READ verifies the imported region: later ones go to the fabric at once.
      qp.postRead(a, 0, remote, 0, 64, 100, true);
      let verified = false;
      await pump(dev, (i) => (mustSucceed(i), (verified = true)), () => verified);
      // In flight: READs into heap memory, deregistered and collected before their bytes land.
      let heap: ArrayBuffer | undefined = new ArrayBuffer(64 << 20);
      const inFlight = dev.register(new Uint8Array(heap));
      for (let k = 0; k < 8; k++) qp.postRead(inFlight, k * (8 << 20), remote, 0, 1 << 20, k, true);
      await Promise.resolve(); // the posts' flush (a microtask) hands them to libfabric
      inFlight.deregister();
      structuredClone(heap, { transfer: [heap] });
      heap = undefined;
      await collectGarbage();
      let done = 0;
      await pump(dev, (i) => (mustSucceed(i), done++), () => done === 8);
      // The deferred release happened once the last READ completed.
      const held = inFlight as unknown as { inFlight: number; releasePending: boolean };
      assert.equal([held.inFlight, held.releasePending], [0, false], `${provider}: the deregistered region was not released after its READs`);
      // Queued: the in-flight ring (1024 slots) full of small READs, one more waits behind them.
      for (let k = 0; k < 1024; k++) qp.postRead(a, 0, remote, 0, 64, k, false);
      qp.postRead(b, 0, remote, 0, 4096, 5000, true);
      assert.ok(qp.pendingOps > 1024, `${provider}: the last READ did not wait (${qp.pendingOps} pending)`);
      b.deregister();
      let outcome = '';
      await pump(dev, (i) => (outcome = `${batch.wrId[i]} ${statusName(batch.status[i])}: ${batch.errors[i]?.message ?? ''}`), () => outcome !== '');
      assert.match(outcome, /^5000 FLUSHED: rank 0: READ \(wr 5000\) toward self not executed: its local memory region was deregistered/, `${provider}: ${outcome}`);
      assert.is(b.bytes[0], 0, `${provider}: the refused READ wrote into the deregistered region`);
      // The QP goes on working.
      qp.postRead(a, 0, remote, 0, 64, 6000, true);
      let ok = false;
      await pump(dev, (i) => (mustSucceed(i), (ok = true)), () => ok);
      assert.is(a.bytes[0], 0x77);
      // Abandoned: a QP closed with a READ in flight; the provider may still fill the region,
      // so its registration and memory stay (pinned) until the device closes.
      const qp2 = loopback(dev);
      const remote2 = qp2.importRegion(src.descriptor());
      qp2.postRead(a, 0, remote2, 0, 64, 7000, true);
      let first = false;
      await pump(dev, () => (first = true), () => first);
      let heap2: ArrayBuffer | undefined = new ArrayBuffer(64 << 20);
      const abandoned = dev.register(new Uint8Array(heap2));
      for (let k = 0; k < 8; k++) qp2.postRead(abandoned, k * (8 << 20), remote2, 0, 1 << 20, k, true);
      await Promise.resolve();
      qp2.close();
      abandoned.deregister();
      assert.ok((abandoned as unknown as { pinned: boolean }).pinned, `${provider}: a region of abandoned operations was not kept`);
      structuredClone(heap2, { transfer: [heap2] });
      heap2 = undefined;
      await collectGarbage();
      // Whatever the provider still does with those READs lands in kept memory.
      for (let k = 0; k < 20; k++) {
        dev.cq.poll(batch);
        await new Promise((r) => setTimeout(r, 5));
      }
    } finally {
      dev.close();
    }
  }
});
api.run();

for (const [provider, fabric] of providers) {
  if (!available.includes(fabric)) {
    console.log(`skipping ${provider}: libfabric provider ${fabric} not available`);
    continue;
  }
  const test = suite(`ofi provider (${provider}), peer in another process`);

  test('WRITE_IMM stream of random sizes and immediates arrives in order, bytes checked', async () => {
    const count = provider === 'ofi:tcp' ? 20_000 : 10_000;
    const p = await pair(provider, 'sink', { count, slots: 64, maxLen: 4096, recvCredits: 64 });
    try {
      await stream(p, count);
    } finally {
      await p.stop();
    }
  });

  test('an idle wait sleeps once completions have come (no busy loop on a signalled wait fd)', async () => {
    const p = await pair(provider, 'target');
    try {
      // A completion first: libfabric's CQ signal stays set until fi_trywait resets it.
      p.qp.postWrite(p.mr, 0, p.remote, 0, 64, 1, true);
      let done = false;
      await pump(p.dev, (i) => (mustSucceed(i), (done = true)), () => done);
      const c0 = process.cpuUsage();
      const t0 = performance.now();
      assert.is(code(() => p.dev.cq.waitSync({ timeoutMs: 400 })), 'ETIMEDOUT');
      const wall = (performance.now() - t0) * 1000;
      const cpu = process.cpuUsage(c0);
      // A sleeping wait uses a few percent of one core; a spinning one all of it (or whatever the
      // scheduler leaves it). Half is far from both.
      assert.ok(cpu.user + cpu.system < wall / 2, `waitSync used ${((cpu.user + cpu.system) / 1000).toFixed(0)} ms of CPU in ${(wall / 1000).toFixed(0)} ms`);
    } finally {
      await p.stop();
    }
  });

  test('sleeping while completions wait for their owner: timers, the threadpool and sockets still run; keepFabricMoving does not spin', async () => {
    const p = await pair(provider, 'target');
    // The event loop must turn while a waiter sleeps on a CQ that keeps saying "poll first"
    // (fi_trywait), as when a peer that finished init already sent to a rank still waiting
    // on the store. The doorbell once re-armed a 0 ms libuv timer from inside the previous
    // one's callback: libuv ran it in the same timers phase, forever; the store's socket,
    // timers and the threadpool never ran and the rank hung until it ran out of memory.
    const eventLoopTurns = async () => {
      await new Promise((r) => setTimeout(r, 100));
      await readFile(HELPER);
      await new Promise<void>((resolve, reject) => {
        const server = createServer((s) => s.end('pong')).listen(0, '127.0.0.1', () => {
          const c = connect((server.address() as { port: number }).port, '127.0.0.1');
          c.on('data', () => (c.destroy(), server.close(), resolve())).on('error', reject);
        });
      });
    };
    try {
      for (let i = 0; i < 4; i++) p.qp.postWrite(p.mr, 0, p.remote, 0, 64, i, true);
      await new Promise((r) => setTimeout(r, 50));
      // A bare sleep loop that never takes them.
      let stopped = false;
      let sleeps = 0;
      const loop = (async () => {
        while (!stopped) {
          sleeps++;
          await p.dev.cq.doorbell.sleepAsync(20, () => false);
        }
      })();
      try {
        await eventLoopTurns();
      } finally {
        stopped = true;
        await loop;
      }
      assert.ok(sleeps > 0);
      // keepFabricMoving (init's wait on the store): the same, and it must not spin on them.
      const stop = keepFabricMoving(p.dev);
      const c0 = process.cpuUsage();
      const t0 = performance.now();
      try {
        for (let i = 4; i < 8; i++) p.qp.postWrite(p.mr, 0, p.remote, 0, 64, i, true);
        await eventLoopTurns();
        await new Promise((r) => setTimeout(r, 200));
      } finally {
        stop();
      }
      const wall = (performance.now() - t0) * 1000;
      const cpu = process.cpuUsage(c0);
      assert.ok(cpu.user + cpu.system < wall / 2, `keepFabricMoving used ${((cpu.user + cpu.system) / 1000).toFixed(0)} ms of CPU in ${(wall / 1000).toFixed(0)} ms`);
      // The completions are all still there for their owner.
      let n = 0;
      await pump(p.dev, (i) => (mustSucceed(i), n++), () => n === 8);
    } finally {
      await p.stop();
    }
  });

  test('READ returns the peer\'s bytes (after a WRITE, in post order)', async () => {
    const p = await pair(provider, 'target');
    try {
      await readBack(p);
    } finally {
      await p.stop();
    }
  });

  test('bad key, out of bounds, deregistered: REMOTE_ACCESS at the initiator, target unchanged', async () => {
    const p = await pair(provider, 'target', { bytes: 4096 });
    try {
      const { qp, mr, dev } = p;
      mr.bytes.fill(0xee);
      p.child.send({ type: 'dereg2' });
      await p.next('dereged');
      const stale = qp.importRegion(p.desc2);
      const forgedBytes = new Uint8Array(p.desc);
      forgedBytes[DESCRIPTOR_KEY_OFFSET] ^= 0x5a;
      const forged = qp.importRegion(forgedBytes);
      const forgedAddrBytes = new Uint8Array(p.desc);
      forgedAddrBytes[57] ^= 0x10;
      const forgedAddr = qp.importRegion(forgedAddrBytes);
      const attempts: [string, () => void][] = [
        ['write past end', () => qp.postWrite(mr, 0, p.remote, 4000, 200, 11, false)],
        ['write_imm past end', () => qp.postWriteImm(mr, 0, p.remote, 4096, 1, 7, 12, false)],
        ['read past end', () => qp.postRead(mr, 0, p.remote, 5000, 8, 13, false)],
        ['write with forged key', () => qp.postWrite(mr, 0, forged, 0, 64, 14, false)],
        ['read with forged key', () => qp.postRead(mr, 0, forged, 0, 64, 15, false)],
        ['write_imm with forged address', () => qp.postWriteImm(mr, 0, forgedAddr, 0, 64, 1, 16, false)],
        ['write to deregistered region', () => qp.postWrite(mr, 0, stale, 0, 64, 17, false)],
        ['read from deregistered region', () => qp.postRead(mr, 0, stale, 0, 64, 18, false)],
      ];
      for (const [name, post] of attempts) {
        post();
        let outcome = '';
        await pump(dev, (i) => (outcome = `${statusName(batch.status[i])}: ${batch.errors[i]?.message ?? ''}`), () => outcome !== '', 5000);
        assert.match(outcome, /^REMOTE_ACCESS: rank 0: .* toward rank 1 refused/, `${name}: ${outcome}`);
      }
      p.child.send({ type: 'check' });
      const c = await p.next('checked');
      assert.ok(c.untouched, `target memory changed: ${String(c.head)}`);
      // The QP still works.
      qp.postWrite(mr, 0, p.remote, 0, 16, 20, true);
      let ok = false;
      await pump(dev, (i) => (mustSucceed(i), (ok = true)), () => ok);
      p.child.send({ type: 'check' });
      assert.is((await p.next('checked')).head, 'ee'.repeat(16));
    } finally {
      await p.stop();
    }
  });

  test('back-pressure with 4 receive credits: nothing lost, nothing duplicated', async () => {
    const count = 2000;
    const p = await pair(provider, 'slow', { count });
    try {
      const src = new Uint32Array(p.mr.bytes.buffer, p.mr.bytes.byteOffset, 2 * count);
      let maxPending = 0;
      for (let i = 0; i < count; i++) {
        src[2 * i] = i;
        p.qp.postWriteImm(p.mr, 8 * i, p.remote, (i % 4) * 8, 8, i, i, i === count - 1);
        maxPending = Math.max(maxPending, p.qp.pendingOps);
      }
      let done = false;
      await pump(p.dev, (i) => (mustSucceed(i), (done = true)), () => done, 60_000);
      const r = await p.next('result');
      assert.ok(maxPending > 4, 'the sender never had to wait');
      assert.is(r.received, count);
      assert.is(r.wrong, 0);
      assert.is(r.extra, 0);
    } finally {
      await p.stop();
    }
  });

  test('SIGKILLed peer: pending and new operations fail naming it, within the timeout', async () => {
    const p = await pair(provider, 'mute', {}, { opTimeoutMs: 10_000 });
    try {
      const { qp, mr, dev } = p;
      for (let i = 0; i < 10; i++) qp.postWriteImm(mr, 0, p.remote, 0, 64, i, i, true);
      dev.cq.poll(batch);
      const pendingBefore = qp.pendingOps;
      assert.ok(pendingBefore > 0);
      p.child.kill('SIGKILL');
      const t0 = performance.now();
      const failures: string[] = [];
      let qpEvent = '';
      let successes = batch.count;
      await pump(
        dev,
        (i) => {
          if (batch.opcode[i] === Opcode.QP_EVENT) qpEvent = batch.errors[i]?.message ?? '';
          else if (batch.status[i] !== Status.SUCCESS) failures.push(`${statusName(batch.status[i])}: ${batch.errors[i]?.message}`);
          else successes++;
        },
        () => qpEvent !== '' && failures.length + successes >= 10,
        20_000,
      );
      const ms = performance.now() - t0;
      assert.ok(ms < 10_000, `detected after ${ms} ms`);
      assert.is(failures.length, pendingBefore);
      for (const f of failures) assert.match(f, /^(PEER_DEAD|TRANSPORT|TIMEOUT): rank 0: .*rank 1/);
      assert.match(qpEvent, /rank 1/);
      qp.postWriteImm(mr, 0, p.remote, 0, 64, 99, 99, false);
      let late = '';
      await pump(dev, (i) => (late = `${statusName(batch.status[i])}: ${batch.errors[i]?.message}`), () => late !== '', 5000);
      assert.match(late, /^(PEER_DEAD|TRANSPORT|TIMEOUT): rank 0: .*rank 1/);
      assert.is(qp.state, 'error');
      console.log(`  ${provider}: peer death detected in ${ms.toFixed(0)} ms; ${failures[0]}`);
    } finally {
      await p.stop();
    }
  });

  test('numbers: 64 B WRITE_IMM ping-pong, 64 B post rate, 1 MiB WRITE bandwidth', async () => {
    const pp = await pair(provider, 'echo');
    try {
      const { qp, mr, dev, remote } = pp;
      const iters = 10_000, warm = 5000;
      const one = new CompletionBatch(16);
      let t0 = 0;
      for (let i = 0; i < iters + warm; i++) {
        if (i === warm) t0 = performance.now();
        qp.postWriteImm(mr, 0, remote, 0, 64, i, i, false);
        for (;;) {
          const k = dev.cq.poll(one);
          let seen = false;
          for (let j = 0; j < k; j++) if (one.opcode[j] === Opcode.RECV_WRITE_IMM) seen = true;
          if (seen) break;
        }
      }
      const rtt = ((performance.now() - t0) / iters) * 1000;
      console.log(`  ${provider}: 64 B WRITE_IMM round trip ${rtt.toFixed(2)} us`);
    } finally {
      await pp.stop();
    }
    const count = 200_000;
    const pc = await pair(provider, 'count', { count });
    try {
      const { qp, mr, dev, remote } = pc;
      const t0 = performance.now();
      let completed = 0, signaled = 0;
      for (let i = 0; i < count; i++) {
        const sig = (i & 255) === 255 || i === count - 1;
        if (sig) signaled++;
        qp.postWriteImm(mr, 0, remote, (i & 1023) * 64, 64, i, i, sig);
        if (qp.pendingOps > 1024) {
          const k = dev.cq.poll(batch);
          for (let j = 0; j < k; j++) (mustSucceed(j), completed++);
        }
      }
      await pump(dev, (j) => (mustSucceed(j), completed++), () => completed === signaled);
      await pc.next('result');
      const s = (performance.now() - t0) / 1000;
      console.log(`  ${provider}: 64 B WRITE_IMM stream ${(count / s / 1000).toFixed(0)} k msgs/s`);
    } finally {
      await pc.stop();
    }
    const pb = await pair(provider, 'target', { bytes: 1 << 24 }, { bytes: 1 << 24 });
    try {
      const { qp, mr, dev, remote } = pb;
      const size = 1 << 20, n = 2000;
      let completed = 0, signaled = 0;
      const t0 = performance.now();
      for (let i = 0; i < n; i++) {
        const sig = (i & 7) === 7 || i === n - 1;
        if (sig) signaled++;
        qp.postWrite(mr, (i & 15) * size, remote, (i & 15) * size, size, i, sig);
        while (qp.pendingOps > 32) {
          const k = dev.cq.poll(batch);
          for (let j = 0; j < k; j++) (mustSucceed(j), completed++);
          if (k === 0) await dev.cq.wait({ timeoutMs: 30_000 });
        }
      }
      await pump(dev, (j) => (mustSucceed(j), completed++), () => completed === signaled);
      const s = (performance.now() - t0) / 1000;
      console.log(`  ${provider}: 1 MiB WRITE stream ${((n * size) / s / 1e9).toFixed(2)} GB/s`);
    } finally {
      await pb.stop();
    }
  });

  test.run();
}
