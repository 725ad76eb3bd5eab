/**
 * weft's side of `weft bench transfer`: a job of 2 ranks under launch() (as `weft run`). Rank 1
 * is the target: it registers its slots and waits in a barrier, doing nothing for the
 * transfers (on a software fabric its engine's passive progress serves them). Rank 0 opens
 * the segment and keeps `inflight` batches of `batch` requests of one block size moving for
 * the plan's seconds, per block size, and prints each point (POINT_PREFIX + JSON).
 */
import { init } from '../../src/index.js';
import { pointOf, POINT_PREFIX, slotsFor, type TrialPlan } from './plan.js';

const plan = JSON.parse(process.argv[2]) as TrialPlan;
const ctx = await init({ timeoutMs: 120_000 });
const engine = await ctx.transfer({ sliceBytes: plan.sliceBytes });
const maxBytes = Math.max(...plan.blocks.map((b) => b * slotsFor(b, plan.batch, plan.inflight)));
const mem = ctx.alloc(Uint8Array, maxBytes);
await engine.registerLocalMemory(mem);
await ctx.barrier();
if (ctx.rank === 0) {
  const seg = await engine.openSegment(engine.segmentNames[1]);
  const base = engine.getSegmentDesc(seg).buffers[0].addr;
  const opcode = plan.op === 'read' ? 'READ' : 'WRITE';
  for (const block of plan.blocks) {
    const slots = slotsFor(block, plan.batch, plan.inflight);
    // The requests of every slot, built once: the loop measures the engine, not object building.
    const bySlot = Array.from({ length: slots }, (_, s) => ({ opcode, source: mem.subarray(s * block, (s + 1) * block), targetId: seg, targetOffset: base + s * block, length: block }) as const);
    const lists = Array.from({ length: slots }, (_, s) => Array.from({ length: plan.batch }, (_, k) => bySlot[(s * plan.batch + k) % slots]));
    let next = 0;
    const warmEnd = performance.now() + plan.seconds * 100;
    const end = warmEnd + plan.seconds * 1000;
    const lat: number[] = [];
    let t0 = 0;
    let counted = 0;
    const one = (id: number) => {
      engine.submitTransfer(id, lists[next++ % slots]);
      return performance.now();
    };
    const finish = (id: number, t: number) => {
      const now = performance.now();
      if (now >= warmEnd) {
        if (!t0) t0 = now;
        else {
          lat.push((now - t) * 1000);
          counted++;
        }
      }
    };
    if (plan.wait === 'sync') {
      const ids = Array.from({ length: plan.inflight }, () => engine.allocateBatchID(plan.batch));
      const at = ids.map((id) => one(id));
      for (let k = 0; performance.now() < end; k = (k + 1) % ids.length) {
        if (engine.waitBatchSync(ids[k], { timeoutMs: 60_000 }) !== 0) throw new Error(JSON.stringify(engine.getTransferStatus(ids[k]).find((s) => s.status !== 'COMPLETED')));
        finish(ids[k], at[k]);
        engine.freeBatchID(ids[k]);
        ids[k] = engine.allocateBatchID(plan.batch);
        at[k] = one(ids[k]);
      }
      for (const id of ids) engine.waitBatchSync(id, { timeoutMs: 60_000 });
    } else {
      await Promise.all(
        Array.from({ length: plan.inflight }, async () => {
          while (performance.now() < end) {
            const id = engine.allocateBatchID(plan.batch);
            const t = one(id);
            if ((await engine.waitBatch(id, { timeoutMs: 60_000 })) !== 0) throw new Error(JSON.stringify(engine.getTransferStatus(id).find((s) => s.status !== 'COMPLETED')));
            finish(id, t);
            engine.freeBatchID(id);
          }
        }),
      );
    }
    const seconds = (performance.now() - t0) / 1000;
    process.stdout.write(POINT_PREFIX + JSON.stringify(pointOf(block, plan.batch, seconds, lat)) + '\n');
    void counted;
  }
}
await ctx.barrier({ timeoutMs: 600_000 });
await ctx.close();
