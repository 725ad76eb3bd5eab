/**
 * One benchkv rank (run by `weft run`, one process per rank): the orchestrator of section 9.
 * Starts K daemon threads and C client threads, passes segment names between them, trades
 * the threads' copyrpc endpoint infos with the other ranks through the job's store, then
 * measures: a warm-up, then `runs` runs of `epochs` epochs each (per run the trimmed mean of
 * its epochs: the slowest and fastest epoch dropped), every run started by a barrier of all
 * ranks. Totals are summed over ranks with weft's own allreduce; rank 0 prints the result as
 * one `KVRESULT {json}` line for the bench command.
 *
 * Usage (from the bench command): weft run -n N dist/bench/kv/rank.js '<RankPlan JSON>'
 */
import { cpus } from 'node:os';
import { Worker } from 'node:worker_threads';
import { fileURLToPath } from 'node:url';
import { init } from 'weftjs';
import { C, CLIENT_WORDS, CTL, D, LOOP_WORDS, SERIES_MAX, SERIES_WORDS, region } from './board.js';
import type { KvConfig } from './config.js';
import { RESULT_PREFIX, type RankPlan, type RankResult } from './result.js';
import { BUCKETS, quantile } from './histogram.js';
import type { SetupMessage } from './rpc-thread.js';

const plan = JSON.parse(process.argv[2] ?? '{}') as RankPlan;
const ctx = await init({ timeoutMs: plan.timeoutMs });
const rank = ctx.rank;
const ranks = ctx.size;
const here = (file: string) => fileURLToPath(new URL(file, import.meta.url));
// The host's cores (WEFT_CORES for hosts emulated on one machine), not this process's affinity:
// weft run pins a rank to one core when there are enough, and its threads share it.
const cores = Number(process.env.WEFT_CORES) || cpus().length;
const threadsHere = ctx.localSize * (plan.daemons + plan.clients);
const spans = ctx.hosts.spansHosts;
const cfg: KvConfig = {
  ...plan,
  rank,
  ranks,
  job: process.env.WEFT_JOB ?? 'weft',
  oversubscribed: threadsHere > cores,
  // 'ofi' (--provider ofi) puts every pair on the fabric, one host or several.
  provider: plan.provider === 'ofi' ? 'ofi' : spans ? 'shm+ofi' : 'shm',
  ...(spans || plan.provider !== 'shm' ? { bindAddress: ctx.hosts.ranks[rank].address || undefined } : {}),
};

const ctlSab = new SharedArrayBuffer(CTL.WORDS * 4);
const ctl = new Int32Array(ctlSab);
const loopSab = new SharedArrayBuffer((cfg.daemons + cfg.clients) * LOOP_WORDS * 8);
const clientSab = new SharedArrayBuffer(cfg.clients * CLIENT_WORDS * 8);
const workers: { w: Worker; name: string }[] = [];
let failure: Error | undefined;

function stopAll(): void {
  Atomics.store(ctl, CTL.CLIENTS_STOP, 1);
  Atomics.store(ctl, CTL.DAEMONS_STOP, 1);
  Atomics.notify(ctl, CTL.RUN);
  Atomics.notify(ctl, CTL.DAEMONS_STOP);
}

/** A thread that fails or exits early ends this rank with an error naming it (weft run then stops the job). */
function watch(w: Worker, name: string): void {
  workers.push({ w, name });
  w.on('error', (err) => {
    failure ??= new Error(`rank ${rank} ${name} failed: ${err.message}`);
    console.error(failure.message);
    stopAll();
    process.exitCode = 1;
    setTimeout(() => process.exit(1), 200).unref();
  });
}

function message<T extends SetupMessage['type']>(w: Worker, type: T, name: string): Promise<Extract<SetupMessage, { type: T }>> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`rank ${rank}: ${name} sent no '${type}' within ${cfg.timeoutMs} ms`)), cfg.timeoutMs);
    const on = (m: SetupMessage) => {
      if (m.type !== type) return;
      clearTimeout(timer);
      w.off('message', on);
      w.off('exit', onExit);
      resolve(m as Extract<SetupMessage, { type: T }>);
    };
    const onExit = (code: number) => {
      clearTimeout(timer);
      reject(new Error(`rank ${rank}: ${name} exited (code ${code}) before sending '${type}'`));
    };
    w.on('message', on);
    w.once('exit', onExit);
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Warm-up windows: the throughput of two in a row within WARM_TOLERANCE of each other is steady. */
const WARM_WINDOW_MS = 200;
const WARM_TOLERANCE = 0.25;

/**
 * Warm-up: --warmup seconds, then on (at most --settle seconds) until the throughput is steady
 * on every rank. The first
 * second or so of a run goes at a tenth of the steady rate on this 2-core VM (the threads'
 * code is still interpreted, and V8's compiler threads compete with 8 busy ones), so a fixed
 * 0.3 s warm-up measured that start (0.02-0.14 Mops where the steady rate is 0.4). The ranks
 * agree through an allreduce per window: the measured runs start on all of them at once.
 */
async function warmUp(ops: () => number): Promise<{ seconds: number; steady: boolean }> {
  const t0 = performance.now();
  await sleep(plan.warmup * 1000);
  const unsteady = new Float64Array(1);
  let previous = -1;
  for (;;) {
    const before = ops();
    const t = performance.now();
    await sleep(WARM_WINDOW_MS);
    const rate = (ops() - before) / (performance.now() - t);
    const steady = previous > 0 && rate > 0 && Math.abs(rate - previous) <= WARM_TOLERANCE * Math.max(rate, previous);
    previous = rate;
    const late = (performance.now() - t0) / 1000 >= plan.warmup + plan.settle;
    // Summed over ranks: 0 once every rank is steady or out of time.
    unsteady[0] = steady || late ? 0 : 1;
    if (failure) throw failure;
    await ctx.allreduce(unsteady, { timeoutMs: cfg.timeoutMs });
    if (unsteady[0] === 0) return { seconds: (performance.now() - t0) / 1000, steady };
  }
}

try {
  // Daemons first: their segment names go to the clients.
  const daemons = Array.from({ length: cfg.daemons }, (_, d) => {
    const w = new Worker(here('./daemon.js'), { workerData: { cfg, index: d, ctl: ctlSab, loops: loopSab } });
    watch(w, `daemon ${d}`);
    return w;
  });
  const names = await Promise.all(daemons.map((w, d) => message(w, 'names', `daemon ${d}`)));
  const fluxName = names[0].flux;
  const delegName = names[0].deleg;
  for (const w of daemons) w.postMessage({ type: 'flux', flux: fluxName });
  const clients = Array.from({ length: cfg.clients }, (_, c) => {
    const w = new Worker(here('./client.js'), {
      workerData: { cfg, index: c, ctl: ctlSab, clients: clientSab, loops: loopSab, ipcNames: names.map((n) => n.ipc!), delegName },
    });
    watch(w, `client ${c}`);
    return w;
  });
  const all = [...daemons.map((w, d) => ({ w, name: `daemon ${d}` })), ...clients.map((w, c) => ({ w, name: `client ${c}` }))];

  // The endpoint exchange (section 9, step 8): one blob per rank with every link's info.
  const infos = await Promise.all(all.map(({ w, name }) => message(w, 'infos', name)));
  const mine: Record<string, string> = {};
  for (const m of infos) for (const [k, v] of Object.entries(m.infos)) mine[k] = Buffer.from(v).toString('base64');
  const ns = `kv/${cfg.backend}`;
  await ctx.store.set(`${ns}/${rank}`, new TextEncoder().encode(JSON.stringify(mine)));
  const peers = [...Array(ranks).keys()].filter((p) => p !== rank);
  const blobs = await ctx.store.multiGet(peers.map((p) => `${ns}/${p}`), { timeoutMs: cfg.timeoutMs });
  const theirs: Record<string, Uint8Array> = {};
  for (const b of blobs) for (const [k, v] of Object.entries(JSON.parse(new TextDecoder().decode(b)) as Record<string, string>)) theirs[k] = Buffer.from(v, "base64");
  all.forEach(({ w }, i) => {
    const want: Record<string, Uint8Array> = {};
    for (const k of Object.keys(infos[i].infos)) want[k] = theirs[k];
    w.postMessage({ type: 'connect', infos: want });
  });
  await Promise.all(all.map(({ w, name }) => message(w, 'ready', name)));
  await ctx.barrier({ timeoutMs: cfg.timeoutMs });

  // Go: warm-up, then the measured runs.
  const ops = () => {
    let s = 0;
    for (let c = 0; c < cfg.clients; c++) s += region(clientSab, CLIENT_WORDS, c)[C.OPS];
    return s;
  };
  Atomics.store(ctl, CTL.RUN, 1);
  Atomics.notify(ctl, CTL.RUN);
  const warm = await warmUp(ops);
  const loops0 = Array.from({ length: cfg.daemons }, (_, d) => region(loopSab, LOOP_WORDS, d)[D.LOOPS]);
  const yields = () => {
    let s = 0;
    for (let t = 0; t < cfg.daemons + cfg.clients; t++) s += region(loopSab, LOOP_WORDS, t)[D.YIELDS];
    return s;
  };
  const yields0 = yields();
  const ops0 = ops();
  const tRuns0 = performance.now();
  const runsMops: number[] = [];
  for (let r = 0; r < plan.runs && !failure; r++) {
    await ctx.barrier({ timeoutMs: cfg.timeoutMs });
    Atomics.store(ctl, CTL.RECORD, 1);
    const epochs: number[] = [];
    let before = ops();
    let t = performance.now();
    for (let e = 0; e < plan.epochs; e++) {
      await sleep((plan.duration * 1000) / plan.epochs);
      const now = performance.now();
      const after = ops();
      epochs.push((after - before) / ((now - t) * 1000));
      before = after;
      t = now;
    }
    const sorted = [...epochs].sort((a, b) => a - b);
    const kept = sorted.length > 2 ? sorted.slice(1, -1) : sorted;
    runsMops.push(kept.reduce((a, b) => a + b, 0) / kept.length);
  }
  Atomics.store(ctl, CTL.RECORD, 0);
  const runSeconds = (performance.now() - tRuns0) / 1000;
  const loopsDone = Array.from({ length: cfg.daemons }, (_, d) => region(loopSab, LOOP_WORDS, d)[D.LOOPS] - loops0[d]);
  const yieldsDone = yields() - yields0;
  const opsDone = ops() - ops0;

  // Stop: clients drain, every rank waits for every other's clients, then daemons leave.
  Atomics.store(ctl, CTL.CLIENTS_STOP, 1);
  Atomics.notify(ctl, CTL.RUN);
  const drainBy = Date.now() + cfg.timeoutMs;
  while (!failure) {
    let drained = 0;
    for (let c = 0; c < cfg.clients; c++) drained += region(clientSab, CLIENT_WORDS, c)[C.DRAINED];
    if (drained === cfg.clients) break;
    if (Date.now() > drainBy) throw new Error(`rank ${rank}: clients did not drain within ${cfg.timeoutMs} ms`);
    await sleep(5);
  }
  if (failure) throw failure;
  await ctx.barrier({ timeoutMs: cfg.timeoutMs });
  Atomics.store(ctl, CTL.DAEMONS_STOP, 1);
  Atomics.notify(ctl, CTL.DAEMONS_STOP);
  await Promise.all(all.map(({ w }) => new Promise((r) => w.once('exit', r))));

  // Sum over ranks with weft's allreduce: runs, histogram, loop counters, client counters.
  const R = plan.runs;
  const sums = new Float64Array(R + BUCKETS + 18);
  runsMops.forEach((v, i) => (sums[i] = v));
  const hist = sums.subarray(R, R + BUCKETS);
  const tail = sums.subarray(R + BUCKETS);
  for (let c = 0; c < cfg.clients; c++) {
    const s = region(clientSab, CLIENT_WORDS, c);
    for (let b = 0; b < BUCKETS; b++) hist[b] += s[C.HIST + b];
    tail[0] += s[C.LOCAL];
    tail[1] += s[C.REMOTE];
    tail[2] += s[C.MISMATCH];
  }
  for (let t = 0; t < cfg.daemons + cfg.clients; t++) {
    const s = region(loopSab, LOOP_WORDS, t);
    tail[3] += s[D.CQ_LOOPS];
    tail[4] += s[D.RESPONSES];
    tail[5] += s[D.B0];
    tail[6] += s[D.B1];
    tail[7] += s[D.B2_10];
    tail[8] += s[D.B11_100];
    tail[9] += s[D.B100];
    if (t < cfg.daemons) {
      tail[10] += s[D.SETTING_SUM];
      tail[14] += s[D.CQ_LOOPS];
    }
    tail[11] += s[D.OUT_SUM] / Math.max(1, s[D.OUT_N]); // outstanding: summed over the threads holding endpoints
    tail[12] += s[D.BACKLOGGED];
  }
  tail[13] = loopsDone.reduce((a, b) => a + b, 0) / runSeconds / cfg.daemons;
  tail[15] = yieldsDone;
  tail[16] = opsDone;
  const myMops = runsMops.slice().sort((a, b) => a - b)[runsMops.length >> 1];
  await ctx.allreduce(sums);
  const perRank = new Float64Array(ranks);
  await ctx.allgather(Float64Array.of(myMops), perRank);

  if (rank === 0) {
    // Time series of this rank: the loop thread with the most samples (the one holding endpoints).
    let best = -1;
    let bestN = 0;
    for (let t = 0; t < cfg.daemons + cfg.clients; t++) {
      const n = region(loopSab, LOOP_WORDS, t)[D.SERIES_N];
      if (n > bestN) {
        best = t;
        bestN = n;
      }
    }
    const series = { t_ms: [] as number[], outstanding: [] as number[], cqe_batch: [] as number[], setting: [] as number[] };
    if (best >= 0) {
      const s = region(loopSab, LOOP_WORDS, best);
      for (let i = 0; i < Math.min(bestN, SERIES_MAX); i++) {
        const base = D.SERIES + SERIES_WORDS * i;
        series.t_ms.push(s[base]);
        series.outstanding.push(s[base + 1]);
        series.cqe_batch.push(s[base + 2]);
        series.setting.push(s[base + 3]);
      }
    }
    const cqLoops = tail[3];
    const result: RankResult = {
      backend: cfg.backend,
      ranks,
      hosts: ctx.hosts.hostIds.length,
      fabric: cfg.provider,
      runsMops: Array.from(sums.subarray(0, R)),
      perRankMops: Array.from(perRank),
      p50_us: quantile(hist, 0.5) / 1000,
      p90_us: quantile(hist, 0.9) / 1000,
      p99_us: quantile(hist, 0.99) / 1000,
      p999_us: quantile(hist, 0.999) / 1000,
      outstanding_avg: tail[11],
      cqe_batch_avg: cqLoops > 0 ? tail[4] / cqLoops : 0,
      cqe_hist: { b0: tail[5], b1: tail[6], b2_10: tail[7], b11_100: tail[8], b100: tail[9] },
      poll_controller: cfg.pollController,
      poll_setting_avg: tail[14] > 0 ? tail[10] / tail[14] : 0,
      loops_per_s_per_daemon: tail[13] / ranks,
      yields_per_request: tail[16] > 0 ? tail[15] / tail[16] : 0,
      local_share: tail[0] / Math.max(1, tail[0] + tail[1]),
      mismatches: tail[2],
      backlogged: tail[12],
      threads: threadsHere,
      cores,
      oversubscribed: cfg.oversubscribed,
      warmup_s: warm.seconds,
      warmup_steady: warm.steady,
      series,
    };
    console.log(RESULT_PREFIX + JSON.stringify(result));
  }
  const mismatches = tail[2];
  await ctx.close();
  if (cfg.verify && mismatches > 0) {
    console.error(`rank ${rank}: --verify found ${mismatches} wrong get results over the job`);
    process.exitCode = 1;
  }
} catch (err) {
  stopAll();
  console.error(failure?.message ?? (err as Error).message);
  for (const { w } of workers) void w.terminate();
  process.exitCode = 1;
  setTimeout(() => process.exit(1), 500).unref();
}
