/**
 * `weft bench reduce`: float32 sum done in place (acc = acc + x, an allreduce step) at 4 KiB,
 * 64 KiB, 1 MiB and 16 MiB, through the native kernels at every SIMD level this CPU runs (one
 * child process per WEFT_REDUCE_ISA, since the level is fixed at load), reduceMany over 4
 * sources, a plain JS loop, and single-thread memcpy as the memory-bandwidth yardstick. The
 * "kernel only" rows time the same kernel inside the addon (reduceKernelSeconds), without the
 * N-API call, which is what dominates at 4 KiB.
 *
 * GB/s counts bytes read plus bytes written (a pairwise sum touches 12 B per element,
 * reduceMany over k sources (k + 1) x 4 B, memcpy 8 B), so every row is comparable with what
 * the memory system can move. Timing by tinybench; a sample is a batch of calls sized to a few
 * tens of microseconds, so the timer's own cost stays out of the 4 KiB numbers; the median
 * sample is reported.
 *
 * Usage: node dist/bench/reduce/index.js [--time <ms per task>] [--json] [--quick]
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { Command, Option } from 'commander';
import { positiveInt } from '../../src/cli/arguments.js';
import { runIfMain } from '../lib/command.js';
import { Bench } from 'tinybench';
import { native } from '../../src/native/binding.js';
import { reduceInto, reduceIsa, reduceMany, supportedReduceIsas } from '../../src/reduce/index.js';
import { formatBytes, median, saveResults, table, type BenchRecord } from '../lib/stats.js';

const SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20];
const MANY_SOURCES = 4;
const SELF = fileURLToPath(import.meta.url);

export interface ReduceBenchOptions {
  /** tinybench time budget per task, ms. */
  timeMs: number;
  json: boolean;
  quick: boolean;
}

function randomFloats(bytes: number): Float32Array {
  // Real data: fresh zero pages would all map the same physical page and flatter the reads.
  const out = new Float32Array(bytes / 4);
  for (let i = 0; i < out.length; i++) out[i] = Math.random() - 0.5;
  return out;
}

/** Calls per sample: about 256 KiB of data, so 4 KiB samples last ~10 us, big ones one call. */
function batch(bytes: number): number {
  return Math.max(1, Math.floor((256 << 10) / bytes));
}

/** Median seconds per call of fn (which makes `reps` calls). */
async function secondsPerCall(name: string, fn: () => void, reps: number, timeMs: number): Promise<{ seconds: number; rme: number; samples: number }> {
  const bench = new Bench({ name, time: timeMs, warmupTime: Math.min(100, timeMs / 4), iterations: 5 });
  bench.add(name, fn);
  await bench.run();
  const r = bench.tasks[0].result;
  if (r.state !== 'completed') throw new Error(`${name}: ${r.state === 'errored' ? r.error.message : r.state}`);
  return { seconds: r.latency.p50 / 1000 / reps, rme: r.latency.rme, samples: r.latency.samplesCount };
}

function records(provider: string, bytes: number, elements: number, traffic: number, m: { seconds: number; rme: number; samples: number }): BenchRecord[] {
  const base = { bench: 'reduce', provider, bytes, dtype: 'float32', op: 'sum', rme: m.rme, samples: m.samples };
  const gelems = elements / m.seconds / 1e9;
  const gbps = traffic / m.seconds / 1e9;
  return [
    { ...base, metric: 'gelems', median: gelems, unit: 'G elem/s', runs: [gelems] },
    { ...base, metric: 'gbps', median: gbps, unit: 'GB/s', runs: [gbps] },
  ];
}

/** The kernel alone, timed inside the addon: what the level itself buys, minus the call. */
function measureKernel(quick: boolean): BenchRecord[] {
  const isa = reduceIsa();
  const out: BenchRecord[] = [];
  for (const bytes of SIZES) {
    const n = bytes / 4;
    const iters = Math.max(4, Math.round(((quick ? 64 : 256) << 20) / bytes));
    const runs: number[] = [];
    for (let r = 0; r < 5; r++) runs.push(native.reduceKernelSeconds(0, 0, n, iters) / iters);
    out.push(...records(`kernel:${isa}`, bytes, n, 3 * bytes, { seconds: median(runs), rme: NaN, samples: runs.length }));
  }
  return out;
}

/** The native rows of the level this process loaded. */
async function measureNative(timeMs: number): Promise<BenchRecord[]> {
  const isa = reduceIsa();
  const out: BenchRecord[] = [];
  // The fixed cost of one call (argument checks, N-API crossing), which dominates at 4 KiB.
  const empty = new Float32Array(16);
  const calls = 1000;
  const idle = await secondsPerCall(`overhead ${isa}`, () => {
    for (let i = 0; i < calls; i++) reduceInto('sum', 'float32', 0, empty, empty, empty);
  }, calls, timeMs);
  const ns = idle.seconds * 1e9;
  out.push({ bench: 'reduce', provider: `native:${isa}`, bytes: 0, metric: 'call_ns', median: ns, unit: 'ns', runs: [ns], rme: idle.rme, samples: idle.samples });
  for (const bytes of SIZES) {
    const n = bytes / 4;
    const reps = batch(bytes);
    const acc = randomFloats(bytes);
    const x = randomFloats(bytes);
    const pair = await secondsPerCall(`native ${isa}`, () => {
      for (let i = 0; i < reps; i++) reduceInto('sum', 'float32', n, acc, acc, x);
    }, reps, timeMs);
    out.push(...records(`native:${isa}`, bytes, n, 3 * bytes, pair));
    const srcs = [acc, x, ...Array.from({ length: MANY_SOURCES - 2 }, () => randomFloats(bytes))];
    const manyReps = Math.max(1, Math.floor(reps / MANY_SOURCES));
    const many = await secondsPerCall(`reduceMany ${isa}`, () => {
      for (let i = 0; i < manyReps; i++) reduceMany('sum', 'float32', n, acc, srcs);
    }, manyReps, timeMs);
    out.push(...records(`native:${isa}:many${MANY_SOURCES}`, bytes, (MANY_SOURCES - 1) * n, (MANY_SOURCES + 1) * bytes, many));
  }
  return out;
}

async function measureJs(timeMs: number): Promise<BenchRecord[]> {
  const out: BenchRecord[] = [];
  for (const bytes of SIZES) {
    const n = bytes / 4;
    const reps = batch(bytes);
    const acc = randomFloats(bytes);
    const x = randomFloats(bytes);
    const m = await secondsPerCall('js loop', () => {
      for (let r = 0; r < reps; r++) for (let i = 0; i < n; i++) acc[i] += x[i];
    }, reps, timeMs);
    out.push(...records('js-loop', bytes, n, 3 * bytes, m));
  }
  return out;
}

function measureMemcpy(quick: boolean): BenchRecord[] {
  const out: BenchRecord[] = [];
  for (const bytes of SIZES) {
    const iters = Math.max(4, Math.round(((quick ? 64 : 512) << 20) / bytes));
    const runs: number[] = [];
    for (let r = 0; r < 5; r++) runs.push(native.memcpyBandwidth(bytes, iters) / iters);
    out.push(...records('memcpy', bytes, bytes / 4, 2 * bytes, { seconds: median(runs), rme: NaN, samples: runs.length }));
  }
  return out;
}

function runChild(isa: string, timeMs: number, quick: boolean): Promise<BenchRecord[]> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [SELF, '--child', '--time', String(timeMs), ...(quick ? ['--quick'] : [])], {
      env: { ...process.env, WEFT_REDUCE_ISA: isa },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.on('error', reject);
    child.on('exit', (code) => {
      if (code !== 0) return reject(new Error(`bench child for ${isa} exited with ${code}`));
      resolve(out.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as BenchRecord));
    });
  });
}

export function reduceReport(recs: BenchRecord[]): string {
  const providers = [...new Set(recs.map((r) => r.provider))];
  const cell = (provider: string, bytes: number, metric: string) => {
    const r = recs.find((x) => x.provider === provider && x.bytes === bytes && x.metric === metric);
    return r ? r.median.toFixed(r.median >= 10 ? 1 : 2) : '';
  };
  const label = (p: string) =>
    p
      .replace(/^native:(\w+):many(\d+)$/, 'reduceMany $2 srcs, $1')
      .replace(/^native:/, 'reduceInto ')
      .replace(/^kernel:(\w+)$/, 'kernel only, $1');
  const header = ['float32 sum', ...SIZES.map(formatBytes)];
  return [
    'G elements/s (elements combined per second)',
    table(header, providers.map((p) => [label(p), ...SIZES.map((b) => cell(p, b, 'gelems'))])),
    '',
    'GB/s (bytes read + written per second)',
    table(header, providers.map((p) => [label(p), ...SIZES.map((b) => cell(p, b, 'gbps'))])),
    '',
    `cost of one reduceInto call with count 0: ${recs
      .filter((r) => r.metric === 'call_ns')
      .map((r) => `${r.provider.replace(/^native:/, '')} ${r.median.toFixed(0)} ns`)
      .join(', ')}`,
  ].join('\n');
}

export async function benchReduce(opts: ReduceBenchOptions): Promise<BenchRecord[]> {
  const timeMs = opts.quick ? Math.min(opts.timeMs, 100) : opts.timeMs;
  const all: BenchRecord[] = [];
  const emit = (rs: BenchRecord[]) => {
    all.push(...rs);
    if (opts.json) for (const r of rs) console.log(JSON.stringify(r));
  };
  // Levels one after another: two cores, and each run should have the memory bus to itself.
  for (const isa of supportedReduceIsas()) emit(await runChild(isa, timeMs, opts.quick));
  emit(await measureJs(timeMs));
  emit(measureMemcpy(opts.quick));
  const file = saveResults('reduce', all, { date: new Date().toISOString(), node: process.version, timeMs, isas: supportedReduceIsas() });
  if (!opts.json) {
    console.log(reduceReport(all));
    console.log(`\nraw: ${path.relative(process.cwd(), file)}`);
  }
  return all;
}

/** `weft bench reduce` (and, with --child, one measuring process of it). */
export function reduceCommand(): Command {
  return new Command('reduce')
    .description('float32 sum per SIMD level (and reduceMany over 4 sources) vs a JS loop and memcpy, 4 KiB to 16 MiB')
    .option('--time <ms>', 'tinybench time budget per task', positiveInt, 400)
    .option('--json', 'print one JSON object per line')
    .option('--quick', 'short runs (smoke test)')
    .addOption(new Option('--child', 'measure the native level this process loaded, print JSON lines').hideHelp())
    .action(async (o: { time: number; json?: boolean; quick?: boolean; child?: boolean }) => {
      if (o.child) {
        for (const r of [...measureKernel(!!o.quick), ...(await measureNative(o.time))]) console.log(JSON.stringify(r));
        return;
      }
      await benchReduce({ timeMs: o.time, json: !!o.json, quick: !!o.quick });
    });
}

runIfMain(import.meta.url, reduceCommand);
