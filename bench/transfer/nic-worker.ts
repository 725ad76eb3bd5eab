/**
 * The ceiling of `weft bench transfer`: the NIC layer's own streaming of plain READs or WRITEs
 * of one block size on ONE queue pair, busy-polled, with as many operations in flight as the
 * engine run has requests (batch x inflight), over the same slots of registered memory. Run as
 * `node nic-worker.js stream <rank> 2 <provider> <plan json>` by harness/local-group.ts; rank 1
 * is the target and only waits (through the one waiting loop, which also serves a software
 * fabric's RMA), until rank 0's 0-byte WRITE_IMM says it is done.
 */
import { CompletionBatch, Opcode, Status } from '../../src/nic/index.js';
import { joinMesh } from '../../harness/local-group.js';
import { runWorker } from '../../harness/worker-ipc.js';
import { warmupSeconds, pointOf, slotsFor, type TrialPlan, type TrialPoint } from './plan.js';

const [, rankS, , provider, planJson] = process.argv.slice(2);
const rank = Number(rankS);
const plan = JSON.parse(planJson) as TrialPlan;
const cq = new CompletionBatch(256);

async function main(): Promise<TrialPoint[]> {
  const maxBytes = Math.max(...plan.blocks.map((b) => b * slotsFor(b, plan.batch, plan.inflight)));
  const mesh = await joinMesh(rank, 2, provider, [maxBytes], { recvCredits: 16 });
  const qp = mesh.qps[1 - rank]!;
  const mr = mesh.mrs[0];
  const remote = mesh.remotes[1 - rank][0];
  const dev = mesh.device;
  if (rank === 1) {
    for (;;) {
      await dev.cq.wait({ timeoutMs: 600_000 });
      const n = dev.cq.poll(cq);
      for (let i = 0; i < n; i++) if (cq.opcode[i] === Opcode.RECV_WRITE_IMM) return [];
    }
  }
  const points: TrialPoint[] = [];
  const window = plan.batch * plan.inflight;
  for (const block of plan.blocks) {
    const slots = slotsFor(block, plan.batch, plan.inflight);
    // Streams `total` operations with at most `window` in flight, from an idle queue to the last
    // completion; batch k is operations [k*batch, (k+1)*batch), timed from its first post to
    // its last completion. Counting from idle to drained is what makes a provider that copies
    // inside the post (shm) and one that completes later (the fabric) comparable.
    const stream = (total: number, lat: number[] | undefined): number => {
      const started = new Float64Array(plan.inflight + 2);
      let posted = 0;
      let done = 0;
      const t0 = performance.now();
      while (done < total) {
        while (posted < total && posted - done < window) {
          const slot = posted % slots;
          if (posted % plan.batch === 0) started[(posted / plan.batch) % started.length] = performance.now();
          if (plan.op === 'read') qp.postRead(mr, slot * block, remote, slot * block, block, posted >>> 0, true);
          else qp.postWrite(mr, slot * block, remote, slot * block, block, posted >>> 0, true);
          posted++;
        }
        const n = dev.cq.poll(cq);
        for (let i = 0; i < n; i++) {
          if (cq.status[i] !== Status.SUCCESS) throw new Error(`nic stream ${plan.op} ${block} B over ${provider}: ${cq.errors[i]?.message}`);
          done++;
          if (lat && (done % plan.batch === 0 || done === total)) lat.push((performance.now() - started[Math.floor((done - 1) / plan.batch) % started.length]) * 1000);
        }
      }
      return (performance.now() - t0) / 1000;
    };
    // Warm-up, which also sizes the measured run to about plan.seconds.
    let warmOps = window;
    let warmSec = stream(warmOps, undefined);
    while (warmSec < warmupSeconds(plan.seconds)) {
      warmOps *= 2;
      warmSec = stream(warmOps, undefined);
    }
    const total = Math.max(2 * window, Math.round((warmOps / warmSec) * plan.seconds));
    const lat: number[] = [];
    const seconds = stream(total, lat);
    const p = pointOf(block, plan.batch, seconds, lat);
    p.ops_per_s = total / seconds;
    p.gbps = (p.ops_per_s * block) / 1e9;
    points.push(p);
  }
  qp.postWriteImm(mr, 0, remote, 0, 0, 1, 0, false);
  // Let the WRITE_IMM go out (ofi posts on poll).
  for (let k = 0; k < 1000 && qp.pendingOps > 0; k++) dev.cq.poll(cq);
  dev.cq.poll(cq);
  return points;
}

runWorker(rank, main);
