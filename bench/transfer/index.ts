/**
 * `weft bench transfer`: the transfer engine's batched one-sided READ / WRITE, shaped like
 * Mooncake's transfer_engine_bench and nixlbench (an initiator and a target rank, --op,
 * block sizes, batch size, batches in flight, duration), against its ceiling measured in the
 * same invocation: the NIC layer's own streaming of the same block size on one queue pair.
 * Each trial of each (system, provider, op) runs in fresh processes (as better-sqlite3's
 * benchmark does); trials alternate between the systems; medians are reported.
 *
 * Usage: weft bench transfer [--provider shm,ofi:tcp] [--op read,write] [--block 4K,64K,1M,16M]
 *        [--batch 64] [--inflight 4] [--seconds 1] [--runs 3] [--wait async,sync] [--json] [--quick]
 */
import { PassThrough } from 'node:stream';
import { createInterface } from 'node:readline';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command, InvalidArgumentError, Option } from 'commander';
import { launch } from '../../src/launch/run.js';
import { native } from '../../src/native/binding.js';
import { runScenario } from '../../harness/local-group.js';
import { applyQuick, integerAtLeast, runIfMain } from '../lib/command.js';
import { saveResults, type BenchRecord } from '../lib/stats.js';
import { POINT_PREFIX, type TrialPlan, type TrialPoint } from './plan.js';
import { summarize, transferReport, type TransferRow } from './report.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const ENGINE_RANK = path.join(here, 'engine-rank.js');
const NIC_WORKER = path.join(here, 'nic-worker.js');

export interface TransferBenchOptions {
  providers: string[];
  ops: ('read' | 'write')[];
  blocks: number[];
  batch: number;
  inflight: number;
  seconds: number;
  runs: number;
  /** weft's waits to measure: 'async' (await waitBatch), 'sync' (waitBatchSync, busy-polling like the NIC stream). */
  waits: ('async' | 'sync')[];
  sliceBytes: number | undefined;
  json: boolean;
  quick?: boolean;
}

/** '4K', '64KiB', '1M', '16MiB', '4096' -> bytes. */
export function parseBlock(v: string): number {
  const m = /^(\d+)\s*(k|kib|m|mib|g|gib)?$/i.exec(v.trim());
  if (!m) throw new InvalidArgumentError(`'${v}' is not a size (4096, 4K, 64KiB, 1M, 16MiB)`);
  const unit = (m[2] ?? '').toLowerCase();
  const n = Number(m[1]) * (unit.startsWith('k') ? 1024 : unit.startsWith('m') ? 1 << 20 : unit.startsWith('g') ? 1 << 30 : 1);
  if (n < 1 || n > 256 << 20) throw new InvalidArgumentError(`block ${v} is outside [1 B, 256 MiB]`);
  return n;
}

/** One engine trial: a 2-rank job under launch(); rank 0's points. */
async function engineTrial(provider: string, plan: TrialPlan): Promise<TrialPoint[]> {
  const out = new PassThrough();
  const err = new PassThrough();
  const points: TrialPoint[] = [];
  let tail = '';
  err.on('data', (d: Buffer) => (tail = (tail + d.toString()).slice(-3000)));
  const lines = createInterface({ input: out });
  lines.on('line', (line) => {
    const at = line.indexOf(POINT_PREFIX);
    if (at >= 0) points.push(JSON.parse(line.slice(at + POINT_PREFIX.length)) as TrialPoint);
    else tail = (tail + line + '\n').slice(-3000);
  });
  const closed = new Promise<void>((r) => lines.once('close', r));
  const code = await launch({ ranks: 2, script: ENGINE_RANK, args: [JSON.stringify(plan)], provider, out, err, color: false });
  out.end();
  err.end();
  await closed;
  if (code !== 0) throw new Error(`weft transfer ${plan.op} over ${provider} failed (exit ${code}):\n${tail.trim()}`);
  return points;
}

async function nicTrial(provider: string, plan: TrialPlan): Promise<TrialPoint[]> {
  const r = await runScenario('stream', { n: 2, provider, worker: NIC_WORKER, args: plan as unknown as Record<string, unknown>, timeoutMs: 600_000 });
  return r.results[0] as TrialPoint[];
}

/** Runs every trial; returns the per-trial points as rows. */
export async function runTransferBench(o: TransferBenchOptions, onRow: (r: TransferRow) => void): Promise<TransferRow[]> {
  const rows: TransferRow[] = [];
  for (let run = 0; run < o.runs; run++) {
    for (const provider of o.providers) {
      for (const op of o.ops) {
        // Rotate which goes first, so that a machine getting slower favours none.
        const kinds: ('nic' | 'async' | 'sync')[] = ['nic', ...o.waits];
        const order = kinds.map((_, k) => kinds[(k + run) % kinds.length]);
        for (const kind of order) {
          const system = kind === 'nic' ? 'nic' : 'weft';
          const wait = kind === 'nic' ? 'sync' : kind;
          const plan: TrialPlan = { op, blocks: o.blocks, batch: o.batch, inflight: o.inflight, seconds: o.seconds, wait, sliceBytes: o.sliceBytes };
          const label = provider === 'ofi' ? 'ofi:tcp' : provider;
          process.stderr.write(`  run ${run + 1}/${o.runs} ${system}${system === 'weft' ? ` (${wait})` : ''} ${label} ${op}...`);
          const t = performance.now();
          const points = system === 'nic' ? await nicTrial(provider, plan) : await engineTrial(provider, plan);
          process.stderr.write(` ${((performance.now() - t) / 1000).toFixed(1)} s\n`);
          for (const p of points) {
            const row: TransferRow = { bench: 'transfer', system, provider: label, op, batch: o.batch, inflight: o.inflight, wait, run, ...p };
            rows.push(row);
            onRow(row);
          }
        }
      }
    }
  }
  return rows;
}

export function defaultProviders(): string[] {
  return native.ofi.available ? ['shm', 'ofi:tcp'] : ['shm'];
}

/** Runs the benchmark, prints the table (or JSON lines), writes JSON and SVG. */
export async function benchTransfer(o: TransferBenchOptions): Promise<TransferRow[]> {
  const rows = await runTransferBench(o, () => {});
  const summary = summarize(rows);
  if (o.json) for (const s of summary) console.log(JSON.stringify(s));
  else console.log(transferReport(summary, o));
  const file = saveResults('transfer', summary as unknown as BenchRecord[], { date: new Date().toISOString(), node: process.version, options: o, trials: rows });
  process.stderr.write(`results: ${file}\n`);
  try {
    const { plotTransfer } = await import('./plot.js');
    process.stderr.write(`plot: ${await plotTransfer(summary, file.replace(/\.json$/, '.svg'))}\n`);
  } catch (err) {
    process.stderr.write(`plot skipped (${(err as Error).message.split('\n')[0]}); it needs the dev dependencies vega and vega-lite\n`);
  }
  return rows;
}

/** `weft bench transfer`. */
export function transferCommand(): Command {
  const cmd = new Command('transfer')
    .description("transfer engine READ/WRITE throughput and batch latency per block size, vs the NIC layer's own streaming (the ceiling)")
    .option('--provider <list>', 'comma-separated providers (default: shm, and ofi:tcp when built)')
    .addOption(new Option('--op <list>', 'read, write or both').default('read,write'))
    .option('--block <list>', 'block sizes (4K, 64K, 1M, 16M, ...)', '4K,64K,1M,16M')
    .option('--batch <n>', 'requests per batch', integerAtLeast(1), 64)
    .option('--inflight <n>', 'batches in flight', integerAtLeast(1), 4)
    .option('--seconds <s>', 'seconds measured per block size', (v: string) => Number(v), 1)
    .option('--runs <n>', 'trials (each in fresh processes); medians are reported', integerAtLeast(1), 3)
    .option('--wait <list>', "weft's waits: async (await waitBatch), sync (waitBatchSync, busy-polling as the NIC stream does), or both", 'async,sync')
    .option('--slice <bytes>', "the engine's slice size (default: the engine's, 64 KiB, 1 MiB over libfabric tcp)", (v: string) => parseBlock(v))
    .option('--json', 'print one JSON object per line')
    .option('--quick', 'smaller runs (smoke test): 1 run, 0.2 s per point, blocks 4K and 64K, async only');
  return cmd.action(async (raw: { provider?: string; op: string; block: string; batch: number; inflight: number; seconds: number; runs: number; wait: string; slice?: number; json?: boolean; quick?: boolean }) => {
    applyQuick(raw, cmd, { runs: 1, seconds: 0.2, block: '4K,64K', wait: 'async' });
    const waits = raw.wait.split(',').map((s) => s.trim());
    for (const w of waits) if (w !== 'async' && w !== 'sync') throw new InvalidArgumentError(`--wait: '${w}' is not async or sync`);
    const ops = raw.op.split(',').map((s) => s.trim());
    for (const op of ops) if (op !== 'read' && op !== 'write') throw new InvalidArgumentError(`--op: '${op}' is not read or write`);
    if (!(raw.seconds > 0 && raw.seconds <= 600)) throw new InvalidArgumentError(`--seconds must be in (0, 600], got ${raw.seconds}`);
    await benchTransfer({
      providers: raw.provider ? raw.provider.split(',') : defaultProviders(),
      ops: ops as ('read' | 'write')[],
      blocks: raw.block.split(',').map(parseBlock),
      batch: raw.batch,
      inflight: raw.inflight,
      seconds: raw.seconds,
      runs: raw.runs,
      waits: waits as ('async' | 'sync')[],
      sliceBytes: raw.slice,
      json: !!raw.json,
      quick: raw.quick,
    });
  });
}

runIfMain(import.meta.url, transferCommand);
