/**
 * `weft bench rpc`: copyrpc between two processes on every provider (QD=1 round trip;
 * throughput over queue depths 1..256, endpoints 1..8 and payloads 8..4096 B; a GC count
 * over a million calls on shm), and in the same run what a Node user would use today
 * (node:net over a Unix socket, zeromq, grpc-js unary and bidi). Medians of `runs` runs.
 *
 * Usage: node dist/bench/rpc/index.js [--provider shm,ofi] [--runs 3] [--json] [--quick] [--no-peers]
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command } from 'commander';
import { positiveInt } from '../../src/cli/arguments.js';
import { runIfMain } from '../lib/command.js';
import { renderSvg, throughputByQd } from '../lib/svg.js';
import { native } from '../../src/native/binding.js';
import { runScenario } from '../../harness/local-group.js';
import { formatNumber, median, saveResults, table, type BenchRecord } from '../lib/stats.js';
import { benchPeer, PEER_SYSTEMS } from './peers.js';

const WORKER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'worker.js');

export interface RpcBenchOptions {
  providers: string[];
  runs: number;
  json: boolean;
  quick: boolean;
  peers: boolean;
}

interface Point {
  qd: number;
  endpoints: number;
  bytes: number;
  calls: number;
}

function points(provider: string, quick: boolean): Point[] {
  const slow = provider.startsWith('ofi');
  const scale = (quick ? 0.1 : 1) * (slow ? 0.1 : 1);
  const n = (x: number) => Math.max(200, Math.round(x * scale));
  const pts: Point[] = [{ qd: 1, endpoints: 1, bytes: 32, calls: n(100_000) }];
  for (const qd of [4, 16, 64, 256]) pts.push({ qd, endpoints: 1, bytes: 32, calls: n(1_000_000) });
  for (const e of [2, 4, 8]) pts.push({ qd: 64, endpoints: e, bytes: 32, calls: n(1_000_000) });
  for (const b of [8, 256, 1024, 4096]) pts.push({ qd: 64, endpoints: 1, bytes: b, calls: n(b > 1024 ? 300_000 : 1_000_000) });
  // Last: the allocation check (GCs counted over these runs).
  pts.push({ qd: 64, endpoints: 1, bytes: 32, calls: n(1_000_000) });
  return pts;
}

export async function runRpcBench(o: RpcBenchOptions): Promise<BenchRecord[]> {
  const records: BenchRecord[] = [];
  const emit = (r: BenchRecord) => {
    records.push(r);
    if (o.json) console.log(JSON.stringify(r));
    else process.stderr.write(`  ${r.system} ${r.provider} qd=${r.qd} eps=${r.endpoints} ${r.bytes} B: ${formatNumber(r.calls_per_s as number)} calls/s, ${(r.rtt_us as number).toFixed(2)} us\n`);
  };
  for (const provider of o.providers) {
    try {
      const pts = points(provider, o.quick);
      const { results } = await runScenario('run', { n: 2, provider, worker: WORKER, args: { points: pts, runs: o.runs, ring: 1 << 18, gcCheck: provider === 'shm' }, timeoutMs: 900_000 });
      const rs = (results[0] as { results: (Point & { calls_per_s: number[]; rtt_us: number[]; gc_count?: number; heap_delta_bytes?: number; checked_calls?: number })[] }).results;
      rs.forEach((r, i) => {
        const gc = i === rs.length - 1 && r.gc_count !== undefined;
        emit({
          bench: 'rpc', system: 'copyrpc', provider, qd: r.qd, endpoints: r.endpoints, bytes: r.bytes,
          calls_per_s: median(r.calls_per_s), rtt_us: median(r.rtt_us), metric: gc ? 'gc_check' : 'calls_per_s', median: median(r.calls_per_s), unit: 'calls/s', runs: r.calls_per_s,
          ...(gc ? { gc_count: r.gc_count, heap_delta_bytes: r.heap_delta_bytes, checked_calls: r.checked_calls } : {}),
        });
      });
    } catch (err) {
      process.stderr.write(`  copyrpc ${provider}: skipped: ${(err as Error).message.split('\n')[0]}\n`);
    }
  }
  if (o.peers) {
    for (const system of PEER_SYSTEMS) {
      try {
        const unary = system === 'grpc-unary';
        const calls = (o.quick ? 0.2 : 1) * (unary ? 5000 : 50_000);
        const res = await benchPeer(system, [{ qd: 1, bytes: 32, calls: Math.min(calls, 10_000) }, { qd: 64, bytes: 32, calls }, { qd: 256, bytes: 32, calls }], o.runs);
        for (const r of res) emit({ bench: 'rpc', system: r.system, provider: system === 'node:net' ? 'unix socket' : system === 'zeromq' ? 'ipc' : 'unix socket (http2)', qd: r.qd, endpoints: 1, bytes: r.bytes, calls_per_s: r.calls_per_s, rtt_us: r.rtt_us, metric: 'calls_per_s', median: r.calls_per_s, unit: 'calls/s', runs: [r.calls_per_s] });
      } catch (err) {
        process.stderr.write(`  ${system}: skipped: ${(err as Error).message.split('\n')[0]} (install the dev dependencies zeromq and @grpc/grpc-js)\n`);
      }
    }
  }
  return records;
}

export function rpcReport(records: BenchRecord[]): string {
  const rows = records.map((r) => [String(r.system), String(r.provider), String(r.qd), String(r.endpoints), String(r.bytes), formatNumber(r.calls_per_s as number), (r.rtt_us as number).toFixed(2)]);
  const out = [table(['system', 'provider', 'qd', 'endpoints', 'bytes', 'calls/s', 'rtt us'], rows)];
  const best = (sys: (r: BenchRecord) => boolean, f: (r: BenchRecord) => number, pick: 'max' | 'min') => {
    const xs = records.filter(sys).map(f);
    return xs.length ? (pick === 'max' ? Math.max(...xs) : Math.min(...xs)) : NaN;
  };
  const peer = (r: BenchRecord) => r.system !== 'copyrpc';
  for (const p of new Set(records.filter((r) => r.system === 'copyrpc').map((r) => r.provider))) {
    const mine = (r: BenchRecord) => r.system === 'copyrpc' && r.provider === p && r.metric === 'calls_per_s';
    const rtt = records.find((r) => mine(r) && r.qd === 1)?.rtt_us as number;
    const tput = best((r) => mine(r) && r.bytes === 32 && r.endpoints === 1, (r) => r.calls_per_s as number, 'max');
    const peerT = best(peer, (r) => r.calls_per_s as number, 'max');
    const peerR = best((r) => peer(r) && r.qd === 1, (r) => r.rtt_us as number, 'min');
    out.push(`\ncopyrpc ${p}: QD=1 round trip ${rtt?.toFixed(2)} us; best 32 B throughput on one endpoint pair ${formatNumber(tput)} calls/s`);
    if (Number.isFinite(peerT)) out.push(`  vs fastest Node peer: ${(tput / peerT).toFixed(1)}x throughput (${formatNumber(peerT)}/s), ${(peerR / rtt).toFixed(1)}x lower round trip (${peerR.toFixed(1)} us)`);
  }
  const gc = records.find((r) => r.metric === 'gc_check');
  if (gc) out.push(`\nallocation check (shm, qd ${gc.qd}, ${gc.bytes} B): ${gc.gc_count} garbage collections and ${gc.heap_delta_bytes} bytes of heap growth over ${gc.checked_calls} calls`);
  return out.join('\n');
}

export async function plotRpc(records: BenchRecord[], outDir: string): Promise<string[]> {
  const data = records.filter((r) => r.metric === 'calls_per_s' && r.endpoints === 1 && r.bytes === 32).map((r) => ({ system: `${r.system} (${r.provider})`, qd: r.qd, calls_per_s: r.calls_per_s }));
  const spec = throughputByQd('RPC throughput, 32 B echo, two processes on one host (median)', data as { system: string; qd: number; calls_per_s: number }[]);
  return [await renderSvg(spec, path.join(outDir, 'rpc-throughput.svg'))];
}

export function defaultRpcProviders(): string[] {
  return native.ofi.available ? ['shm', 'ofi'] : ['shm'];
}

/** Runs the benchmark, prints the table (or JSON lines), writes JSON and an SVG plot. */
export async function benchRpc(o: RpcBenchOptions): Promise<BenchRecord[]> {
  const records = await runRpcBench(o);
  const file = saveResults('rpc', records, { date: new Date().toISOString(), node: process.version, runs: o.runs, quick: o.quick });
  if (!o.json) console.log(rpcReport(records));
  process.stderr.write(`results: ${file}\n`);
  try {
    process.stderr.write(`plot: ${(await plotRpc(records, file.replace(/\.json$/, ''))).join(', ')}\n`);
  } catch (err) {
    process.stderr.write(`plot skipped (${(err as Error).message.split('\n')[0]})\n`);
  }
  return records;
}

/** `weft bench rpc`. */
export function rpcCommand(): Command {
  return new Command('rpc')
    .description('copyrpc round trip and throughput (queue depths, endpoints, payloads) vs node:net, zeromq and grpc-js')
    .option('--provider <list>', 'comma-separated providers (default: shm, and ofi when built)')
    .option('--runs <n>', 'runs per point; the median is reported', positiveInt, 3)
    .option('--json', 'print one JSON object per line')
    .option('--quick', 'smaller runs (smoke test)')
    .option('--no-peers', 'skip node:net, zeromq and grpc-js')
    .action(async (o: { provider?: string; runs: number; json?: boolean; quick?: boolean; peers: boolean }) => {
      await benchRpc({ providers: o.provider ? o.provider.split(',') : defaultRpcProviders(), runs: o.runs, json: !!o.json, quick: !!o.quick, peers: o.peers });
    });
}

runIfMain(import.meta.url, rpcCommand);
