/**
 * `weft bench nic`: 64 B WRITE_IMM ping-pong round trip and streaming rate (64 B, 4 KiB,
 * 64 KiB, 1 MiB) for each provider, with libfabric's own shm provider (`ofi:shm`) and a
 * single-thread memcpy in the same run so the ratios are visible. Medians of several runs.
 *
 * Usage: node dist/bench/nic/index.js [--provider shm,ofi:tcp,ofi:shm] [--runs 5] [--json] [--quick]
 */
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { Command } from 'commander';
import { positiveInt } from '../../src/cli/arguments.js';
import { runIfMain } from '../lib/command.js';
import { native } from '../../src/native/binding.js';
import { runScenario } from '../../harness/local-group.js';
import { fiPingPong, haveFiPingPong } from '../lib/fi-pingpong.js';
import { formatBytes, formatNumber, median, saveResults, table, type BenchRecord } from '../lib/stats.js';

const WORKER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'worker.js');
const SIZES = [64, 4096, 65536, 1 << 20];
const SLOTS = 8;

export interface NicBenchOptions {
  providers: string[];
  runs: number;
  json: boolean;
  quick: boolean;
}

/** Message counts per stream run: about `budget` bytes, bounded for slow fabrics. */
function streamIters(provider: string, size: number, quick: boolean): number {
  const slow = provider.startsWith('ofi:tcp') || provider === 'ofi';
  const budget = (quick ? 64 : 512) * (1 << 20) * (slow ? 0.5 : 1);
  const maxMsgs = (quick ? 20_000 : 200_000) / (slow ? 8 : 1);
  return Math.max(64, Math.min(maxMsgs, Math.round(budget / size)));
}

function pingIters(provider: string, quick: boolean): number {
  const slow = provider.startsWith('ofi:tcp') || provider === 'ofi';
  return (quick ? 5_000 : 50_000) / (slow ? 20 : 1);
}

export async function runNicBench(opts: NicBenchOptions): Promise<BenchRecord[]> {
  const records: BenchRecord[] = [];
  const emit = (r: BenchRecord) => {
    records.push(r);
    if (opts.json) console.log(JSON.stringify(r));
    else process.stderr.write(`  ${r.provider} ${r.metric} ${formatBytes(r.bytes)}: ${formatNumber(r.median)} ${r.unit}\n`);
  };
  // The yardstick: one thread copying 1 MiB into the same ring of slots the stream uses.
  const mc: number[] = [];
  for (let r = 0; r < opts.runs; r++) mc.push(((1 << 20) * 2000) / native.memcpyBandwidth(1 << 20, 2000, SLOTS) / 1e9);
  emit({ bench: 'nic', provider: 'memcpy', bytes: 1 << 20, metric: 'gbps', median: median(mc), unit: 'GB/s', runs: mc });

  // Plain libfabric (C, fi_pingpong) on the fabric providers we measure, same run.
  if (haveFiPingPong()) {
    for (const fab of ['shm', 'tcp']) {
      if (!opts.providers.includes(`ofi:${fab}`)) continue;
      for (const [bytes, iters] of [[64, opts.quick ? 2000 : 20000], [1 << 20, opts.quick ? 200 : 1000]] as const) {
        const rtt: number[] = [];
        const bw: number[] = [];
        for (let r = 0; r < opts.runs; r++) {
          const m = await fiPingPong(fab, bytes, fab === 'tcp' && bytes === 64 ? iters / 4 : iters);
          if (m) {
            rtt.push(m.rttUs);
            bw.push(m.gbps);
          }
        }
        if (rtt.length === 0) continue;
        const base = { bench: 'nic', provider: `fi_pingpong:${fab}`, bytes, runs: rtt, op: 'fi_pingpong msg' };
        if (bytes === 64) emit({ ...base, metric: 'rtt_us', median: median(rtt), unit: 'us' });
        else emit({ ...base, metric: 'gbps', median: median(bw), unit: 'GB/s', runs: bw });
      }
    }
  }
  for (const provider of opts.providers) {
    try {
      const iters = pingIters(provider, opts.quick);
      const pp = await runScenario('pingpong', { n: 2, provider, worker: WORKER, args: { size: 64, iters, runs: opts.runs, warmup: Math.min(2000, iters) }, timeoutMs: 300_000 });
      const rtt = (pp.results[0] as { rtt_us: number[] }).rtt_us;
      emit({ bench: 'nic', provider, bytes: 64, metric: 'rtt_us', median: median(rtt), unit: 'us', runs: rtt, op: 'write_imm_pingpong' });
      for (const size of SIZES) {
        const st = await runScenario('stream', { n: 2, provider, worker: WORKER, args: { size, iters: streamIters(provider, size, opts.quick), runs: opts.runs, slots: SLOTS }, timeoutMs: 300_000 });
        const r = st.results[0] as { gbps: number[]; ops_per_s: number[] };
        emit({ bench: 'nic', provider, bytes: size, metric: 'ops_per_s', median: median(r.ops_per_s), unit: 'ops/s', runs: r.ops_per_s, op: 'write_imm_stream' });
        emit({ bench: 'nic', provider, bytes: size, metric: 'gbps', median: median(r.gbps), unit: 'GB/s', runs: r.gbps, op: 'write_imm_stream' });
      }
    } catch (err) {
      process.stderr.write(`  ${provider}: skipped: ${(err as Error).message.split('\n')[0]}\n`);
      records.push({ bench: 'nic', provider, bytes: 0, metric: 'error', median: NaN, unit: '', runs: [], error: (err as Error).message });
    }
  }
  return records;
}

/** The table of a run, with the ratios the targets are stated in. */
export function nicReport(records: BenchRecord[]): string {
  const get = (provider: string, metric: string, bytes: number) => records.find((r) => r.provider === provider && r.metric === metric && r.bytes === bytes)?.median;
  const providers = [...new Set(records.filter((r) => r.provider !== 'memcpy' && r.metric !== 'error' && !r.provider.startsWith('fi_pingpong')).map((r) => r.provider))];
  const rows: string[][] = [];
  for (const p of providers) {
    const rtt = get(p, 'rtt_us', 64);
    rows.push([p, 'rtt 64 B', rtt === undefined ? '-' : `${rtt.toFixed(2)} us`, ...SIZES.map((s) => `${formatNumber(get(p, 'ops_per_s', s) ?? NaN)}/s`), ...SIZES.map((s) => `${(get(p, 'gbps', s) ?? NaN).toFixed(2)}`)]);
  }
  const header = ['provider', 'metric', 'median', ...SIZES.map((s) => `ops ${formatBytes(s)}`), ...SIZES.map((s) => `GB/s ${formatBytes(s)}`)];
  const out = [table(header, rows)];
  const memcpy = get('memcpy', 'gbps', 1 << 20);
  out.push(`\nsingle-thread memcpy, 1 MiB into ${SLOTS} rotating slots: ${memcpy?.toFixed(2)} GB/s`);
  for (const fab of ['shm', 'tcp']) {
    const r = get(`fi_pingpong:${fab}`, 'rtt_us', 64);
    const b = get(`fi_pingpong:${fab}`, 'gbps', 1 << 20);
    if (r !== undefined) out.push(`plain libfabric (fi_pingpong, C, messages) ${fab}: 64 B round trip ${r.toFixed(2)} us, 1 MiB ping-pong ${b?.toFixed(2)} GB/s`);
  }
  const ratios: string[] = [];
  const shmRtt = get('shm', 'rtt_us', 64);
  const ofiShmRtt = get('ofi:shm', 'rtt_us', 64);
  if (shmRtt && ofiShmRtt) ratios.push(`shm / ofi:shm round trip (64 B): ${(shmRtt / ofiShmRtt).toFixed(2)}x  (target <= 0.7x)`);
  const shm1m = get('shm', 'gbps', 1 << 20);
  if (shm1m && memcpy) ratios.push(`shm 1 MiB stream / memcpy: ${(shm1m / memcpy).toFixed(2)}x  (target >= 0.9x)`);
  const tcpRtt = get('ofi:tcp', 'rtt_us', 64);
  const fiTcpRtt = get('fi_pingpong:tcp', 'rtt_us', 64);
  if (tcpRtt && fiTcpRtt) ratios.push(`ofi:tcp / fi_pingpong tcp round trip (64 B): ${(tcpRtt / fiTcpRtt).toFixed(2)}x  (target <= 1.3x)`);
  const fiShmRtt = get('fi_pingpong:shm', 'rtt_us', 64);
  if (ofiShmRtt && fiShmRtt) ratios.push(`ofi:shm (JS path) / fi_pingpong shm (C) round trip: ${(ofiShmRtt / fiShmRtt).toFixed(2)}x`);
  const tcp1m = get('ofi:tcp', 'gbps', 1 << 20);
  const fiTcp1m = get('fi_pingpong:tcp', 'gbps', 1 << 20);
  if (tcp1m && fiTcp1m) ratios.push(`ofi:tcp 1 MiB stream / fi_pingpong tcp 1 MiB ping-pong: ${(tcp1m / fiTcp1m).toFixed(2)}x  (target >= 1/1.3 = 0.77x)`);
  if (ratios.length) out.push('\n' + ratios.join('\n'));
  return out.join('\n');
}

export function defaultProviders(): string[] {
  return native.ofi.available ? ['shm', 'ofi:shm', 'ofi:tcp'] : ['shm'];
}

/** Runs the benchmark, prints the table (or JSON lines), writes JSON and SVG plots. */
export async function benchNic(opts: NicBenchOptions): Promise<BenchRecord[]> {
  const records = await runNicBench(opts);
  const file = saveResults('nic', records, { date: new Date().toISOString(), node: process.version, runs: opts.runs, quick: opts.quick });
  if (!opts.json) console.log(nicReport(records));
  process.stderr.write(`results: ${file}\n`);
  try {
    const { plotNic } = await import('../lib/plot.js');
    const plots = await plotNic(records, file.replace(/\.json$/, ''));
    process.stderr.write(`plots: ${plots.join(', ')}\n`);
  } catch (err) {
    process.stderr.write(`plots skipped (${(err as Error).message.split('\n')[0]}); they need the dev dependencies vega and vega-lite\n`);
  }
  return records;
}

/** `weft bench nic`. */
export function nicCommand(): Command {
  return new Command('nic')
    .description('64 B WRITE_IMM round trip and streaming rate per provider, vs libfabric shm and memcpy')
    .option('--provider <list>', 'comma-separated providers (default: shm, ofi:shm, ofi:tcp when built)')
    .option('--runs <n>', 'runs per measurement; the median is reported', positiveInt, 5)
    .option('--json', 'print one JSON object per line')
    .option('--quick', 'smaller runs (smoke test)')
    .action(async (o: { provider?: string; runs: number; json?: boolean; quick?: boolean }) => {
      await benchNic({ providers: o.provider ? o.provider.split(',') : defaultProviders(), runs: o.runs, json: !!o.json, quick: !!o.quick });
    });
}

runIfMain(import.meta.url, nicCommand);
