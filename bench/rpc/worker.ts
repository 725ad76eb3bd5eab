/**
 * One side of a copyrpc benchmark pair: `node worker.js <scenario> <rank> 2 <provider> <json>`
 * (spawned by runScenario). Rank 0 calls and measures; rank 1 answers every request at once
 * with a response of the same size. Both busy-poll: this is the synchronous zero-allocation
 * path (Endpoint.call / RpcEngine.poll / recv / reply).
 *
 * Scenario 'run' takes a list of points {qd, endpoints, bytes, calls}; each point runs
 * `runs` times after a warm-up and reports calls/s (and for qd 1 the round trip). With
 * `gcCheck`, the last point also counts garbage collections during its runs (zero means the
 * loop allocated nothing per call: a million calls that allocated even 16 bytes each would
 * fill the young generation several times).
 */
import { PerformanceObserver } from 'node:perf_hooks';
import { createRpcEngine, type Endpoint } from '../../src/rpc/index.js';
import { runWorker } from '../../harness/worker-ipc.js';

interface Point {
  qd: number;
  endpoints: number;
  bytes: number;
  calls: number;
}
interface Args {
  points: Point[];
  runs: number;
  ring: number;
  gcCheck?: boolean;
  /**
   * The caller polls (which sends the open batch) after this many calls, default half the
   * queue depth: two batches in flight, so both processes work at once.
   */
  chunk?: number;
}

const [, rankS, , provider, argsJson] = process.argv.slice(2);
const rank = Number(rankS);
const args = JSON.parse(argsJson) as Args;

function exchange(blobs: Record<number, string[]>): Promise<string[]> {
  return new Promise((resolve) => {
    const onMsg = (m: { type: string; table: { rank: number; descs: string[] }[] }) => {
      if (m.type !== 'peers') return;
      process.off('message', onMsg);
      resolve(m.table.find((e) => e.rank !== rank)!.descs);
    };
    process.on('message', onMsg);
    process.send!({ type: 'addr', rank, addrs: {}, descs: blobs[1 - rank] });
  });
}

async function main(): Promise<unknown> {
  const maxEps = Math.max(...args.points.map((p) => p.endpoints));
  const ctx = await createRpcEngine<number>({ provider, label: `rank ${rank}`, srqSize: 64 * maxEps, cqDepth: 1 << 15 } as never);
  const eps: Endpoint<number>[] = [];
  for (let i = 0; i < maxEps; i++) eps.push(ctx.createEndpoint({ sendRingSize: args.ring, recvRingSize: args.ring, peerLabel: `rank ${1 - rank}` }));
  const infos = await exchange({ [1 - rank]: eps.map((e) => Buffer.from(e.localInfo()).toString('base64')) });
  eps.forEach((e, i) => e.connect(new Uint8Array(Buffer.from(infos[i], 'base64'))));
  const total = args.points.reduce((a, p) => a + p.calls * (args.runs + 1), 0);

  if (rank === 1) {
    // One response view per size, made up front: the serving loop allocates nothing either.
    const resp = new Uint8Array(4096);
    const replies = Array.from({ length: 4097 }, (_, n) => resp.subarray(0, n));
    let served = 0;
    while (served < total) {
      ctx.poll();
      for (let h = ctx.recv(); h; h = ctx.recv()) {
        h.reply(replies[h.length]);
        served++;
      }
      // Send the replies now rather than at the next poll, which would first ingest whatever
      // arrived meanwhile: the caller then starts on them while we decode its next batch.
      ctx.flush();
    }
    for (let i = 0; i < 1000; i++) ctx.poll();
    return { served };
  }

  const payloads = new Map<number, Uint8Array>();
  const out = new Int32Array(maxEps);
  let done = 0;
  const onResponse = (e: number) => {
    out[e]--;
    done++;
  };
  let gcs = 0;
  const obs = new PerformanceObserver((list) => (gcs += list.getEntries().length));
  const results: unknown[] = [];
  for (const [pi, p] of args.points.entries()) {
    if (!payloads.has(p.bytes)) payloads.set(p.bytes, new Uint8Array(p.bytes).fill(7));
    const payload = payloads.get(p.bytes) as Uint8Array;
    const gcCheck = args.gcCheck && pi === args.points.length - 1;
    const rates: number[] = [];
    const rtts: number[] = [];
    let heapDelta = 0;
    for (let run = 0; run <= args.runs; run++) {
      if (run === 1 && gcCheck) {
        gcs = 0;
        obs.observe({ entryTypes: ['gc'] });
        heapDelta = -process.memoryUsage().heapUsed;
      }
      done = 0;
      let issued = 0;
      const E = p.endpoints;
      const chunk = args.chunk ?? Math.max(1, p.qd >> 1);
      const t0 = performance.now();
      while (done < p.calls) {
        for (let e = 0; e < E; e++) {
          const ep = eps[e];
          let k = 0;
          while (out[e] < p.qd && issued < p.calls && ep.call(payload, e, p.bytes) >= 0) {
            out[e]++;
            issued++;
            if (++k === chunk) {
              k = 0;
              ctx.poll(onResponse);
            }
          }
        }
        ctx.poll(onResponse);
      }
      const sec = (performance.now() - t0) / 1000;
      if (run > 0) {
        rates.push(p.calls / sec);
        rtts.push((sec * 1e6 * p.qd * p.endpoints) / p.calls);
      }
    }
    if (gcCheck) {
      heapDelta += process.memoryUsage().heapUsed;
      await new Promise((r) => setTimeout(r, 50));
      obs.disconnect();
    }
    results.push({ ...p, calls_per_s: rates, rtt_us: rtts, ...(gcCheck ? { gc_count: gcs, heap_delta_bytes: heapDelta, checked_calls: p.calls * args.runs } : {}) });
  }
  return { results };
}

runWorker(rank, main);
