/** benchkv's outputs: the rows, the table, CSV, and the SVG plots (Vega-Lite, when installed). */
import path from 'node:path';
import { table } from '../lib/stats.js';
import { renderSvg } from '../lib/svg.js';
import type { RankResult } from './result.js';

/** One line of `--json`, one row of the table and the CSV. */
export interface KvRow {
  bench: 'kv';
  system: string;
  ranks: number;
  hosts: number;
  /** What copyrpc between ranks ran over: 'shm', 'ofi', 'shm+ofi'; the Redis peers: TCP over loopback. */
  fabric: string;
  daemons: number;
  clients: number;
  qd: number;
  read_ratio: number;
  distribution: string;
  locality: number | null;
  /** The daemons' poll controller (docs/bistability.md) and its average setting (extra polls, or hold us). */
  poll_controller: string | null;
  poll_setting_avg: number | null;
  mops: number;
  mops_runs: number[];
  mops_per_rank: number;
  per_rank_mops: number[];
  p50_us: number;
  p90_us: number | null;
  p99_us: number;
  p999_us: number | null;
  outstanding_avg: number | null;
  cqe_batch_avg: number | null;
  cqe_hist: RankResult['cqe_hist'] | null;
  loops_per_s_per_daemon: number | null;
  /** Yields of weft's daemon and client threads per request (with more busy threads than cores: scheduler turns per request). */
  yields_per_request: number | null;
  local_share: number | null;
  mismatches: number | null;
  threads_per_host: number | null;
  cores: number | null;
  oversubscribed: boolean | null;
  /** Seconds of warm-up before the runs (weft's backends: until the throughput was steady). */
  warmup_s: number | null;
  /** False when weft's throughput had not settled by the end of the warm-up. */
  warmup_steady: boolean | null;
  note?: string;
}

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

const f2 = (x: number | null) => (x === null || !Number.isFinite(x) ? '-' : x.toFixed(2));
const f1 = (x: number | null) => (x === null || !Number.isFinite(x) ? '-' : x.toFixed(1));

/** The controller and its average setting: `fixed:16`, `adaptive (u 7.2)`, `min-batch (15.0)`, `batch-hold (9.5 us)`. */
function pollControl(r: KvRow): string {
  if (r.poll_controller === null || r.poll_controller.startsWith('n/a')) return '-';
  if (r.poll_controller === 'adaptive') return `adaptive (u ${f1(r.poll_setting_avg)})`;
  if (r.poll_controller === 'min-batch') return `min-batch (${f1(r.poll_setting_avg)})`;
  if (r.poll_controller === 'batch-hold') return `batch-hold (${f1(r.poll_setting_avg)} us)`;
  return r.poll_controller;
}

/** The table, with each system's ratio to Redis driven by ioredis and to the best weft backend. */
export function formatTable(rows: KvRow[]): string {
  const redis = rows.find((r) => r.system === 'redis')?.mops;
  const bench = rows.find((r) => r.system === 'redis-benchmark')?.mops;
  const head = ['system', 'Mops', 'runs', '/rank', 'p50 us', 'p99 us', 'p99.9 us', 'outst.', 'CQE batch', 'loops/s/d', 'yields/req', 'poll control', 'x redis', 'x redis-bench'];
  const body = rows.map((r) => [
    r.system,
    f2(r.mops),
    r.mops_runs.map((x) => x.toFixed(2)).join(' '),
    f2(r.mops_per_rank),
    f1(r.p50_us),
    f1(r.p99_us),
    f1(r.p999_us),
    f1(r.outstanding_avg),
    f2(r.cqe_batch_avg),
    r.loops_per_s_per_daemon === null ? '-' : `${(r.loops_per_s_per_daemon / 1e3).toFixed(0)} k`,
    f2(r.yields_per_request),
    pollControl(r),
    redis ? `${(r.mops / redis).toFixed(2)}x` : '-',
    bench ? `${(r.mops / bench).toFixed(2)}x` : '-',
  ]);
  return table(head, body);
}

const CSV_COLUMNS: (keyof KvRow)[] = ['system', 'ranks', 'hosts', 'fabric', 'daemons', 'clients', 'qd', 'read_ratio', 'distribution', 'locality', 'poll_controller', 'poll_setting_avg', 'mops', 'mops_per_rank', 'p50_us', 'p90_us', 'p99_us', 'p999_us', 'outstanding_avg', 'cqe_batch_avg', 'loops_per_s_per_daemon', 'yields_per_request', 'local_share', 'mismatches', 'threads_per_host', 'cores', 'oversubscribed', 'warmup_s', 'warmup_steady'];

export function toCsv(rows: KvRow[]): string {
  const cell = (v: unknown) => (v === null || v === undefined ? '' : typeof v === 'string' && /[",\n]/.test(v) ? `"${v.replace(/"/g, '""')}"` : String(v));
  return [CSV_COLUMNS.join(','), ...rows.map((r) => CSV_COLUMNS.map((c) => cell(r[c])).join(','))].join('\n') + '\n';
}

/** Series of one backend for the time plots. */
export interface KvSeries {
  system: string;
  /** The daemons' poll controller spec (its setting is plotted when it moves). */
  controller: string;
  series: RankResult['series'];
}

/**
 * kv-mops.svg (Mops per system and rank count) and kv-series.svg (outstanding calls and CQE
 * batch average over the first milliseconds of rank 0's endpoint thread). Vega is a
 * devDependency: an installed package skips the plots and says so.
 */
export async function plotKv(rows: KvRow[], series: KvSeries[], outDir: string): Promise<string[]> {
  const render = renderSvg;
  const files: string[] = [];
  files.push(
    await render(
      {
        $schema: 'https://vega.github.io/schema/vega-lite/v5.json',
        title: 'benchkv: total Mops (median of runs; higher is better)',
        data: { values: rows.map((r) => ({ system: r.system, ranks: `${r.ranks} ranks`, mops: r.mops })) },
        mark: 'bar',
        encoding: {
          y: { field: 'system', type: 'nominal', sort: '-x' },
          x: { field: 'mops', type: 'quantitative', title: 'Mops' },
          row: { field: 'ranks', type: 'nominal', title: null },
          color: { field: 'system', type: 'nominal', legend: null },
        },
        width: 420,
      },
      path.join(outDir, 'kv-mops.svg'),
    ),
  );
  const points = series.flatMap((s) =>
    s.series.t_ms.flatMap((t, i) => [
      { system: s.system, t_ms: t, metric: 'outstanding copyrpc calls', value: s.series.outstanding[i] },
      { system: s.system, t_ms: t, metric: 'CQE batch (responses per loop)', value: s.series.cqe_batch[i] },
      ...(s.controller === 'none' || s.controller.startsWith('fixed') || s.controller.startsWith('n/a')
        ? []
        : [{ system: s.system, t_ms: t, metric: s.controller === 'batch-hold' ? 'batch-hold: hold us' : `${s.controller}: extra polls`, value: s.series.setting[i] }]),
    ]),
  );
  if (points.length > 0) {
    files.push(
      await render(
        {
          $schema: 'https://vega.github.io/schema/vega-lite/v5.json',
          title: 'benchkv: rank 0 over time (1 ms samples)',
          data: { values: points },
          mark: { type: 'line', strokeWidth: 1 },
          encoding: {
            x: { field: 't_ms', type: 'quantitative', title: 'ms since start' },
            y: { field: 'value', type: 'quantitative', title: null },
            color: { field: 'system', type: 'nominal' },
            row: { field: 'metric', type: 'nominal', title: null },
          },
          resolve: { scale: { y: 'independent' } },
          width: 520,
          height: 160,
        },
        path.join(outDir, 'kv-series.svg'),
      ),
    );
  }
  return files;
}
