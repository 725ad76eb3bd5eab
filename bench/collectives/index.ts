/**
 * `weft bench collectives`: an nccl-tests style sweep (8 B to 64 MiB by default) of allreduce,
 * broadcast, allgather, reduce_scatter and barrier on weft, at each np and provider, with
 * Gloo and Open MPI running the same sweep in the same invocation when they are installed
 * (bench/peers/). Time is the median over iterations of the max over ranks; algbw and busbw as
 * nccl-tests define them (metrics.ts). Prints a table per (op, np, provider) with weft/peer
 * ratios per size and the issue's targets, or JSON lines (--json); writes the rows to
 * bench/results/collectives-<date>.json and SVG plots of allreduce busbw and latency.
 *
 * Usage: node dist/bench/collectives/index.js [--np 2,4] [--ops allreduce,...] [--sizes 8..32M:4,64M]
 *          [--providers shm,ofi] [--peers gloo,mpi-sm,mpi-tcp|none] [--runs 3] [--json] [--out f] [--plot dir]
 */
import { spawnSync } from 'node:child_process';
import { writeFileSync, mkdirSync } from 'node:fs';
import { loadavg, cpus } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command, InvalidArgumentError, Option } from 'commander';
import { native, packageRoot } from '../../src/native/binding.js';
import { resultsDir } from '../lib/stats.js';
import { applyQuick, runIfMain } from '../lib/command.js';
import { PEER_SYSTEMS, detect, runPeers, type PeerSystem } from '../peers/index.js';
import { aggregate, type AggregatedRow } from './aggregate.js';
import { measureFloor } from './floor.js';
import { COLLECTIVE_OPS, isCollectiveOp, parseSize, parseSizes, type CollectiveOp, type CollectiveResult } from './metrics.js';
import type { Variant } from './plan.js';
import { checkTargets, collectivesTables, formatSize, formatUs, targetsText } from './report.js';
import { providerLabel, runWeft } from './weft.js';

export interface CollectivesBenchOptions {
  nps: number[];
  ops: CollectiveOp[];
  /** Requested sizes in bytes (see caseLayout for what each op reports). */
  sizes: number[];
  /** weft providers: 'shm', 'ofi', 'ofi:tcp', ... */
  providers: string[];
  peers: PeerSystem[];
  variants: Variant[];
  iters: number;
  warmup: number;
  byteBudget: number;
  /** Repeats of the whole sweep; rows report the median of the runs' medians. */
  runs: number;
  json: boolean;
  /** Results file (default bench/results/collectives-<date>.json). */
  out?: string;
  /** Directory for the SVG plots (default: the results file without .json); false: none. */
  plot?: string | false;
  /** Per peer run, ms. */
  timeoutMs: number;
  /** weft's arrays: from ctx.alloc (default) or the JS heap. */
  buffers?: 'alloc' | 'heap';
}

export interface CollectivesBenchResult {
  rows: AggregatedRow[];
  /** Every run's rows, before aggregation. */
  raw: CollectiveResult[];
  failures: string[];
  file: string;
}

/** The peers that match the providers: Gloo and Open MPI sm for shm, Open MPI tcp for a fabric. */
export function defaultPeers(providers: string[]): PeerSystem[] {
  const out: PeerSystem[] = [];
  if (providers.includes('shm')) out.push('gloo', 'mpi-sm');
  if (providers.some((p) => p.startsWith('ofi'))) out.push('mpi-tcp');
  return out;
}

export function defaultProviders(): string[] {
  return native.ofi.available ? ['shm', 'ofi'] : ['shm'];
}

function progress(r: CollectiveResult): void {
  process.stderr.write(`  ${r.system} ${r.provider} np=${r.np} ${r.op}${r.op === 'barrier' ? '' : ` ${formatSize(r.bytes)}`}: ${formatUs(r.median_us)}\n`);
}

/** Runs the sweep `runs` times (floor, weft per provider and np, then the peers) and aggregates. */
export async function runCollectivesBench(o: CollectivesBenchOptions): Promise<Omit<CollectivesBenchResult, 'file'>> {
  const raw: CollectiveResult[] = [];
  const failures: string[] = [];
  const providers = o.providers.filter((p) => {
    if (p === 'shm' || native.ofi.available) return true;
    failures.push(`weft ${p}: skipped: ${native.ofi.reason ?? 'weft was built without libfabric'}`);
    return false;
  });
  for (let run = 1; run <= o.runs; run++) {
    if (o.runs > 1) process.stderr.write(`run ${run} of ${o.runs}\n`);
    if (o.ops.includes('allreduce') && o.nps.includes(2)) {
      for (const r of measureFloor(o.sizes)) {
        raw.push(r);
        progress(r);
      }
    }
    for (const provider of providers) {
      for (const np of o.nps) {
        try {
          raw.push(...(await runWeft({ np, provider, ops: o.ops, sizes: o.sizes, iters: o.iters, warmup: o.warmup, byteBudget: o.byteBudget, variants: o.variants, buffers: o.buffers }, progress)));
        } catch (err) {
          const msg = `weft ${providerLabel(provider)} np=${np} (run ${run}): ${(err as Error).message}`;
          failures.push(msg);
          process.stderr.write(`  ${msg}\n`);
        }
      }
    }
    if (o.peers.length) {
      raw.push(...(await runPeers(o.peers, o.nps, { ops: o.ops, sizes: o.sizes, iters: o.iters, warmup: o.warmup, byteBudget: o.byteBudget, timeoutMs: o.timeoutMs }, progress)));
    }
  }
  return { rows: aggregate(raw), raw, failures };
}

/** The commit measured, and whether src/ or native/ differed from it (a shared working tree). */
function sourceVersion(): { commit?: string; dirty?: boolean } {
  const git = (args: string[]) => spawnSync('git', args, { cwd: packageRoot, encoding: 'utf8', timeout: 5000 });
  const head = git(['rev-parse', '--short', 'HEAD']);
  if (head.status !== 0) return {};
  const status = git(['status', '--porcelain', '--', 'src', 'native']);
  return { commit: head.stdout.trim(), dirty: status.stdout.trim().length > 0 };
}

function defaultOut(): string {
  return path.join(resultsDir(), `collectives-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
}

/** Runs, prints (tables and targets, or JSON lines), writes the results file and the plots. */
export async function benchCollectives(o: CollectivesBenchOptions): Promise<CollectivesBenchResult> {
  const started = new Date();
  const loadBefore = loadavg();
  const source = sourceVersion();
  const { rows, raw, failures } = await runCollectivesBench(o);
  const file = path.resolve(o.out ?? defaultOut());
  const avail = detect();
  const meta = {
    date: started.toISOString(),
    seconds: (Date.now() - started.getTime()) / 1000,
    node: process.version,
    cpus: cpus().length,
    cpu: cpus()[0]?.model,
    // Other tenants' load moves small-size latencies by 10-100x on a 2-core host: keep it with the numbers.
    loadavg_before: loadBefore,
    loadavg_after: loadavg(),
    source,
    reduce_isa: native.reduceIsa(),
    peers: { gloo: avail.gloo.version ?? avail.gloo.reason, openmpi: avail.mpi.version ?? avail.mpi.reason },
    options: { ...o, plot: undefined, out: undefined },
    failures,
  };
  const targets = checkTargets(rows);
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, JSON.stringify({ meta, rows, targets, raw }, null, 2));
  if (o.json) for (const r of rows) console.log(JSON.stringify(r));
  else {
    const load = (l: number[]) => l.map((x) => x.toFixed(1)).join(' ');
    console.log(`${meta.date}, ${meta.cpus} cores, commit ${meta.source.commit ?? '?'}${meta.source.dirty ? ' (src/ modified)' : ''}, load average ${load(loadBefore)} before, ${load(meta.loadavg_after)} after, ${o.runs} run(s)\n`);
    console.log(`${collectivesTables(rows)}\n\n${targetsText(targets)}`);
  }
  for (const f of failures) process.stderr.write(`failed: ${f}\n`);
  process.stderr.write(`results: ${file}\n`);
  if (o.plot !== false && rows.some((r) => r.op === 'allreduce')) {
    try {
      const { plotCollectives } = await import('./plot.js');
      const files = await plotCollectives(rows, o.plot ?? file.replace(/\.json$/, ''), `${started.toISOString().slice(0, 10)}, ${cpus().length} cores`);
      process.stderr.write(`plots: ${files.join(', ')}\n`);
    } catch (err) {
      process.stderr.write(`plots skipped (${(err as Error).message.split('\n')[0]}); they need the dev dependencies vega and vega-lite\n`);
    }
  }
  return { rows, raw, failures, file };
}

function list(v: string): string[] {
  return v.split(',').map((s) => s.trim()).filter(Boolean);
}

function positiveInt(v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('must be a positive integer');
  return n;
}

function nonNegativeInt(v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError('must be a non-negative integer');
  return n;
}

/** "8..32M:4,64M": comma-separated sizes and sweeps, merged and sorted. */
export function parseSizeList(v: string): number[] {
  try {
    return [...new Set(list(v).flatMap((part) => parseSizes(part)))].sort((a, b) => a - b);
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message);
  }
}

function parseOps(v: string): CollectiveOp[] {
  const ops = list(v);
  const bad = ops.find((op) => !isCollectiveOp(op));
  if (bad) throw new InvalidArgumentError(`unknown op ${bad} (${COLLECTIVE_OPS.join(', ')})`);
  return ops as CollectiveOp[];
}

function parsePeers(v: string): PeerSystem[] {
  if (v.trim() === 'none') return [];
  const peers = list(v);
  const bad = peers.find((p) => !(PEER_SYSTEMS as readonly string[]).includes(p));
  if (bad) throw new InvalidArgumentError(`unknown peer ${bad} (${PEER_SYSTEMS.join(', ')}, or none)`);
  return peers as PeerSystem[];
}

function parseVariants(v: string): Variant[] {
  const vs = list(v);
  if (vs.length === 0 || vs.some((x) => x !== 'await' && x !== 'sync')) throw new InvalidArgumentError('variants are await and/or sync');
  return vs as Variant[];
}

/** 8 B to 32 MiB by x4, and 64 MiB: the sizes of the peers' numbers in docs/benchmarks.md. */
const DEFAULT_SIZES = '8..32M:4,64M';

type CollectivesOptions = { np: number[]; ops: CollectiveOp[]; sizes: number[]; providers?: string[]; peers?: PeerSystem[]; variants: Variant[]; iters: number; warmup: number; byteBudget: number; runs: number; json?: boolean; out?: string; plot: string | boolean; timeout: number; buffers: 'alloc' | 'heap'; hosts?: number };

/** `weft bench collectives`. */
export function collectivesCommand(): Command {
  return new Command('collectives')
    .description('nccl-tests style sweep of weft\'s collectives, with Gloo and Open MPI in the same run when installed')
    .addOption(new Option('--np <list>', 'comma-separated process counts').argParser((v) => list(v).map(positiveInt)).default([2, 4], '2,4'))
    .addOption(new Option('--ops <list>', 'comma-separated ops').argParser(parseOps).default([...COLLECTIVE_OPS], COLLECTIVE_OPS.join(',')))
    .addOption(new Option('--sizes <list>', 'sizes and sweeps: "8,1M,64MiB", "8..64M:4" (factor after the colon), or both').argParser(parseSizeList).default(parseSizeList(DEFAULT_SIZES), DEFAULT_SIZES))
    .option('--providers <list>', 'weft providers (shm, ofi, ofi:tcp, ...); default shm, and ofi when built with libfabric', list)
    .option('--peers <list>', `peers (${PEER_SYSTEMS.join(', ')}) or none; default: gloo and mpi-sm for shm, mpi-tcp for ofi`, parsePeers)
    .addOption(new Option('--variants <list>', "weft variants: await (Promise API, 'weft') and sync (blocking, 'weft-sync')").argParser(parseVariants).default(['await', 'sync'], 'await,sync'))
    .option('--iters <n>', 'timed iterations per size (capped by --byte-budget)', positiveInt, 200)
    .option('--warmup <n>', 'warmup iterations per size', nonNegativeInt, 5)
    .addOption(new Option('--byte-budget <bytes>', 'caps timed runs at max(3, budget / size) (0: no cap)').argParser((v) => (v.trim() === '0' ? 0 : parseSize(v))).default(256 << 20, '256M'))
    .option('--runs <k>', 'repeat the sweep k times; rows report the median of the medians', positiveInt, 1)
    .option('--json', 'print one JSON object per line (the aggregated rows)')
    .option('--out <file>', 'results file (default bench/results/collectives-<date>.json)')
    .option('--plot <dir>', 'directory for the SVG plots (default: next to the results file)')
    .option('--no-plot', 'no SVG plots')
    .option('--timeout <ms>', 'per peer run', positiveInt, 600_000)
    .option('--hosts <h>', 'spread the ranks over H emulated hosts (network namespaces; needs root): --np ranks in all, with Open MPI and Gloo over the same namespaces', positiveInt)
    .addOption(new Option('--buffers <kind>', "weft's arrays: alloc (ctx.alloc, registered; peers on one host read them in place) or heap (new Float32Array)").choices(['alloc', 'heap']).default('alloc'))
    .option('--quick', 'smoke test: 2 ranks, allreduce and broadcast, 8 B and 64 KiB, 20 iterations (options given explicitly win)')
    .action((o: CollectivesOptions & { quick?: boolean }, cmd: Command) => runCollectives(applyQuick(o, cmd, { np: [2], ops: ['allreduce', 'broadcast'], sizes: [8, 65536], iters: 20 })));
}

async function runCollectives(o: CollectivesOptions): Promise<void> {
  if (o.hosts !== undefined) {
    const np = o.np.length === 1 ? o.np[0] : 2 * o.hosts;
    if (np % o.hosts !== 0) throw new InvalidArgumentError(`--np ${np} does not spread evenly over --hosts ${o.hosts}`);
    const { benchCollectivesOnHosts } = await import('./hosts.js');
    const res = await benchCollectivesOnHosts({ hosts: o.hosts, perHost: np / o.hosts, ops: o.ops, sizes: o.sizes, iters: o.iters, warmup: o.warmup, byteBudget: o.byteBudget, variants: o.variants, runs: o.runs, json: !!o.json, out: o.out, plot: o.plot === false ? false : o.plot === true ? undefined : o.plot, timeoutMs: o.timeout, peers: o.peers });
    if (!res.rows.some((r) => r.system.startsWith('weft'))) process.exitCode = 1;
    return;
  }
  const providers = o.providers ?? defaultProviders();
  const res = await benchCollectives({
    nps: o.np,
    ops: o.ops,
    sizes: o.sizes,
    providers,
    peers: o.peers ?? defaultPeers(providers),
    variants: o.variants,
    iters: o.iters,
    warmup: o.warmup,
    byteBudget: o.byteBudget,
    runs: o.runs,
    json: !!o.json,
    out: o.out,
    plot: o.plot === false ? false : o.plot === true ? undefined : o.plot,
    timeoutMs: o.timeout,
    buffers: o.buffers,
  });
  if (!res.rows.some((r) => r.system.startsWith('weft')) || res.failures.some((f) => f.startsWith('weft') && !f.includes('skipped'))) process.exitCode = 1;
}

runIfMain(import.meta.url, collectivesCommand);
