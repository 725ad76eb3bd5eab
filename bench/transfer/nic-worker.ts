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
import { pointOf, slotsFor, type TrialPlan, type TrialPoint } from './plan.js';

const [, rankS, , provider, planJson] = process.argv.slice(2);
const rank = Number(rankS);
const plan = JSON.parse(planJson) as TrialPlan;
const released = new Promise<void>((resolve) => process.on('message', (m: { type: string }) => m.type === 'release' && resolve()));
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
    // Batch k is ops [k*batch, (k+1)*batch): timed from its first post to its last completion.
    const started = new Float64Array(plan.inflight + 1);
    let posted = 0;
    let done = 0;
    const lat: number[] = [];
    const post = () => {
      const slot = posted % slots;
      if (posted % plan.batch === 0) started[(posted / plan.batch) % started.length] = performance.now();
      if (plan.op === 'read') qp.postRead(mr, slot * block, remote, slot * block, block, posted >>> 0, true);
      else qp.postWrite(mr, slot * block, remote, slot * block, block, posted >>> 0, true);
      posted++;
    };
    const warm = performance.now() + plan.seconds * 100;
    let t0 = 0;
    let measuredFrom = 0;
    const end = () => performance.now() >= warm + plan.seconds * 1000;
    while (!(t0 && end() && done === posted)) {
      while (posted - done < window && !(t0 && end())) post();
      const n = dev.cq.poll(cq);
      for (let i = 0; i < n; i++) {
        if (cq.status[i] !== Status.SUCCESS) throw new Error(`nic stream ${plan.op} ${block} B over ${provider}: ${cq.errors[i]?.message}`);
        done++;
        if (done % plan.batch === 0) {
          const k = done / plan.batch - 1;
          const now = performance.now();
          if (!t0 && now >= warm) {
            t0 = now;
            measuredFrom = done;
          } else if (t0) lat.push((now - started[k % started.length]) * 1000);
        }
      }
    }
    const seconds = (performance.now() - t0) / 1000;
    const p = pointOf(block, plan.batch, seconds, lat);
    // Throughput from the operations completed after the warm-up (the latency list excludes its batch).
    p.ops_per_s = (done - measuredFrom) / seconds;
    p.gbps = (p.ops_per_s * block) / 1e9;
    points.push(p);
  }
  qp.postWriteImm(mr, 0, remote, 0, 0, 1, 0, false);
  // Let the WRITE_IMM go out (ofi posts on poll).
  for (let k = 0; k < 1000 && qp.pendingOps > 0; k++) dev.cq.poll(cq);
  dev.cq.poll(cq);
  return points;
}

main()
  .then(async (result) => {
    process.send!({ type: 'result', rank, result });
    await released;
    process.exit(0);
  })
  .catch((err: Error) => process.send!({ type: 'error', rank, message: err.stack ?? String(err) }, () => process.exit(1)));
