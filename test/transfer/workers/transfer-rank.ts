/**
 * A rank of the transfer-engine tests (under `weft run -n 3` or launch()). Scenarios:
 *
 * - `random`: every rank moves random batches of READ and WRITE (1 B to 8 MiB, unaligned
 *   offsets, 3 batches in flight, to every segment including its own) and checks each byte:
 *   READs against the target's known pattern, WRITEs by reading every written area back at the
 *   end against a shadow copy. Prints `ok rank R: {json}`.
 * - `misuse`: the descriptor in the store, INVALID requests, refusals while in flight, a
 *   buffer registered after the peer cached the descriptor, a broken path retried on another.
 * - `kill`: rank 0 streams WRITEs to rank 1, which the test SIGKILLs; rank 0 prints how long
 *   after the kill its requests were FAILED, and why.
 * - `retire` (fabric): an unregister that a blocked peer cannot confirm (see the function).
 */
import { init } from '../../../src/index.js';
import { segmentKey, type TransferStatus } from '../../../src/transfer/index.js';
import type { TransferEngine } from '../../../src/transfer/engine.js';
import { prng, randomPool } from '../../../harness/data.js';

const scenario = process.argv[2];
const ctx = await init({ timeoutMs: 60_000 });
const { rank, size } = ctx;
const soak = process.env.WEFT_SOAK === '1';
const MiB = 1 << 20;
const fail = (msg: string): never => {
  throw new Error(`rank ${rank} (${scenario}): ${msg}`);
};

/** Byte x of rank t's read-only pattern. */
const POOL = randomPool(4 * MiB + 4096, 77);
const pattern = (t: number, x: number) => POOL[(x + t * 4099) % (4 * MiB)];

async function random(): Promise<unknown> {
  const SLOTS = 3;
  const R = 8 * MiB + 4096; // read-only area
  const W = 8 * MiB + 4096; // one write area per (initiator, slot)
  const L = 16 * MiB + 8192; // staging per slot
  const engine = await ctx.transfer({ sliceBytes: 64 << 10, qpsPerPeer: 2 });
  const target = ctx.alloc(Uint8Array, R + size * SLOTS * W);
  for (let x = 0; x < R; x++) target[x] = pattern(rank, x);
  // The target is registered as two buffers (read-only area, write areas) from one array.
  const rAddr = await engine.registerLocalMemory(target.subarray(0, R));
  const wAddr = await engine.registerLocalMemory(target.subarray(R));
  if (wAddr - rAddr !== R) fail(`two views of one array got addresses ${rAddr} and ${wAddr}, not ${R} apart`);
  const staging = ctx.alloc(Uint8Array, SLOTS * L);
  await engine.registerLocalMemory(staging);
  await ctx.barrier();
  const segs: number[] = [];
  const bases: { r: number; w: number }[] = [];
  for (let t = 0; t < size; t++) {
    const id = await engine.openSegment(engine.segmentNames[t]);
    segs.push(id);
    const d = engine.getSegmentDesc(id);
    // Sorted by address: the two views of the target array, then the staging array.
    if (d.buffers.length !== 3 || d.buffers[1].addr !== d.buffers[0].addr + R) fail(`segment of rank ${t}: ${JSON.stringify(d.buffers.map((x) => [x.addr, x.length]))}`);
    bases.push({ r: d.buffers[0].addr, w: d.buffers[1].addr });
  }
  // shadow[t][slot]: what this rank's write area (t, slot) must hold.
  const shadow = segs.map(() => Array.from({ length: SLOTS }, () => new Uint8Array(W)));
  const next32 = prng(1000 + rank);
  const rnd = () => next32() / 2 ** 32;
  const size1 = () => {
    // Log-uniform in [1, 8 MiB], with extra weight on the edges.
    const u = rnd();
    if (u < 0.05) return 1;
    if (u < 0.1) return 8 * MiB;
    return Math.max(1, Math.floor(2 ** (rnd() * 23)));
  };
  const BATCHES = soak ? 600 : 60;
  let bytes = 0;
  let requests = 0;
  let checks = 0;
  type Plan = { id: number; slot: number; reads: { t: number; off: number; len: number; at: number }[]; writes: { t: number; off: number; len: number; at: number }[] };
  const run = async (slot: number, b: number): Promise<void> => {
    const n = 1 + Math.floor(rnd() * 8);
    const plan: Plan = { id: engine.allocateBatchID(n, { timeoutMs: 60_000 }), slot, reads: [], writes: [] };
    const reqs = [];
    let used = 0;
    const wUsed = new Array(size).fill(0);
    const stage0 = slot * L;
    for (let k = 0; k < n; k++) {
      const t = Math.floor(rnd() * size);
      let len = size1();
      const gap = Math.floor(rnd() * 64);
      len = Math.min(len, L - used - gap);
      if (len < 1) break;
      const at = stage0 + used + gap;
      used += gap + len;
      if (rnd() < 0.5) {
        const off = Math.floor(rnd() * (R - len + 1));
        reqs.push({ opcode: 'READ' as const, source: staging.subarray(at, at + len), targetId: segs[t], targetOffset: bases[t].r + off });
        plan.reads.push({ t, off, len, at });
      } else {
        const wgap = Math.floor(rnd() * 64);
        const room = W - wUsed[t] - wgap;
        if (room < 1) continue;
        len = Math.min(len, room);
        const off = wUsed[t] + wgap;
        wUsed[t] = off + len;
        const src = (rnd() * 3 * MiB) | 0;
        for (let i = 0; i < len; i++) staging[at + i] = POOL[(src + i) % POOL.length];
        // Area (this rank, slot) of rank t's write buffer.
        const areaAddr = bases[t].w + (rank * SLOTS + slot) * W;
        reqs.push({ opcode: 'WRITE' as const, source: staging.subarray(at, at + len), targetId: segs[t], targetOffset: areaAddr + off, length: len });
        plan.writes.push({ t, off, len, at });
      }
    }
    engine.submitTransfer(plan.id, reqs);
    const notDone = await engine.waitBatch(plan.id, { timeoutMs: 60_000 });
    const st = engine.getTransferStatus(plan.id);
    if (notDone !== 0) fail(`batch ${b}: ${notDone} request(s) not completed: ${JSON.stringify(st.filter((s) => s.status !== 'COMPLETED').slice(0, 3))}`);
    for (const s of st) bytes += s.transferred;
    requests += st.length;
    engine.freeBatchID(plan.id);
    for (const r of plan.reads) {
      for (let i = 0; i < r.len; i++) {
        if (staging[r.at + i] !== pattern(r.t, r.off + i)) fail(`batch ${b}: READ of ${r.len} B at +${r.off} from rank ${r.t}: byte ${i} is ${staging[r.at + i]}, want ${pattern(r.t, r.off + i)}`);
      }
      checks++;
    }
    for (const w of plan.writes) shadow[w.t][slot].set(staging.subarray(w.at, w.at + w.len), w.off);
  };
  // SLOTS loops, each one batch after another, all in flight together.
  let next = 0;
  await Promise.all(
    Array.from({ length: SLOTS }, async (_, slot) => {
      while (next < BATCHES) await run(slot, next++);
    }),
  );
  await ctx.barrier();
  // Read back every area this rank wrote, in 4 MiB pieces, and compare with the shadow.
  for (let t = 0; t < size; t++) {
    for (let slot = 0; slot < SLOTS; slot++) {
      for (let off = 0; off < W; off += 4 * MiB) {
        const len = Math.min(4 * MiB, W - off);
        const id = engine.allocateBatchID(1);
        engine.submitTransfer(id, [{ opcode: 'READ', source: staging.subarray(0, len), targetId: segs[t], targetOffset: bases[t].w + (rank * SLOTS + slot) * W + off }]);
        if ((await engine.waitBatch(id)) !== 0) fail(`read-back from rank ${t}: ${JSON.stringify(engine.getTransferStatus(id))}`);
        engine.freeBatchID(id);
        const want = shadow[t][slot];
        for (let i = 0; i < len; i++) if (staging[i] !== want[off + i]) fail(`write area (rank ${t}, slot ${slot}) byte ${off + i} is ${staging[i]}, want ${want[off + i]}: a WRITE landed wrong or not at all`);
        checks++;
      }
    }
  }
  await ctx.barrier();
  // pathDepth (16 by default) bounds the slices in flight on a path, whatever the provider mix.
  if (engine.stats.peakPathInflight > 16) fail(`a path had ${engine.stats.peakPathInflight} slices in flight, past pathDepth 16`);
  return { requests, bytes, checks, slices: engine.stats.slices, retries: engine.stats.retries, peak: engine.stats.peakPathInflight };
}

async function misuse(): Promise<unknown> {
  const engine = await ctx.transfer({ name: `seg-${rank}`, qpsPerPeer: 3, sliceBytes: 4096 });
  if ((await ctx.transfer()) !== engine) fail('ctx.transfer() opened a second engine');
  const buf = ctx.alloc(Uint8Array, 1 * MiB);
  for (let i = 0; i < buf.length; i++) buf[i] = (i * 31 + rank) & 255;
  const addr = await engine.registerLocalMemory(buf);
  await ctx.barrier();
  let checks = 0;
  const check = (ok: boolean, what: string) => {
    if (!ok) fail(what);
    checks++;
  };
  // The descriptor of every rank, as stored.
  for (let t = 0; t < size; t++) {
    const raw = JSON.parse(new TextDecoder().decode(await ctx.store.get(segmentKey(`seg-${t}`))));
    check(raw.name === `seg-${t}` && raw.rank === t, `descriptor of rank ${t}: ${JSON.stringify(raw).slice(0, 200)}`);
    check(Array.isArray(raw.devices) && raw.devices.length === 1 && raw.devices[0].name === 'nic0', `descriptor devices: ${JSON.stringify(raw.devices)}`);
    check(JSON.stringify(raw.priority_matrix) === JSON.stringify({ 'cpu:0': [['nic0'], []] }), `priority_matrix: ${JSON.stringify(raw.priority_matrix)}`);
    check(raw.buffers.length === 1 && raw.buffers[0].length === MiB && Number.isSafeInteger(raw.buffers[0].addr) && raw.buffers[0].rkey.length === 1 && /^[0-9a-f]+$/.test(raw.buffers[0].rkey[0]), `buffers: ${JSON.stringify(raw.buffers).slice(0, 300)}`);
  }
  const peer = (rank + 1) % size;
  const seg = await engine.openSegment(`seg-${peer}`);
  check((await engine.openSegment(`seg-${peer}`)) === seg, 'openSegment twice gave two ids');
  const theirs = engine.getSegmentDesc(seg).buffers[0].addr;
  const heap = new Uint8Array(4096);
  const reasons: Record<string, string> = {};
  const expectInvalid = async (what: string, req: unknown, pattern: RegExp) => {
    const id = engine.allocateBatchID(1);
    engine.submitTransfer(id, [req as never]);
    // A target outside the cached descriptor is PENDING while the descriptor is read again.
    await engine.waitBatch(id, { timeoutMs: 30_000 });
    const s = engine.getTransferStatus(id)[0];
    check(s.status === 'INVALID' && pattern.test(s.reason ?? ''), `${what}: got ${JSON.stringify(s)}`);
    reasons[what] = s.reason!;
    engine.freeBatchID(id);
  };
  await expectInvalid('unregistered source', { opcode: 'READ', source: heap, targetId: seg, targetOffset: theirs }, /not inside one buffer registered/);
  await expectInvalid('unknown segment', { opcode: 'READ', source: buf, targetId: 9999, targetOffset: theirs, length: 16 }, /not an open segment/);
  await expectInvalid('past the target buffer', { opcode: 'WRITE', source: buf, targetId: seg, targetOffset: theirs + MiB - 8, length: 16 }, /not inside one buffer of segment/);
  await expectInvalid('before the target buffer', { opcode: 'READ', source: buf, targetId: seg, targetOffset: 12, length: 16 }, /not inside one buffer of segment/);
  await expectInvalid('bad opcode', { opcode: 'COPY', source: buf, targetId: seg, targetOffset: theirs }, /opcode must be/);
  await expectInvalid('length past the view', { opcode: 'READ', source: buf.subarray(0, 8), targetId: seg, targetOffset: theirs, length: 9 }, /length must be/);
  await expectInvalid('not an object', 42, /not \{ opcode/);
  await expectInvalid(
    'a field that throws',
    {
      opcode: 'READ',
      get source(): never {
        throw new Error('boom');
      },
      targetId: seg,
      targetOffset: theirs,
    },
    /could not be read: boom/,
  );
  // Batch-level misuse throws.
  const b1 = engine.allocateBatchID(2);
  let threw = '';
  try {
    engine.submitTransfer(b1, new Array(3).fill({ opcode: 'READ', source: buf, targetId: seg, targetOffset: theirs, length: 1 }));
  } catch (err) {
    threw = (err as Error).message;
  }
  check(/holds 2 request/.test(threw), `3 requests into a batch of 2: ${threw || 'accepted'}`);
  {
    // A request whose getter grows the array while it is read: the batch's capacity holds
    // (the array's length is read once), and the batch settles and frees.
    const g = engine.allocateBatchID(1);
    const list: unknown[] = [];
    const extra = { opcode: 'READ', source: buf.subarray(512 * 1024, 512 * 1024 + 8), targetId: seg, targetOffset: theirs, length: 8 };
    list.push({
      get opcode() {
        list.push(extra, extra, extra);
        return 'READ';
      },
      source: buf.subarray(512 * 1024, 512 * 1024 + 8),
      targetId: seg,
      targetOffset: theirs,
      length: 8,
    });
    engine.submitTransfer(g, list as never);
    check((await engine.waitBatch(g, { timeoutMs: 30_000 })) === 0 && engine.getTransferStatus(g).length === 1, `a getter growing the request array: ${JSON.stringify(engine.getTransferStatus(g))}`);
    engine.freeBatchID(g);
  }
  {
    // A request whose getter submits to the same batch again: refused (it took the slot the
    // outer call counted, and the outer one wrote past the batch, which then never settled).
    const g = engine.allocateBatchID(2);
    const one = { opcode: 'READ', source: buf.subarray(512 * 1024, 512 * 1024 + 8), targetId: seg, targetOffset: theirs, length: 8 };
    let inner = '';
    const sneaky = {
      get opcode() {
        try {
          engine.submitTransfer(g, [one] as never);
        } catch (err) {
          inner = (err as Error).message;
        }
        return 'READ';
      },
      source: one.source,
      targetId: seg,
      targetOffset: theirs,
      length: 8,
    };
    engine.submitTransfer(g, [sneaky, one] as never);
    check(/is being submitted to/.test(inner), `a getter submitting to its own batch: ${inner || 'accepted'}`);
    check((await engine.waitBatch(g, { timeoutMs: 30_000 })) === 0 && engine.getTransferStatus(g).length === 2, `the batch after a re-entrant submit: ${JSON.stringify(engine.getTransferStatus(g))}`);
    engine.freeBatchID(g);
  }
  // In flight: unregister and freeBatchID are refused. A submitted request is PENDING until progress runs.
  // Peers read only the lower half of each rank's buffer; reads land in the upper half.
  const HALF = 512 * 1024;
  engine.submitTransfer(b1, [{ opcode: 'READ', source: buf.subarray(HALF), targetId: seg, targetOffset: theirs + 7, length: 300_000 }]);
  // Both refusals are decided when called, before progress can run (the first await).
  threw = '';
  try {
    engine.freeBatchID(b1);
  } catch (err) {
    threw = (err as Error).message;
  }
  check(/not done/.test(threw), `freeBatchID while in flight: ${threw || 'accepted'}`);
  const unregistering = engine.unregisterLocalMemory(buf);
  threw = '';
  try {
    await unregistering;
  } catch (err) {
    threw = (err as Error).message;
  }
  check(/in flight use the buffer/.test(threw), `unregister while in flight: ${threw || 'accepted'}`);
  check((await engine.waitBatch(b1, { timeoutMs: 30_000 })) === 0, `the in-flight READ: ${JSON.stringify(engine.getTransferStatus(b1))}`);
  for (let i = 0; i < 300_000; i++) if (buf[HALF + i] !== (((7 + i) * 31 + peer) & 255)) fail(`READ with 4 KiB slices over 3 paths: byte ${i} wrong`);
  engine.freeBatchID(b1);
  threw = '';
  try {
    engine.getTransferStatus(b1);
  } catch (err) {
    threw = (err as Error).message;
  }
  check(/not allocated/.test(threw), `a freed batch id: ${threw || 'accepted'}`);
  // A buffer the peer registers after this rank cached its descriptor: the request misses the
  // cache, the descriptor is read again, and it completes.
  await ctx.barrier();
  const late = ctx.alloc(Uint8Array, 8192).fill(200 + rank);
  const lateAddr = await engine.registerLocalMemory(late);
  await ctx.store.set(`late/${rank}`, new TextEncoder().encode(String(lateAddr)));
  const theirLate = Number(new TextDecoder().decode(await ctx.store.get(`late/${peer}`)));
  const b2 = engine.allocateBatchID(1);
  engine.submitTransfer(b2, [{ opcode: 'READ', source: buf.subarray(HALF), targetId: seg, targetOffset: theirLate + 100, length: 8000 }]);
  check((await engine.waitBatch(b2)) === 0, `READ of a buffer registered later: ${JSON.stringify(engine.getTransferStatus(b2))}`);
  check(buf[HALF] === 200 + peer && buf[HALF + 7999] === 200 + peer, 'READ of a buffer registered later: wrong bytes');
  engine.freeBatchID(b2);
  // A request that times out before its slices run, in a batch that is then freed and reused:
  // none of its leftover slices may run for the new request (nor land in its old range).
  {
    const t1 = engine.allocateBatchID(1, { timeoutMs: 0.001 });
    const old = buf.subarray(HALF, HALF + 300_000);
    old.fill(7);
    engine.submitTransfer(t1, [{ opcode: 'READ', source: old, targetId: seg, targetOffset: theirs }]);
    await engine.waitBatch(t1);
    const st = engine.getTransferStatus(t1)[0];
    check(st.status === 'TIMEOUT' && /not done within/.test(st.reason ?? ''), `a request past its timeout: ${JSON.stringify(st)}`);
    engine.freeBatchID(t1);
    old.fill(7);
    const t2 = engine.allocateBatchID(1);
    engine.submitTransfer(t2, [{ opcode: 'READ', source: buf.subarray(HALF + 400_000), targetId: seg, targetOffset: theirs + 5, length: 1000 }]);
    check((await engine.waitBatch(t2)) === 0, `the reused batch: ${JSON.stringify(engine.getTransferStatus(t2))}`);
    check(buf[HALF + 400_000] === ((5 * 31 + peer) & 255) && buf[HALF + 400_999] === (((5 + 999) * 31 + peer) & 255), 'the reused batch: wrong bytes');
    await new Promise((r) => setTimeout(r, 50));
    engine.getTransferStatus(t2);
    check(old.every((x) => x === 7), 'a timed-out request of a freed batch still wrote into its old range');
    engine.freeBatchID(t2);
  }
  // A buffer unregistered and registered again (same address, new key) is found again through
  // a re-read descriptor. On shared memory the target refuses the stale key; on the fabric the
  // owner retires it first (key-revocation.ts), since a stale key would break the connection.
  {
    await ctx.barrier();
    await engine.unregisterLocalMemory(late);
    await engine.registerLocalMemory(late);
    await ctx.barrier();
    const b4 = engine.allocateBatchID(1);
    engine.submitTransfer(b4, [{ opcode: 'READ', source: buf.subarray(HALF), targetId: seg, targetOffset: theirLate, length: 100 }]);
    check((await engine.waitBatch(b4)) === 0, `READ with a stale key after re-registration: ${JSON.stringify(engine.getTransferStatus(b4))}`);
    engine.freeBatchID(b4);
    await ctx.barrier();
  }
  // A broken path: close one of the QPs toward the peer; slices that hit it go on another.
  // The peer closes its end of that path too (below, as the rank before it), as a path that
  // fails does on both sides: a half-open path would still take the peer's key-retirement
  // messages, and hold them once its receive credits ran out.
  await ctx.barrier();
  const internal = engine as unknown as { peers: { qps: { close(): void }[] }[] };
  internal.peers[peer].qps[0].close();
  internal.peers[(rank + size - 1) % size].qps[0].close();
  const b3 = engine.allocateBatchID(4);
  const reqs = [0, 1, 2, 3].map((k) => ({ opcode: 'READ' as const, source: buf.subarray(HALF + k * 65536), targetId: seg, targetOffset: theirs + k * 1000, length: 60_000 }));
  engine.submitTransfer(b3, reqs);
  check((await engine.waitBatch(b3)) === 0, `after a path broke: ${JSON.stringify(engine.getTransferStatus(b3).filter((s: TransferStatus) => s.status !== 'COMPLETED'))}`);
  for (let k = 0; k < 4; k++) for (let i = 0; i < 60_000; i += 997) if (buf[HALF + k * 65536 + i] !== (((k * 1000 + i) * 31 + peer) & 255)) fail(`after a path broke: request ${k} byte ${i} wrong`);
  check(engine.stats.retries > 0, `no slice was retried after a path broke (stats ${JSON.stringify(engine.stats)})`);
  engine.freeBatchID(b3);
  // Unregister, then the peer's requests to it fail, and nothing else does: the fabric
  // connection between the two ranks survives (collectives and other buffers work).
  await ctx.barrier();
  await engine.unregisterLocalMemory(late);
  await ctx.barrier();
  check(JSON.parse(new TextDecoder().decode(await ctx.store.get(segmentKey(`seg-${peer}`)))).buffers.length === 1, 'the peer unregistered a buffer but its descriptor still lists it');
  {
    const b5 = engine.allocateBatchID(2);
    engine.submitTransfer(b5, [
      { opcode: 'WRITE', source: buf.subarray(HALF, HALF + 100), targetId: seg, targetOffset: theirLate, length: 100 },
      { opcode: 'READ', source: buf.subarray(HALF), targetId: seg, targetOffset: theirs + 3, length: 1000 },
    ]);
    await engine.waitBatch(b5, { timeoutMs: 30_000 });
    const [stale, good] = engine.getTransferStatus(b5);
    check(stale.status === 'INVALID' || stale.status === 'FAILED', `a WRITE to a buffer the peer unregistered: ${JSON.stringify(stale)}`);
    check(good.status === 'COMPLETED' && buf[HALF] === ((3 * 31 + peer) & 255) && buf[HALF + 999] === (((3 + 999) * 31 + peer) & 255), `a READ beside it: ${JSON.stringify(good)}`);
    engine.freeBatchID(b5);
    const sum = new Int32Array([1]);
    await ctx.allreduce(sum);
    check(sum[0] === size, `an allreduce after the stale request: ${sum[0]}`);
  }
  await ctx.barrier();
  await engine.close();
  check(engine.closed, 'closed is false after close()');
  threw = '';
  try {
    engine.allocateBatchID(1);
  } catch (err) {
    threw = (err as Error).message;
  }
  check(/closed/.test(threw), `allocateBatchID after close: ${threw || 'accepted'}`);
  for (const call of [() => engine.getSegmentDesc(seg), () => engine.closeSegment(seg)]) {
    threw = '';
    try {
      call();
    } catch (err) {
      threw = (err as Error).message;
    }
    check(/closed/.test(threw), `a segment call after close: ${threw || 'accepted'}`);
  }
  await ctx.barrier();
  let gone = false;
  try {
    await ctx.store.get(segmentKey(`seg-${peer}`), { timeoutMs: 0 });
  } catch {
    gone = true;
  }
  check(gone, 'a closed engine left its descriptor in the store');
  void addr;
  return { checks, reasons: Object.keys(reasons).length };
}

async function kill(): Promise<unknown> {
  const engine: TransferEngine = await ctx.transfer({ requestTimeoutMs: 20_000 });
  const buf = ctx.alloc(Uint8Array, 4 * MiB);
  await engine.registerLocalMemory(buf);
  await ctx.barrier();
  if (rank === 1) {
    console.log(`target pid ${process.pid}`);
    // The test SIGKILLs this process; it only keeps its event loop alive meanwhile.
    await new Promise((r) => setTimeout(r, 120_000));
    return {};
  }
  const seg = await engine.openSegment(engine.segmentNames[1]);
  const addr = engine.getSegmentDesc(seg).buffers[0].addr;
  console.log('streaming');
  const t0 = performance.now();
  let firstFailAt = 0;
  let reason = '';
  let completedBatches = 0;
  let statuses: string[] = [];
  while (performance.now() - t0 < 60_000) {
    const id = engine.allocateBatchID(8);
    engine.submitTransfer(id, Array.from({ length: 8 }, (_, k) => ({ opcode: k % 2 ? ('READ' as const) : ('WRITE' as const), source: buf.subarray(k * 512 * 1024), targetId: seg, targetOffset: addr + k * 512 * 1024, length: 512 * 1024 })));
    await engine.waitBatch(id, { timeoutMs: 30_000 });
    const st = engine.getTransferStatus(id);
    engine.freeBatchID(id);
    const bad = st.find((s) => s.status !== 'COMPLETED');
    if (bad) {
      firstFailAt = Date.now();
      reason = bad.reason ?? '';
      statuses = [...new Set(st.map((s) => s.status))];
      break;
    }
    completedBatches++;
    // Pace the stream: the kill lands while batches are in flight.
    await new Promise((r) => setTimeout(r, 2));
  }
  if (!firstFailAt) fail('the target never failed');
  // Later submits toward the dead rank fail at once.
  const id = engine.allocateBatchID(1);
  const t1 = performance.now();
  engine.submitTransfer(id, [{ opcode: 'READ', source: buf, targetId: seg, targetOffset: addr, length: 4096 }]);
  await engine.waitBatch(id, { timeoutMs: 30_000 });
  const after = engine.getTransferStatus(id)[0];
  console.log(`failed at ${firstFailAt} ms (Date.now), ${completedBatches} batches before, statuses ${statuses.join(',')}; reason: ${reason}; next request ${after.status} in ${Math.round(performance.now() - t1)} ms: ${after.reason}`);
  process.exit(0);
}

/** Rank 1 never opens its engine: rank 0's open fails within its timeout, naming rank 1. */
async function noopen(): Promise<unknown> {
  if (rank === 1) {
    await ctx.barrier({ timeoutMs: 60_000 });
    return {};
  }
  const t0 = performance.now();
  let message = '';
  try {
    await ctx.transfer({ timeoutMs: 1500 });
  } catch (err) {
    message = (err as Error).message;
  }
  const ms = Math.round(performance.now() - t0);
  if (!/rank 1 did not open its engine within 1500 ms: open is collective/.test(message)) fail(`open without rank 1: ${message || 'succeeded'}`);
  await ctx.barrier({ timeoutMs: 60_000 });
  return { ms };
}

/**
 * Fabric only: rank 1 unregisters a buffer rank 0 has used while rank 0's event loop is
 * blocked. Rank 0 cannot confirm that it stopped using the key, so the unregister fails with
 * ETIMEDOUT naming it within that timeout, and the key stays valid; once unblocked, rank 0's
 * requests to the buffer are served (the key is still valid) or refused by its engine (the
 * descriptor was re-read), never wrong, and the connection still works.
 */
async function retire(): Promise<unknown> {
  const engine: TransferEngine = await ctx.transfer();
  const buf = ctx.alloc(Uint8Array, 64 * 1024).fill(40 + rank);
  await engine.registerLocalMemory(buf);
  await ctx.barrier();
  const seg = await engine.openSegment(engine.segmentNames[1 - rank]);
  const theirs = engine.getSegmentDesc(seg).buffers[0].addr;
  const readTheirs = async () => {
    const id = engine.allocateBatchID(1);
    engine.submitTransfer(id, [{ opcode: 'READ', source: buf.subarray(0, 16), targetId: seg, targetOffset: theirs, length: 16 }]);
    await engine.waitBatch(id, { timeoutMs: 30_000 });
    const st = engine.getTransferStatus(id)[0];
    engine.freeBatchID(id);
    return st;
  };
  let result: unknown = {};
  if (rank === 0) {
    const warm = await readTheirs();
    if (warm.status !== 'COMPLETED' || buf[0] !== 41) fail(`the first READ: ${JSON.stringify(warm)} byte ${buf[0]}`);
    await ctx.store.set('retire/blocking', new Uint8Array(1));
    // The event loop and the engine stand still for 3 s.
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 3000);
    // Its key is still valid (rank 1 kept it): the READ is served, or refused by this engine
    // once it saw the revoke; never wrong bytes, never a broken connection.
    buf.fill(0, 0, 16);
    const stale = await readTheirs();
    const ok = stale.status === 'COMPLETED' ? buf[0] === 41 && buf[15] === 41 : stale.status === 'INVALID' || stale.status === 'FAILED';
    if (!ok) fail(`a READ of the buffer rank 1 unregistered meanwhile: ${JSON.stringify(stale)}, byte ${buf[0]}`);
    // By now the revoke is seen: the next READ is refused by this engine.
    const after = await readTheirs();
    if (after.status !== 'INVALID' && after.status !== 'FAILED') fail(`a READ after the revoke was seen: ${JSON.stringify(after)}`);
    result = { stale: stale.status, after: after.status };
  } else {
    await ctx.store.get('retire/blocking');
    const t0 = performance.now();
    let message = '';
    try {
      await engine.unregisterLocalMemory(buf, { timeoutMs: 1000 });
    } catch (err) {
      message = `${(err as { code?: string }).code} ${(err as Error).message}`;
    }
    const ms = Math.round(performance.now() - t0);
    // ETIMEDOUT itself shows the 1 s deadline held: a wait that overslept until rank 0 ran
    // again (3 s) would have got its ack and resolved.
    if (!/^ETIMEDOUT .*rank\(s\) 0 did not confirm within 1000 ms/.test(message)) fail(`unregister while rank 0 is blocked: ${message || 'succeeded'} after ${ms} ms`);
    result = { ms };
  }
  // Rank 0 blocks in waitBatchSync on a long READ batch from rank 1 (slices queued toward
  // rank 1) while rank 1 unregisters another buffer: rank 0 answers from inside its sync wait,
  // and its batch goes on.
  const big = ctx.alloc(Uint8Array, 64 * MiB);
  await ctx.store.set(`retire/big/${rank}`, new TextEncoder().encode(String(await engine.registerLocalMemory(big))));
  const other = ctx.alloc(Uint8Array, 4096);
  await engine.registerLocalMemory(other);
  await ctx.barrier();
  if (rank === 0) {
    const bigAddr = Number(new TextDecoder().decode(await ctx.store.get('retire/big/1')));
    await ctx.store.set('retire/sync', new Uint8Array(1));
    const id = engine.allocateBatchID(64);
    engine.submitTransfer(id, Array.from({ length: 64 }, (_, k) => ({ opcode: 'READ' as const, source: big.subarray(k * MiB, (k + 1) * MiB), targetId: seg, targetOffset: bigAddr + k * MiB })));
    const notDone = engine.waitBatchSync(id, { timeoutMs: 20_000 });
    if (notDone !== 0) fail(`the READ batch around the unregister: ${JSON.stringify(engine.getTransferStatus(id).find((x) => x.status !== 'COMPLETED'))}`);
    engine.freeBatchID(id);
  } else {
    await ctx.store.get('retire/sync');
    const t0 = performance.now();
    await engine.unregisterLocalMemory(other, { timeoutMs: 10_000 });
    (result as { syncMs?: number }).syncMs = Math.round(performance.now() - t0);
  }
  const sum = new Int32Array([1]);
  await ctx.allreduce(sum, { timeoutMs: 30_000 });
  if (sum[0] !== size) fail(`the allreduce after: ${sum[0]}`);
  await engine.close();
  return result;
}

const scenarios: Record<string, () => Promise<unknown>> = { random, misuse, kill, noopen, retire };
const result = await scenarios[scenario]();
console.log(`ok rank ${rank}: ${JSON.stringify(result)}`);
await ctx.close();
