/**
 * One side of a NIC benchmark pair: `node worker.js <scenario> <rank> 2 <provider> <json>`.
 * Rank 0 measures and reports; rank 1 reflects (ping-pong) or sinks (stream). Busy-polls:
 * these are the latency and rate of the synchronous path.
 */
import { CompletionBatch, Opcode, Status } from '../../src/nic/index.js';
import { joinMesh } from '../../harness/local-group.js';
import { runWorker } from '../../harness/worker-ipc.js';

const [scenario, rankS, nS, provider, argsJson] = process.argv.slice(2);
const rank = Number(rankS);
const args = JSON.parse(argsJson) as { size: number; iters: number; runs: number; warmup: number; slots: number };
const batch = new CompletionBatch(256);


function check(i: number): void {
  if (batch.status[i] !== Status.SUCCESS) throw new Error(`bench ${scenario} (${provider}): ${batch.errors[i]?.message}`);
}

async function pingpong(): Promise<unknown> {
  const size = args.size;
  // Separate receive (region 0, the peer's target) and send (region 1) buffers, as
  // fi_rma_pingpong does: the source line then stays in the sender's cache.
  const mesh = await joinMesh(rank, 2, provider, [size, size], { recvCredits: 64 });
  const peer = 1 - rank;
  const qp = mesh.qps[peer]!;
  const remote = mesh.remotes[peer][0];
  const mr = mesh.mrs[1];
  const cq = mesh.device.cq;
  const total = args.warmup + args.iters * args.runs;
  const rtts: number[] = [];
  if (rank === 1) {
    for (let got = 0; got < total; ) {
      const k = cq.poll(batch);
      for (let i = 0; i < k; i++) {
        check(i);
        if (batch.opcode[i] === Opcode.RECV_WRITE_IMM) {
          got++;
          qp.postWriteImm(mr, 0, remote, 0, size, got, 0, false);
        }
      }
    }
    return {};
  }
  const roundTrip = (n: number) => {
    for (let it = 0; it < n; it++) {
      qp.postWriteImm(mr, 0, remote, 0, size, it, 0, false);
      for (let got = false; !got; ) {
        const k = cq.poll(batch);
        for (let i = 0; i < k; i++) {
          check(i);
          if (batch.opcode[i] === Opcode.RECV_WRITE_IMM) got = true;
        }
      }
    }
  };
  roundTrip(args.warmup);
  for (let r = 0; r < args.runs; r++) {
    const t0 = performance.now();
    roundTrip(args.iters);
    rtts.push(((performance.now() - t0) * 1000) / args.iters);
  }
  return { rtt_us: rtts };
}

async function stream(): Promise<unknown> {
  const { size, iters, slots } = args;
  const mesh = await joinMesh(rank, 2, provider, [size * slots], { recvCredits: 512 });
  const peer = 1 - rank;
  const qp = mesh.qps[peer]!;
  const remote = mesh.remotes[peer][0];
  const mr = mesh.mrs[0];
  const cq = mesh.device.cq;
  const rounds = args.runs + 1;
  if (rank === 1) {
    // Sink: count arrivals, acknowledge each full round with one WRITE_IMM back.
    for (let round = 0; round < rounds; round++) {
      for (let got = 0; got < iters; ) {
        const k = cq.poll(batch);
        for (let i = 0; i < k; i++) {
          check(i);
          if (batch.opcode[i] === Opcode.RECV_WRITE_IMM) got++;
        }
      }
      qp.postWriteImm(mr, 0, remote, 0, 0, round, 0, false);
    }
    return {};
  }
  const gbps: number[] = [];
  const ops: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const t0 = performance.now();
    let acked = false;
    for (let it = 0; it < iters; it++) {
      qp.postWriteImm(mr, 0, remote, (it % slots) * size, size, it, it, (it & 63) === 63);
      if ((it & 15) === 15 || qp.pendingOps > 0) {
        const k = cq.poll(batch);
        for (let i = 0; i < k; i++) {
          check(i);
          if (batch.opcode[i] === Opcode.RECV_WRITE_IMM) acked = true;
        }
      }
    }
    while (!acked) {
      const k = cq.poll(batch);
      for (let i = 0; i < k; i++) {
        check(i);
        if (batch.opcode[i] === Opcode.RECV_WRITE_IMM) acked = true;
      }
    }
    const sec = (performance.now() - t0) / 1000;
    // Round 0 warms caches, page mappings and the fabric.
    if (round > 0) {
      gbps.push((iters * size) / sec / 1e9);
      ops.push(iters / sec);
    }
  }
  return { gbps, ops_per_s: ops };
}

const scenarios: Record<string, () => Promise<unknown>> = { pingpong, stream };

runWorker(rank, scenarios[scenario]);
void nS;
