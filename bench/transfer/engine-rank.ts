/**
 * weft's side of `weft bench transfer`: a job of 2 ranks under launch() (as `weft run`). Rank 1
 * is the target: it registers its slots and waits in a barrier, doing nothing for the
 * transfers (on a software fabric its engine's passive progress serves them). Rank 0 opens
 * the segment and keeps `inflight` batches of `batch` requests of one block size moving for
 * the plan's seconds, per block size, and prints each point (POINT_PREFIX + JSON).
 */
import { init } from '../../src/index.js';
import { warmupSeconds, pointOf, POINT_PREFIX, slotsFor, type TrialPlan } from './plan.js';

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
    // Runs `total` batches with `inflight` of them moving, from idle to the last completion
    // (as the NIC stream: see nic-worker.ts); returns the seconds and the batches' latencies.
    const stream = async (total: number, lat: number[] | undefined): Promise<number> => {
      let started = 0;
      const t0 = performance.now();
      const check = (id: number, bad: number) => {
        if (bad !== 0) throw new Error(JSON.stringify(engine.getTransferStatus(id).find((s) => s.status !== 'COMPLETED')));
      };
      if (plan.wait === 'sync') {
        const ids: number[] = [];
        const at: number[] = [];
        while (started < total && ids.length < plan.inflight) {
          ids.push(engine.allocateBatchID(plan.batch));
          at.push(performance.now());
          engine.submitTransfer(ids[ids.length - 1], lists[next++ % slots]);
          started++;
        }
        for (let k = 0; ids.length > 0; ) {
          check(ids[k], engine.waitBatchSync(ids[k], { timeoutMs: 60_000 }));
          lat?.push((performance.now() - at[k]) * 1000);
          engine.freeBatchID(ids[k]);
          if (started < total) {
            ids[k] = engine.allocateBatchID(plan.batch);
            at[k] = performance.now();
            engine.submitTransfer(ids[k], lists[next++ % slots]);
            started++;
            k = (k + 1) % ids.length;
          } else {
            ids.splice(k, 1);
            at.splice(k, 1);
            if (k >= ids.length) k = 0;
          }
        }
      } else {
        await Promise.all(
          Array.from({ length: plan.inflight }, async () => {
            while (started < total) {
              started++;
              const id = engine.allocateBatchID(plan.batch);
              const t = performance.now();
              engine.submitTransfer(id, lists[next++ % slots]);
              check(id, await engine.waitBatch(id, { timeoutMs: 60_000 }));
              lat?.push((performance.now() - t) * 1000);
              engine.freeBatchID(id);
            }
          }),
        );
      }
      return (performance.now() - t0) / 1000;
    };
    let warm = plan.inflight;
    let warmSec = await stream(warm, undefined);
    while (warmSec < warmupSeconds(plan.seconds)) {
      warm *= 2;
      warmSec = await stream(warm, undefined);
    }
    const total = Math.max(2 * plan.inflight, Math.round((warm / warmSec) * plan.seconds));
    const lat: number[] = [];
    const seconds = await stream(total, lat);
    process.stdout.write(POINT_PREFIX + JSON.stringify(pointOf(block, plan.batch, seconds, lat)) + '\n');
  }
}
await ctx.barrier({ timeoutMs: 600_000 });
await ctx.close();
