/**
 * `weft bench ipc`: round trip and throughput of request/response messaging between one
 * server and 1, 2, 4 clients at queue depths 1..64, between worker threads of one process
 * (`threads`) and between processes (`processes`), for every system of bench/ipc/systems/ in
 * the same run: Node's own (postMessage, MessageChannel, node:net over a Unix socket), the
 * SharedArrayBuffer ring floor, and weft's.
 *
 * Each run of a point is a fresh set of workers/processes (bench/ipc/harness.ts); without
 * --calls, a short pilot run first sizes the calls per client to about --seconds of measured
 * time. The systems of a point take turns, run after run (order rotated each run), and the
 * report compares a system with the floor run by run: this machine's speed moves in phases of
 * seconds, and a ratio of medians measured minutes apart compared two phases, not two systems.
 * A point reports the median over runs of throughput (all clients' measured calls over
 * the slowest client's time) and rtt_us (median client time over calls/qd: the mean time a
 * call is in flight, the round trip at qd 1). Points whose busy threads (server + clients)
 * exceed os.availableParallelism() are marked oversubscribed (`*`).
 *
 * Usage: node dist/bench/ipc/index.js [--systems postMessage,floor] [--placements threads,processes]
 *          [--clients 1,2,4] [--qd 1,4,16,64] [--bytes 32] [--runs 3] [--calls n] [--json] [--quick]
 */
import { availableParallelism } from 'node:os';
import path from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import { positiveInt } from '../../src/cli/arguments.js';
import { renderSvg, throughputByQd } from '../lib/svg.js';
import { applyQuick, runIfMain } from '../lib/command.js';
import { formatNumber, median, saveResults, table, type BenchRecord } from '../lib/stats.js';
import { livePeers, runPoint, sweepBenchSegments } from './harness.js';
import { ALL_SYSTEMS, SYSTEMS, loadSystem } from './systems/index.js';
import type { IpcSystem, Placement, PointConfig } from './system.js';

export { livePeers };

export interface IpcBenchOptions {
  systems: string[];
  placements: Placement[];
  clients: number[];
  qd: number[];
  bytes: number[];
  runs: number;
  /** Measured calls per client; without it a pilot run sizes them to `seconds`. */
  calls?: number;
  seconds: number;
  timeoutMs: number;
  json: boolean;
  quick: boolean;
  /** Progress and skip lines (default: stderr). */
  log?: (line: string) => void;
  /** Systems outside the registry: name -> module URL (tests). */
  modules?: Record<string, string>;
}

export interface IpcRecord extends BenchRecord {
  system: string;
  placement: Placement;
  clients: number;
  qd: number;
  calls: number;
  calls_per_s: number;
  rtt_us: number;
  oversubscribed: boolean;
  busy_threads: number;
  rtt_runs: number[];
}

/** Server + clients, all of which may spin. */
function busyThreads(clients: number): number {
  return 1 + clients;
}

/** Warmup: a quarter of the measured calls (at least 100, or all of them when fewer). */
function config(p: { clients: number; qd: number; bytes: number }, calls: number): PointConfig {
  return { ...p, calls, warmup: Math.max(Math.min(calls, 100), Math.round(calls / 4)) };
}

/** Calls per client of the first pilot run that sizes a point. */
function pilotCalls(qd: number): number {
  return 1000 + 100 * qd;
}

/** A pilot run measuring less than this is repeated with more calls. */
const PILOT_MS = 20;

/** Calls per client for `seconds` of measured time at the rate of `calls` in `ms`. */
function sized(calls: number, ms: number, seconds: number): number {
  return Math.min(50_000_000, Math.max(1000, Math.round(((calls / ms) * 1000 * seconds) / 100) * 100));
}

/** One system at one point: its pilot-sized calls, its runs so far. */
interface Contender {
  name: string;
  module?: string;
  system: IpcSystem;
  label: string;
  calls?: number;
  cfg?: PointConfig;
  runs: number[][];
  resized: number;
  failed: boolean;
}

/**
 * Every point (placement x clients x qd x bytes) runs all systems in turn, run after run,
 * the order rotated each run: on a shared machine whose speed moves in phases of seconds, a
 * system's runs sit beside its peers' runs, so the per-run ratios compare like with like.
 */
export async function runIpcBench(o: IpcBenchOptions): Promise<{ records: IpcRecord[]; skipped: string[] }> {
  const log = o.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const cores = availableParallelism();
  const records: IpcRecord[] = [];
  const skipped: string[] = [];
  const skip = (line: string) => {
    skipped.push(line);
    log(`  ${line}`);
  };
  const swept = sweepBenchSegments();
  if (swept.length) log(`  removed ${swept.length} segment(s) of earlier runs whose processes are gone`);
  const loaded: { name: string; module?: string; system: IpcSystem }[] = [];
  for (const name of o.systems) {
    const module = o.modules?.[name];
    if (!module && !SYSTEMS[name]) {
      skip(`${name}: skipped (not in bench/ipc/systems/index.ts)`);
      continue;
    }
    try {
      loaded.push({ name, module, system: await loadSystem(name, module) });
    } catch (err) {
      skip(`${name}: skipped (${(err as Error).message.split('\n')[0]})`);
    }
  }
  for (const placement of o.placements) {
    for (const clients of o.clients) {
      for (const qd of o.qd) {
        for (const bytes of o.bytes) {
          const shape = { clients, qd, bytes };
          const contenders: Contender[] = loaded
            .filter((l) => l.system.placements.includes(placement))
            .map((l) => ({ ...l, label: `${l.name} ${placement} clients=${clients} qd=${qd} ${bytes} B`, calls: o.calls, runs: [], resized: 0, failed: false }));
          const point = (c: Contender, cfg: PointConfig) => runPoint({ system: c.system, name: c.name, module: c.module, placement, cfg, timeoutMs: o.timeoutMs });
          const fail = (c: Contender, err: unknown) => {
            c.failed = true;
            skip(`${c.label}: skipped (${(err as Error).message.split('\n')[0]})`);
          };
          for (const c of contenders) {
            try {
              if (c.calls === undefined) {
                // Pilot runs, longer until one measures PILOT_MS (a short one is dominated by
                // the JIT's warming up and by a busy machine's stalls of spinning threads).
                let n = pilotCalls(qd);
                for (let i = 0; ; i++) {
                  const ms = Math.max(...(await point(c, config(shape, n))));
                  if (ms >= PILOT_MS || i === 3) {
                    c.calls = sized(n, ms, o.seconds);
                    break;
                  }
                  n = Math.ceil((n / ms) * PILOT_MS * 2);
                }
              }
              c.cfg = config(shape, c.calls);
            } catch (err) {
              fail(c, err);
            }
          }
          // Rounds until every system has its runs (a resize below costs a system its runs so far).
          for (let round = 0; round < o.runs * 4 && contenders.some((c) => !c.failed && c.runs.length < o.runs); round++) {
            const live = contenders.filter((c) => !c.failed);
            for (let k = 0; k < live.length; k++) {
              const c = live[(k + round) % live.length];
              if (c.runs.length >= o.runs) continue;
              try {
                const ms = await point(c, c.cfg!);
                // A run more than 3x off the target (a pilot slowed down by a system's start
                // or a busy machine) sizes the calls again, and the system's runs start over.
                const t = Math.max(...ms) / 1000;
                if (o.calls === undefined && c.resized < 2 && (t < o.seconds / 3 || t > o.seconds * 3)) {
                  const next = sized(c.calls!, t * 1000, o.seconds);
                  if (next !== c.calls) {
                    c.resized++;
                    c.calls = next;
                    c.cfg = config(shape, next);
                    c.runs.length = 0;
                    continue;
                  }
                }
                c.runs.push(ms);
              } catch (err) {
                fail(c, err);
              }
            }
          }
          for (const c of contenders) {
            if (c.failed) continue;
            if (c.runs.length < o.runs) {
              skip(`${c.label}: skipped (its calls were sized again too often to finish ${o.runs} runs)`);
              continue;
            }
            const calls = c.calls!;
            const cps = c.runs.map((ms) => (clients * calls * 1000) / Math.max(...ms));
            const rtt = c.runs.map((ms) => (median(ms) * 1000 * qd) / calls);
            const busy = busyThreads(clients);
            const rec: IpcRecord = {
              bench: 'ipc', system: c.name, provider: placement, placement, clients, qd, bytes, calls, warmup: c.cfg!.warmup,
              calls_per_s: median(cps), rtt_us: median(rtt), oversubscribed: busy > cores, busy_threads: busy,
              metric: 'calls_per_s', median: median(cps), unit: 'calls/s', runs: cps, rtt_runs: rtt,
            };
            records.push(rec);
            if (o.json) console.log(JSON.stringify(rec));
            else log(`  ${c.label}: ${formatNumber(rec.calls_per_s)} calls/s, ${rec.rtt_us.toFixed(2)} us${rec.oversubscribed ? ' (oversubscribed)' : ''}`);
          }
        }
      }
    }
  }
  // Table order: by system (as asked for), then placement, clients, qd, bytes.
  const rank = new Map(o.systems.map((n, i) => [n, i]));
  records.sort((x, y) => (rank.get(x.system)! - rank.get(y.system)!) || o.placements.indexOf(x.placement) - o.placements.indexOf(y.placement) || x.clients - y.clients || x.qd - y.qd || x.bytes - y.bytes);
  return { records, skipped };
}

/**
 * The median over runs of a's run / b's run: both measured in the same rounds (runIpcBench
 * interleaves the systems of a point), so each ratio compares runs made side by side.
 */
export function pairedRatio(a: IpcRecord, b: IpcRecord): number {
  const n = Math.min(a.runs.length, b.runs.length);
  return median(Array.from({ length: n }, (_, i) => a.runs[i] / b.runs[i]));
}

const bestOf = (rs: IpcRecord[]) => rs.reduce<IpcRecord | undefined>((b, r) => (!b || r.calls_per_s > b.calls_per_s ? r : b), undefined);

/** The table, a footnote for oversubscribed points, and the ratios between systems. */
export function ipcReport(records: IpcRecord[], cores = availableParallelism()): string {
  const rows = records.map((r) => [r.system, r.placement, `${r.clients}${r.oversubscribed ? '*' : ''}`, String(r.qd), String(r.bytes), formatNumber(r.calls_per_s), r.rtt_us.toFixed(2)]);
  const out = [table(['system', 'placement', 'clients', 'qd', 'bytes', 'calls/s', 'rtt us'], rows)];
  if (records.some((r) => r.oversubscribed)) out.push(`* oversubscribed: server + clients exceed the ${cores} cores (os.availableParallelism()); reported, not targeted`);
  const bytes = records[0]?.bytes;
  const of = (system: string, placement: Placement, clients: number) => records.filter((r) => r.system === system && r.placement === placement && r.clients === clients && r.bytes === bytes);
  const lines: string[] = [];
  for (const placement of ['threads', 'processes'] as const) {
    const systems = [...new Set(records.filter((r) => r.placement === placement).map((r) => r.system))];
    if (!systems.length) continue;
    // Node's baseline: postMessage between threads, node:net between processes.
    const baseName = placement === 'threads' ? 'postMessage' : 'node:net';
    const base = { best: bestOf(of(baseName, placement, 1)), qd1: of(baseName, placement, 1).find((r) => r.qd === 1) };
    const floor = { qd1: of('floor', placement, 1).find((r) => r.qd === 1) };
    lines.push(`\n${placement}, 1 client, ${bytes} B:`);
    for (const system of systems) {
      const best = bestOf(of(system, placement, 1));
      const qd1 = of(system, placement, 1).find((r) => r.qd === 1);
      if (!best) continue;
      let line = `  ${system}: ${qd1 ? `QD=1 round trip ${qd1.rtt_us.toFixed(2)} us, ` : ''}best ${formatNumber(best.calls_per_s)} calls/s (qd ${best.qd})`;
      if (system !== baseName && base.best) line += `; vs ${baseName}: ${(best.calls_per_s / base.best.calls_per_s).toFixed(1)}x throughput${qd1 && base.qd1 ? `, ${(base.qd1.rtt_us / qd1.rtt_us).toFixed(1)}x lower round trip` : ''}`;
      // Against the floor at the same QD, run by run (the runs were made side by side).
      const floorAt = of('floor', placement, 1).find((r) => r.qd === best.qd);
      if (system !== 'floor' && floorAt) line += `; vs floor at qd ${best.qd}: ${(100 * pairedRatio(best, floorAt)).toFixed(0)}% of its throughput (median of per-run ratios)${qd1 && floor.qd1 ? `, ${(qd1.rtt_us / floor.qd1.rtt_us).toFixed(1)}x its round trip` : ''}`;
      lines.push(line);
    }
    const d2 = bestOf(of('delegation', placement, 2));
    const i2 = d2 && of('ipc', placement, 2).find((r) => r.qd === d2.qd);
    if (d2 && i2) lines.push(`  delegation / ipc at 2 clients, qd ${d2.qd} (delegation's best): ${pairedRatio(d2, i2).toFixed(2)}x, median of per-run ratios (${formatNumber(d2.calls_per_s)} vs ${formatNumber(i2.calls_per_s)} calls/s)${d2.oversubscribed ? ', oversubscribed' : ''}`);
  }
  return [...out, ...lines].join('\n');
}

/** Throughput vs QD per system, 1 client, one SVG per placement (log scales). */
export async function plotIpc(records: IpcRecord[], outDir: string): Promise<string[]> {
  const bytes = records[0]?.bytes;
  const files: string[] = [];
  for (const placement of ['threads', 'processes'] as const) {
    const data = records.filter((r) => r.placement === placement && r.clients === 1 && r.bytes === bytes).map((r) => ({ system: r.system, qd: r.qd, calls_per_s: r.calls_per_s }));
    if (!data.length) continue;
    const spec = throughputByQd(`Throughput, ${bytes} B echo, 1 client, ${placement === 'threads' ? 'two threads' : 'two processes'} (median)`, data);
    files.push(await renderSvg(spec, path.join(outDir, `ipc-${placement}.svg`)));
  }
  return files;
}

/** Runs the benchmark, prints the table (or JSON lines), writes JSON and the SVG plots. */
export async function benchIpc(o: IpcBenchOptions): Promise<IpcRecord[]> {
  const { records, skipped } = await runIpcBench(o);
  const file = saveResults('ipc', records, { date: new Date().toISOString(), node: process.version, cores: availableParallelism(), runs: o.runs, quick: o.quick, seconds: o.seconds, calls: o.calls ?? null, skipped });
  if (!o.json) console.log(ipcReport(records));
  process.stderr.write(`results: ${file}\n`);
  try {
    const plots = await plotIpc(records, file.replace(/\.json$/, ''));
    if (plots.length) process.stderr.write(`plot: ${plots.join(', ')}\n`);
  } catch (err) {
    process.stderr.write(`plot skipped (${(err as Error).message.split('\n')[0]})\n`);
  }
  return records;
}

function list(v: string): string[] {
  return v.split(',').map((s) => s.trim()).filter(Boolean);
}

const intList = (v: string) => list(v).map(positiveInt);

function parsePlacements(v: string): Placement[] {
  const ps = list(v);
  if (!ps.length || ps.some((p) => p !== 'threads' && p !== 'processes')) throw new InvalidArgumentError('placements are threads and/or processes');
  return ps as Placement[];
}

function parseBytes(v: string): number[] {
  const bs = intList(v);
  if (bs.some((b) => b < 4)) throw new InvalidArgumentError('payloads are at least 4 bytes (they carry the call number)');
  return bs;
}

function positiveNumber(v: string): number {
  const n = Number(v);
  if (!(n > 0) || !Number.isFinite(n)) throw new InvalidArgumentError('must be a positive number');
  return n;
}

type CommandOptions = { systems: string[]; placements: Placement[]; clients: number[]; qd: number[]; bytes: number[]; runs: number; calls?: number; seconds: number; timeout: number; json?: boolean; quick?: boolean };

/** `weft bench ipc`. */
export function ipcCommand(): Command {
  return new Command('ipc')
    .description('request/response round trip and throughput between threads and between processes: postMessage, MessageChannel, node:net, a SharedArrayBuffer ring floor, and weft')
    .addOption(new Option('--systems <list>', 'systems (not registered in bench/ipc/systems/index.ts: skipped)').argParser(list).default([...ALL_SYSTEMS], ALL_SYSTEMS.join(',')))
    .addOption(new Option('--placements <list>', 'threads (worker threads of one process) and/or processes').argParser(parsePlacements).default(['threads', 'processes'], 'threads,processes'))
    .addOption(new Option('--clients <list>', 'client counts').argParser(intList).default([1, 2, 4], '1,2,4'))
    .addOption(new Option('--qd <list>', 'queue depths (calls in flight per client)').argParser(intList).default([1, 4, 16, 64], '1,4,16,64'))
    .addOption(new Option('--bytes <list>', 'request and response payload bytes (>= 4)').argParser(parseBytes).default([32], '32'))
    .option('--runs <n>', 'runs per point, each with fresh workers/processes; the median is reported', positiveInt, 3)
    .option('--calls <n>', 'measured calls per client (default: sized by a pilot run to --seconds)', positiveInt)
    .option('--seconds <s>', 'measured time per run the pilot sizes calls for', positiveNumber, 0.5)
    .option('--timeout <s>', 'a run of a point that takes longer is skipped', positiveNumber, 60)
    .option('--json', 'print one JSON object per line')
    .option('--quick', 'smoke test: qd 1 and 64, one run, 0.1 s per run (options given explicitly win)')
    .action(async (opts: CommandOptions, cmd: Command) => {
      const o = applyQuick(opts, cmd, { qd: [1, 64], runs: 1, seconds: 0.1 });
      await benchIpc({ systems: o.systems, placements: o.placements, clients: o.clients, qd: o.qd, bytes: o.bytes, runs: o.runs, calls: o.calls, seconds: o.seconds, timeoutMs: o.timeout * 1000, json: !!o.json, quick: !!o.quick });
    });
}

runIfMain(import.meta.url, ipcCommand);
