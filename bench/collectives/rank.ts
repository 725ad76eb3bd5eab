/**
 * One weft rank of `weft bench collectives`, started by launch() (bench/collectives/weft.ts)
 * with its provider in WEFT_PROVIDER and its plan as JSON in argv[2]. Same protocol as the
 * peer harnesses (bench/peers/): per (op, size), one checked run on rank-dependent data,
 * warmup, then timed runs of `barrierSync; t0; op; t1`; the per-iteration times are
 * MAX-reduced across ranks elementwise with weft's own allreduce, and rank 0 prints one
 * `WEFT_ROW {...}` line per variant: 'weft' awaits the Promise API, 'weft-sync' calls the
 * blocking `...Sync` API.
 */
import { init, type ProcessGroup } from '../../src/index.js';
import { median } from '../lib/stats.js';
import { caseLayout, iterationsFor, type CollectiveOp, type CollectiveRow } from './metrics.js';
import { ROW_PREFIX, VARIANT_SYSTEM, type RankPlan, type Variant } from './plan.js';

/** Warmup calls per size a JavaScript rank makes at least (see main). */
const JIT_WARMUP = 2000;

/** The same test data as the peer harnesses: small integers, so float32 sums are exact. */
function value(rank: number, i: number): number {
  return (rank + 1) * ((i % 61) + 1);
}

/** Registered arrays live until close: reuse one per (length, role) across the ops. */
const pool = new Map<string, Float32Array>();
function allocated(ctx: ProcessGroup, n: number, which: string): Float32Array {
  const key = `${which}:${n}`;
  let a = pool.get(key);
  if (a === undefined) pool.set(key, (a = ctx.alloc(Float32Array, n)));
  return a;
}

/** One (op, size): its buffers, the two ways to run it, and the check of its result. */
interface Case {
  bytes: number;
  impl: Record<Variant, string>;
  reset(): void;
  runAsync(): Promise<unknown>;
  runSync(): void;
  /** The first wrong element, or undefined. */
  check(): string | undefined;
}

function makeCase(ctx: ProcessGroup, op: CollectiveOp, requested: number, timeoutMs: number, buffers: 'alloc' | 'heap', hierarchical: boolean): Case {
  const { rank, size } = ctx;
  const L = caseLayout(op, requested, size);
  // ctx.alloc: registered memory peers on this host read in place (what a tuned app uses, as
  // nccl-tests uses device buffers); --buffers heap measures arrays in the JS heap.
  const array = (n: number, which: string) => (buffers === 'alloc' && n > 0 ? allocated(ctx, n, which) : new Float32Array(n));
  const input = array(L.sendElems, 'in');
  const output = array(op === 'broadcast' ? 0 : L.recvElems, 'out');
  const tri = (size * (size + 1)) / 2;
  const expectAt = (data: Float32Array, want: (i: number) => number): string | undefined => {
    for (let i = 0; i < data.length; i++) if (data[i] !== want(i)) return `element ${i} is ${data[i]}, expected ${want(i)}`;
    return undefined;
  };
  const base = { bytes: L.bytes, reset: () => input.forEach((_, i) => (input[i] = value(rank, i))) };
  const wait = { timeoutMs, hierarchical };
  switch (op) {
    case 'allreduce': {
      // Out of place, like MPI_Allreduce and gloo::allreduce in the harnesses.
      const o = { output, op: 'sum' as const, timeoutMs, hierarchical };
      return { ...base, impl: { await: 'ctx.allreduce(float32, sum, output)', sync: 'ctx.allreduceSync(float32, sum, output)' }, runAsync: () => ctx.allreduce(input, o), runSync: () => ctx.allreduceSync(input, o), check: () => expectAt(output, (i) => tri * ((i % 61) + 1)) };
    }
    case 'broadcast': {
      const o = { root: 0, timeoutMs, hierarchical };
      return {
        ...base,
        reset: () => input.forEach((_, i) => (input[i] = rank === 0 ? value(0, i) : -1)),
        impl: { await: 'ctx.broadcast(float32), root 0', sync: 'ctx.broadcastSync(float32), root 0' },
        runAsync: () => ctx.broadcast(input, o),
        runSync: () => ctx.broadcastSync(input, o),
        check: () => expectAt(input, (i) => value(0, i)),
      };
    }
    case 'allgather':
      return { ...base, impl: { await: 'ctx.allgather(float32)', sync: 'ctx.allgatherSync(float32)' }, runAsync: () => ctx.allgather(input, output, wait), runSync: () => ctx.allgatherSync(input, output, wait), check: () => expectAt(output, (i) => value(Math.floor(i / L.sendElems), i % L.sendElems)) };
    case 'reduce_scatter': {
      const o = { op: 'sum' as const, timeoutMs, hierarchical };
      return { ...base, impl: { await: 'ctx.reduceScatter(float32, sum)', sync: 'ctx.reduceScatterSync(float32, sum)' }, runAsync: () => ctx.reduceScatter(input, output, o), runSync: () => ctx.reduceScatterSync(input, output, o), check: () => expectAt(output, (i) => tri * (((rank * L.recvElems + i) % 61) + 1)) };
    }
    case 'barrier':
      return { ...base, impl: { await: 'ctx.barrier()', sync: 'ctx.barrierSync()' }, runAsync: () => ctx.barrier(wait), runSync: () => ctx.barrierSync(wait), check: () => undefined };
  }
}

/** Per-iteration microseconds on this rank. */
async function timeIterations(ctx: ProcessGroup, c: Case, variant: Variant, iters: number, warmup: number, timeoutMs: number): Promise<Float64Array> {
  const wait = { timeoutMs };
  const us = new Float64Array(iters);
  if (variant === 'sync') {
    for (let i = 0; i < warmup; i++) c.runSync();
    for (let i = 0; i < iters; i++) {
      ctx.barrierSync(wait);
      const t0 = performance.now();
      c.runSync();
      us[i] = (performance.now() - t0) * 1e3;
    }
  } else {
    for (let i = 0; i < warmup; i++) await c.runAsync();
    for (let i = 0; i < iters; i++) {
      ctx.barrierSync(wait);
      const t0 = performance.now();
      await c.runAsync();
      us[i] = (performance.now() - t0) * 1e3;
    }
  }
  return us;
}

/** Microseconds to the nanosecond, as the harnesses print them (%.3f). */
function round3(us: number): number {
  return Math.round(us * 1e3) / 1e3;
}

/** nearest-rank p90, as the harnesses compute it: sorted[ceil(0.9 n) - 1]. */
function p90(sorted: number[]): number {
  return sorted[Math.ceil(0.9 * sorted.length) - 1];
}

async function main(): Promise<void> {
  const plan = JSON.parse(process.argv[2] ?? '') as RankPlan;
  const ctx = await init({ timeoutMs: 60_000 });
  const { rank, size } = ctx;
  const buffers = plan.buffers ?? 'alloc';
  try {
    for (const op of plan.ops) {
      for (const requested of op === 'barrier' ? [0] : plan.sizes) {
        const c = makeCase(ctx, op, requested, plan.timeoutMs, buffers, plan.hierarchical !== false);
        const { iters, warmup: w } = iterationsFor(c.bytes, plan.iters, plan.warmup, plan.byteBudget);
        // JavaScript runs interpreted until V8 has seen a call path often enough to compile it,
        // and five calls are not enough: small sizes warm up longer than the C harnesses need
        // to (within the byte budget; warmup is never timed).
        const warmup = Math.max(w, Math.min(JIT_WARMUP, plan.byteBudget > 0 ? Math.floor(plan.byteBudget / Math.max(1, c.bytes)) : JIT_WARMUP));
        c.reset();
        ctx.barrierSync({ timeoutMs: plan.timeoutMs });
        await c.runAsync();
        const wrong = c.check();
        if (wrong) throw new Error(`rank ${rank}: ${op} of ${c.bytes} bytes at np=${size} over ${plan.provider} is wrong: ${wrong}`);
        for (const variant of plan.variants) {
          const mine = await timeIterations(ctx, c, variant, iters, warmup, plan.timeoutMs);
          const maxed = await ctx.allreduce(mine, { op: 'max', output: new Float64Array(iters), timeoutMs: plan.timeoutMs });
          // The max must cover this rank's own times: a cheap check of weft's float64 max.
          const low = mine.findIndex((t, i) => maxed[i] < t);
          if (low >= 0) throw new Error(`rank ${rank}: allreduce(max) of ${iters} float64 timings returned ${maxed[low]} < own ${mine[low]} at ${low}`);
          if (rank !== 0) continue;
          const sorted = Array.from(maxed).sort((a, b) => a - b);
          const row: CollectiveRow = { system: VARIANT_SYSTEM[variant], op, np: size, provider: plan.provider, bytes: c.bytes, iters, median_us: round3(median(sorted)), min_us: round3(sorted[0]), p90_us: round3(p90(sorted)), impl: c.impl[variant] + (buffers === 'alloc' ? ', arrays from ctx.alloc' : ', arrays in the JS heap') };
          process.stdout.write(ROW_PREFIX + JSON.stringify(row) + '\n');
        }
      }
    }
  } finally {
    await ctx.close();
  }
}

await main();
