/**
 * A worker process of the NIC conformance suite: `node conformance-worker.js <scenario> <rank> <n>
 * <provider> <json args>`. Each scenario runs real traffic toward the other workers and
 * reports what it observed; the parent test asserts on it.
 */
import { CompletionBatch, Opcode, Status, statusName, type QueuePair } from '../../../src/nic/index.js';
import { prng, randomPool } from '../../../harness/data.js';
import { joinMesh, type Mesh } from '../../../harness/local-group.js';
import { sendEvent } from '../../../harness/worker-ipc.js';
import { StreamCheck, STREAM_POOL_BYTES } from '../stream-check.js';

const [scenario, rankS, nS, provider, argsJson] = process.argv.slice(2);
const rank = Number(rankS);
const n = Number(nS);
const args = JSON.parse(argsJson) as Record<string, number | string | boolean>;
const batch = new CompletionBatch(256);

const event = (name: string, data?: unknown) => sendEvent(rank, name, data);

const released = new Promise<void>((resolve) => {
  process.on('message', (m: { type: string }) => {
    if (m.type === 'release') resolve();
  });
});

/** Polls until `handle` returns true for the overall condition; fails after timeoutMs. */
async function pump(mesh: Mesh, handle: (i: number) => void, done: () => boolean, timeoutMs = 30_000): Promise<void> {
  const until = performance.now() + timeoutMs;
  while (!done()) {
    const k = mesh.device.cq.poll(batch);
    for (let i = 0; i < k; i++) handle(i);
    if (k === 0 && !done()) {
      if (performance.now() > until) throw new Error(`rank ${rank}: ${scenario} made no progress for ${timeoutMs} ms`);
      await mesh.device.cq.wait({ timeoutMs: Math.max(1, until - performance.now()) });
    }
  }
}

function failOnError(i: number): void {
  if (batch.status[i] !== Status.SUCCESS) throw new Error(`unexpected ${statusName(batch.status[i])} completion: ${batch.errors[i]?.message}`);
}

/** 100,000 WRITE_IMMs of random sizes into a slotted ring; the receiver checks every byte and imm. */
async function stream(): Promise<unknown> {
  const count = Number(args.count ?? 100_000);
  const slots = 64;
  const maxLen = 4096;
  const poolBytes = STREAM_POOL_BYTES;
  if (rank === 1) {
    const mesh = await joinMesh(rank, n, provider, [slots * maxLen], { recvCredits: slots, autoRepost: false });
    const qp = mesh.qps[0]!;
    const stream = new StreamCheck(mesh.mrs[0].bytes, slots, maxLen);
    await pump(
      mesh,
      (i) => {
        failOnError(i);
        if (batch.opcode[i] !== Opcode.RECV_WRITE_IMM) return;
        stream.check(batch.imm[i], batch.byteLength[i]);
        qp.postRecv(1);
      },
      () => stream.received === count,
      120_000,
    );
    return { received: stream.received, errors: stream.errors };
  }
  const pool = randomPool(poolBytes, 7);
  const gen = prng(99);
  const mesh = await joinMesh(rank, n, provider, [poolBytes]);
  const mr = mesh.mrs[0];
  mr.bytes.set(pool);
  const qp = mesh.qps[1]!;
  const remote = mesh.remotes[1][0];
  let signaled = 0;
  let completed = 0;
  let maxPending = 0;
  for (let i = 0; i < count; i++) {
    const len = gen() % (maxLen + 1);
    const off = gen() % (poolBytes - maxLen);
    const imm = gen();
    const sig = (i & 63) === 63 || i === count - 1;
    if (sig) signaled++;
    qp.postWriteImm(mr, off, remote, (i % slots) * maxLen, len, imm, i, sig);
    if (qp.pendingOps > maxPending) maxPending = qp.pendingOps;
    while (qp.pendingOps > 256) {
      const k = mesh.device.cq.poll(batch);
      for (let j = 0; j < k; j++) {
        failOnError(j);
        completed++;
      }
      if (k === 0) await mesh.device.cq.wait({ timeoutMs: 30_000 });
    }
  }
  await pump(mesh, (j) => (failOnError(j), completed++), () => completed === signaled);
  return { sent: count, maxPending };
}

/** READs of a peer's counter while the peer spins (or sleeps, on shm). */
async function read(): Promise<unknown> {
  const mode = String(args.mode);
  if (rank === 1) {
    const mesh = await joinMesh(rank, n, provider, [4096]);
    const counter = new Int32Array(mesh.mrs[0].bytes.buffer, mesh.mrs[0].bytes.byteOffset, 1024);
    if (mode === 'sleep') {
      counter[0] = 12345;
      // Block this process's only thread: any READ that succeeds now is truly one-sided.
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, Number(args.sleepMs ?? 1500));
      return { slept: true };
    }
    const until = performance.now() + Number(args.busyMs ?? 1500);
    let k = 0;
    while (performance.now() < until) {
      counter[0]++;
      // libfabric progresses incoming reads only when the target reads its CQ; shm needs nothing.
      if ((++k & 255) === 0) mesh.device.cq.poll(batch);
    }
    return { final: counter[0] };
  }
  const mesh = await joinMesh(rank, n, provider, [4096]);
  const qp = mesh.qps[1]!;
  const remote = mesh.remotes[1][0];
  const view = new Int32Array(mesh.mrs[0].bytes.buffer, mesh.mrs[0].bytes.byteOffset, 1024);
  await new Promise((r) => setTimeout(r, 200));
  const values: number[] = [];
  const until = performance.now() + 800;
  while (performance.now() < until) {
    qp.postRead(mesh.mrs[0], 0, remote, 0, 4, values.length, true);
    let got = false;
    await pump(mesh, (i) => (failOnError(i), (got = true)), () => got, 5000);
    values.push(view[0]);
  }
  let monotonic = true;
  for (let i = 1; i < values.length; i++) if (values[i] < values[i - 1]) monotonic = false;
  return { reads: values.length, distinct: new Set(values).size, first: values[0], last: values[values.length - 1], monotonic };
}

/** Out-of-bounds, stale-key and forged-key accesses: error completions, target untouched. */
async function access(): Promise<unknown> {
  if (rank === 1) {
    const mesh = await joinMesh(rank, n, provider, [4096, 4096]);
    mesh.mrs[0].bytes.fill(0x5a);
    mesh.mrs[1].bytes.fill(0x5a);
    mesh.mrs[1].deregister();
    const qp = mesh.qps[0]!;
    // Tell rank 0 that region 1 is gone, then wait for its "done".
    qp.postWriteImm(mesh.mrs[0], 0, mesh.remotes[0][0], 0, 0, 1, 0, false);
    let done = false;
    await pump(mesh, (i) => (failOnError(i), batch.opcode[i] === Opcode.RECV_WRITE_IMM && batch.imm[i] === 2 && (done = true)), () => done);
    const untouched = mesh.mrs[0].bytes.every((b) => b === 0x5a) && mesh.mrs[1].bytes.every((b) => b === 0x5a);
    return { untouched };
  }
  const mesh = await joinMesh(rank, n, provider, [8192]);
  const qp = mesh.qps[1]!;
  const mr = mesh.mrs[0];
  mr.bytes.fill(0xee);
  let go = false;
  await pump(mesh, (i) => (failOnError(i), batch.imm[i] === 1 && (go = true)), () => go);
  const [good, stale] = mesh.remotes[1];
  const attempts: [string, () => void][] = [
    ['write past end', () => qp.postWrite(mr, 0, good, 4000, 200, 11, false)],
    ['write_imm past end', () => qp.postWriteImm(mr, 0, good, 4096, 1, 7, 12, false)],
    ['read past end', () => qp.postRead(mr, 0, good, 5000, 8, 13, false)],
    ['write to deregistered region', () => qp.postWrite(mr, 0, stale, 0, 64, 14, false)],
    ['read from deregistered region', () => qp.postRead(mr, 0, stale, 0, 64, 15, false)],
  ];
  const forgedKeyOffset = args.forgedKeyOffset === undefined ? -1 : Number(args.forgedKeyOffset);
  if (forgedKeyOffset >= 0) {
    const forged = new Uint8Array(mesh.remoteDescs[1][0]);
    forged[forgedKeyOffset] ^= 0x5a;
    const region = qp.importRegion(forged);
    attempts.push(['write with forged key', () => qp.postWrite(mr, 0, region, 0, 64, 16, false)]);
  }
  const outcomes: Record<string, string> = {};
  for (const [name, post] of attempts) {
    post();
    let seen = false;
    await pump(
      mesh,
      (i) => {
        seen = true;
        outcomes[name] = `${statusName(batch.status[i])}: ${batch.errors[i]?.message ?? ''}`;
      },
      () => seen,
      5000,
    );
  }
  // The QP still works after refused accesses.
  qp.postWriteImm(mr, 0, good, 0, 0, 2, 17, true);
  let ok = false;
  await pump(mesh, (i) => (failOnError(i), (ok = true)), () => ok);
  return { outcomes };
}

/** Receive credits of 4: the sender queues, nothing is lost or duplicated. */
async function backpressure(): Promise<unknown> {
  const count = Number(args.count ?? 2000);
  if (rank === 1) {
    const mesh = await joinMesh(rank, n, provider, [64], { recvCredits: 4, autoRepost: false });
    const qp = mesh.qps[0]!;
    const words = new Uint32Array(mesh.mrs[0].bytes.buffer, mesh.mrs[0].bytes.byteOffset, 16);
    let next = 0;
    let wrong = 0;
    const one = new CompletionBatch(1);
    const until = performance.now() + 60_000;
    while (next < count) {
      if (mesh.device.cq.poll(one) === 0) {
        if (performance.now() > until) throw new Error('backpressure: receiver stalled');
        if (args.sync) mesh.device.cq.waitSync({ timeoutMs: 10_000 });
        else await mesh.device.cq.wait({ timeoutMs: 10_000 });
        continue;
      }
      if (one.status[0] !== Status.SUCCESS) throw new Error(`receiver got ${statusName(one.status[0])}`);
      if (one.imm[0] !== next || words[(next % 4) * 2] !== next) wrong++;
      next++;
      // Slow consumer: the sender must hold its writes, not drop or overrun them.
      if (next % 97 === 0) await new Promise((r) => setTimeout(r, 2));
      qp.postRecv(1);
    }
    // Anything beyond `count` would be a duplicate.
    await new Promise((r) => setTimeout(r, 100));
    const extra = mesh.device.cq.poll(batch);
    return { received: next, wrong, extra };
  }
  const mesh = await joinMesh(rank, n, provider, [8 * count]);
  const qp = mesh.qps[1]!;
  const src = new Uint32Array(mesh.mrs[0].bytes.buffer, mesh.mrs[0].bytes.byteOffset, 2 * count);
  let maxPending = 0;
  for (let i = 0; i < count; i++) {
    src[2 * i] = i;
    qp.postWriteImm(mesh.mrs[0], 8 * i, mesh.remotes[1][0], (i % 4) * 8, 8, i, i, i === count - 1);
    maxPending = Math.max(maxPending, qp.pendingOps);
  }
  let done = false;
  await pump(mesh, (i) => (failOnError(i), (done = true)), () => done, 60_000);
  return { maxPending };
}

/** Four ranks, one CQ each, everyone writing to everyone at once. */
async function mesh4(): Promise<unknown> {
  const count = Number(args.count ?? 2000);
  const slots = 16;
  const size = 256;
  const mesh = await joinMesh(rank, n, provider, [n * slots * size, size * 64], { recvCredits: slots, autoRepost: false });
  const [inbox, outbox] = mesh.mrs;
  const nextFrom = new Array(n).fill(0);
  const sentTo = new Array(n).fill(0);
  let received = 0;
  let wrong = 0;
  let completions = 0;
  let signaled = 0;
  const expectReceived = count * (n - 1);
  const fillFor = (src: number, k: number) => (src * 131 + k * 17) & 255;
  const handle = (i: number) => {
    failOnError(i);
    if (batch.opcode[i] !== Opcode.RECV_WRITE_IMM) {
      completions++;
      return;
    }
    const src = batch.imm[i] >>> 24;
    const k = batch.imm[i] & 0xffffff;
    const from = mesh.qpOf(batch.qpn[i]);
    if (from !== src || k !== nextFrom[src]) wrong++;
    const off = (src * slots + (k % slots)) * size;
    const want = fillFor(src, k);
    for (let b = 0; b < size; b += 37) if (inbox.bytes[off + b] !== want) wrong++;
    nextFrom[src]++;
    received++;
    mesh.qps[src]!.postRecv(1);
  };
  for (let k = 0; k < count; k++) {
    for (let p = 0; p < n; p++) {
      if (p === rank) continue;
      const qp = mesh.qps[p] as QueuePair;
      const o = (k % 64) * size;
      // The outbox slot is reused every 64 messages; signaled every 16 keeps it safe to refill.
      outbox.bytes.fill(fillFor(rank, k), o, o + size);
      const sig = k % 16 === 15;
      if (sig) signaled++;
      qp.postWriteImm(outbox, o, mesh.remotes[p][0], (rank * slots + (k % slots)) * size, size, (rank << 24) | k, k, sig);
      sentTo[p]++;
    }
    // Keep the outbox from being overwritten while queued: drain until little is pending.
    while (mesh.qps.some((q) => q && q.pendingOps > 32) || signaled - completions > 2) {
      const k2 = mesh.device.cq.poll(batch);
      for (let i = 0; i < k2; i++) handle(i);
      if (k2 === 0) await mesh.device.cq.wait({ timeoutMs: 30_000 });
    }
  }
  await pump(mesh, handle, () => received === expectReceived && completions === signaled, 60_000);
  return { received, wrong, nextFrom };
}

/** The peer is SIGKILLed: pending and new operations fail naming it; its segments are swept. */
async function kill(): Promise<unknown> {
  if (rank === 1) {
    await joinMesh(rank, n, provider, [4096], { recvCredits: 2, autoRepost: false });
    event('kill-me', { pid: process.pid });
    // Never poll: rank 0 runs out of credits and queues. The parent kills us.
    await new Promise(() => {});
    return {};
  }
  const mesh = await joinMesh(rank, n, provider, [4096], { opTimeoutMs: Number(args.opTimeoutMs ?? 10_000) });
  const qp = mesh.qps[1]!;
  for (let i = 0; i < 10; i++) qp.postWriteImm(mesh.mrs[0], 0, mesh.remotes[1][0], 0, 64, i, i, true);
  const pendingBefore = qp.pendingOps;
  // Connected and posted: the parent may kill rank 1 now (not before we connected to it).
  event('posted');
  // Give the parent a moment to kill rank 1.
  await new Promise((r) => setTimeout(r, 300));
  const t0 = performance.now();
  const failures: string[] = [];
  let qpEvent = '';
  await pump(
    mesh,
    (i) => {
      if (batch.opcode[i] === Opcode.QP_EVENT) qpEvent = batch.errors[i]?.message ?? '';
      else if (batch.status[i] !== Status.SUCCESS) failures.push(`${statusName(batch.status[i])}: ${batch.errors[i]?.message}`);
    },
    () => qpEvent !== '' && failures.length >= pendingBefore,
    20_000,
  );
  const detectMs = performance.now() - t0;
  qp.postWriteImm(mesh.mrs[0], 0, mesh.remotes[1][0], 0, 64, 99, 99, false);
  let late = '';
  await pump(mesh, (i) => (late = `${statusName(batch.status[i])}: ${batch.errors[i]?.message}`), () => late !== '', 5000);
  return { pendingBefore, failures, qpEvent, late, detectMs, state: qp.state };
}

/**
 * shm only: rank 1 reserves a slot in rank 0's completion ring and is killed before committing
 * it. Rank 2's later message must still reach rank 0: the dead producer's hole is skipped.
 */
async function hole(): Promise<unknown> {
  const mesh = await joinMesh(rank, n, provider, [4096]);
  if (rank === 1) {
    const peer = (mesh.qps[0] as unknown as { peer: { i32: Int32Array } }).peer;
    Atomics.add(peer.i32, 16, 1); // CQ_TAIL: reserve, then die without committing
    event('kill-me');
    await new Promise(() => {});
  }
  if (rank === 2) {
    await new Promise((r) => setTimeout(r, 400));
    mesh.qps[0]!.postWriteImm(mesh.mrs[0], 0, mesh.remotes[0][0], 0, 8, 777, 0, false);
    return { sent: true };
  }
  const t0 = performance.now();
  let got = false;
  let sawDeath = false;
  await pump(
    mesh,
    (i) => {
      if (batch.opcode[i] === Opcode.QP_EVENT) sawDeath = true;
      else if (batch.opcode[i] === Opcode.RECV_WRITE_IMM && batch.imm[i] === 777) got = true;
    },
    () => got,
    15_000,
  );
  return { got, sawDeath, ms: performance.now() - t0 };
}

const scenarios: Record<string, () => Promise<unknown>> = { stream, read, access, backpressure, mesh4, kill, hole };

async function main(): Promise<void> {
  const fn = scenarios[scenario];
  if (!fn) throw new Error(`unknown scenario ${scenario}`);
  const result = await fn();
  process.send!({ type: 'result', rank, result });
  await released;
  process.exit(0);
}

main().catch((err: Error) => {
  process.send!({ type: 'error', rank, message: err.stack ?? String(err) }, () => process.exit(1));
});
