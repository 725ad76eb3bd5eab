/** The table, JSON rows and plots of `weft sim daemon-loop`. */
import path from 'node:path';
import type { TopLevelSpec } from 'vega-lite';
import { table } from '../../lib/stats.js';
import { renderSvg } from '../../lib/svg.js';
import type { SimResult } from './model.js';

/** One JSON row per (NP, controller), the fields first. */
export interface SimRow {
  bench: 'sim';
  np: number;
  controller: string;
  mops_total: number;
  mops_per_rank: number;
  batch_avg: number;
  outstanding_avg: number;
  loops_per_s: number;
  loops_per_10s: number;
  batch_hist: Record<'0' | '1' | '2-10' | '11-100' | '>100', number>;
  loop_us: number;
  messages_per_write: number;
  latency_us: number;
  setting_avg: number;
  setting_unit: 'polls' | 'us';
  /** Per-rank Mops over the best of the fixed choices (none, fixed:N) at this NP. */
  vs_best_fixed: number | null;
  /** Induced collapse (clients stall, then come back thinly): us from the restart to 80% of the best fixed choice's throughput over 100 us (null: not within the run). */
  recovery_us: number | null;
  /** Batch average in the 200 us after the clients are all back (<= 2: the restart collapsed). */
  after_stall_batch: number | null;
  wall_ms: number;
}

const isFixedChoice = (c: string): boolean => c === 'none' || c.startsWith('fixed:');

/**
 * us from the hand-back until the throughput over a 100 us window reaches `share` of
 * `reference` Mops per rank; null if it never does.
 */
export function recoveryTime(r: SimResult, reference: number, share = 0.8, windowUs = 100): number | null {
  if (r.restartUs === null) return null;
  const s = r.series;
  let acc = 0;
  let accW = 0;
  const q: [number, number][] = [];
  for (let i = 0; i < s.t.length; i++) {
    if (s.t[i] < r.restartUs) continue;
    const w = (i + 1 < s.t.length ? s.t[i + 1] : s.t[i] + (s.t[i] - s.t[i - 1])) - s.t[i];
    q.push([s.mops[i] * w, w]);
    acc += s.mops[i] * w;
    accW += w;
    while (q.length > 1 && accW - q[0][1] >= windowUs) {
      const [v, ww] = q.shift()!;
      acc -= v;
      accW -= ww;
    }
    if (accW >= windowUs && acc / accW >= share * reference) return Math.max(0, s.t[i] + w - accW - r.restartUs);
  }
  return null;
}

export function toRows(results: SimResult[], recovery: SimResult[]): SimRow[] {
  const bestFixed = new Map<number, number>();
  for (const r of results) if (isFixedChoice(r.controller)) bestFixed.set(r.np, Math.max(bestFixed.get(r.np) ?? 0, r.mopsPerRank));
  return results.map((r) => {
    const rec = recovery.find((x) => x.np === r.np && x.controller === r.controller);
    const best = bestFixed.get(r.np);
    return {
      bench: 'sim',
      np: r.np,
      controller: r.controller,
      mops_total: r.mopsTotal,
      mops_per_rank: r.mopsPerRank,
      batch_avg: r.batchAvg,
      outstanding_avg: r.outstandingAvg,
      loops_per_s: r.loopsPerS,
      loops_per_10s: r.loopsPerS * 10,
      batch_hist: { '0': r.batchHist[0], '1': r.batchHist[1], '2-10': r.batchHist[2], '11-100': r.batchHist[3], '>100': r.batchHist[4] },
      loop_us: r.loopUs,
      messages_per_write: r.messagesPerWrite,
      latency_us: r.latencyUs,
      setting_avg: r.settingAvg,
      setting_unit: r.settingUnit,
      vs_best_fixed: best !== undefined && best > 0 ? r.mopsPerRank / best : null,
      recovery_us: rec && best !== undefined ? recoveryTime(rec, best) : null,
      after_stall_batch: rec ? rec.afterStallBatch : null,
      wall_ms: r.wallMs,
    };
  });
}

const pct = (x: number): string => (x * 100).toFixed(1);
const fix = (x: number, d: number): string => x.toFixed(d);

export function formatTable(rows: SimRow[], withRecovery: boolean): string {
  const header = ['NP', 'controller', 'Mops total', '/rank', 'vs best fixed', 'batch avg', 'b=0 %', '1 %', '2-10 %', '11-100 %', '>100 %', 'outstanding', 'loops/10s', 'loop us', 'msgs/WRITE', 'setting'];
  if (withRecovery) header.push('after stall', 'recovery');
  const body = rows.map((r) => {
    const line = [
      String(r.np),
      r.controller,
      fix(r.mops_total, 2),
      fix(r.mops_per_rank, 2),
      r.vs_best_fixed === null ? '-' : `${fix(r.vs_best_fixed, 2)}x`,
      fix(r.batch_avg, 2),
      pct(r.batch_hist['0']),
      pct(r.batch_hist['1']),
      pct(r.batch_hist['2-10']),
      pct(r.batch_hist['11-100']),
      pct(r.batch_hist['>100']),
      fix(r.outstanding_avg, 0),
      `${fix(r.loops_per_10s / 1e6, 2)} M`,
      fix(r.loop_us, 2),
      fix(r.messages_per_write, 1),
      `${fix(r.setting_avg, 1)} ${r.setting_unit}`,
    ];
    if (withRecovery) {
      line.push(r.after_stall_batch === null ? '-' : `batch ${fix(r.after_stall_batch, r.after_stall_batch < 10 ? 1 : 0)}`);
      line.push(r.recovery_us === null ? (r.after_stall_batch === null ? '-' : 'not in run') : `${fix(r.recovery_us / 1000, 2)} ms`);
    }
    return line;
  });
  return table(header, body);
}

const SCHEMA = 'https://vega.github.io/schema/vega-lite/v5.json';

/** Per-rank Mops against NP, one line per controller. */
function mopsSpec(rows: SimRow[], title: string): TopLevelSpec {
  return {
    $schema: SCHEMA,
    title,
    data: { values: rows.map((r) => ({ np: r.np, controller: r.controller, mops: r.mops_per_rank })) },
    mark: { type: 'line', point: true },
    encoding: {
      x: { field: 'np', type: 'quantitative', scale: { type: 'log', base: 2 }, title: 'NP (ranks)' },
      y: { field: 'mops', type: 'quantitative', title: 'Mops per rank' },
      color: { field: 'controller', type: 'nominal' },
    },
    width: 460,
    height: 280,
  };
}

/** A metric of the series over the first `untilUs`, one line per run. */
function seriesSpec(runs: SimResult[], metric: 'batch' | 'outstanding' | 'mops' | 'setting', title: string, yTitle: string, untilUs: number, log: boolean): TopLevelSpec {
  const values: { t: number; v: number; run: string }[] = [];
  for (const r of runs) {
    const s = r.series;
    for (let i = 0; i < s.t.length && s.t[i] < untilUs; i++) {
      const v = s[metric][i];
      if (v === null) continue; // no loop started in this bin
      values.push({ t: s.t[i] / 1000, v: log ? Math.max(v, 0.1) : v, run: `NP=${r.np} ${r.controller}` });
    }
  }
  return {
    $schema: SCHEMA,
    title,
    data: { values },
    mark: { type: 'line', strokeWidth: 1 },
    encoding: {
      x: { field: 't', type: 'quantitative', title: 'simulated time, ms' },
      y: { field: 'v', type: 'quantitative', title: yTitle, scale: log ? { type: 'log' } : {} },
      color: { field: 'run', type: 'nominal' },
    },
    width: 520,
    height: 240,
  };
}

/** Writes the plots; returns their paths. */
export async function plotSim(results: SimResult[], recovery: SimResult[], rows: SimRow[], seriesNp: number[], seriesUs: number, outDir: string): Promise<string[]> {
  const files: string[] = [];
  files.push(await renderSvg(mopsSpec(rows, 'daemon-loop model: Mops per rank by controller'), path.join(outDir, 'sim-mops.svg')));
  const none = results.filter((r) => r.controller === 'none' && seriesNp.includes(r.np));
  if (none.length > 0) {
    files.push(await renderSvg(seriesSpec(none, 'batch', 'responses per loop (CQE batch), no budget', 'batch (log)', seriesUs, true), path.join(outDir, 'sim-series-batch.svg')));
    files.push(await renderSvg(seriesSpec(none, 'outstanding', 'calls in flight per rank, no budget', 'outstanding', seriesUs, false), path.join(outDir, 'sim-series-outstanding.svg')));
  }
  if (recovery.length > 0) {
    // the NP where the stall really collapses the loop without control, else the first
    const np = seriesNp.find((n) => recovery.some((r) => r.np === n && r.controller === 'none' && r.afterStallBatch !== null && r.afterStallBatch <= 2)) ?? recovery[0].np;
    const runs = recovery.filter((r) => r.np === np);
    const until = Math.max(...runs.map((r) => r.series.t[r.series.t.length - 1] ?? 0)) + 1;
    files.push(await renderSvg(seriesSpec(runs, 'mops', `NP=${np}: throughput around the induced collapse (clients stall, then return thinly)`, 'Mops per rank', until, false), path.join(outDir, 'sim-recovery.svg')));
    files.push(await renderSvg(seriesSpec(runs.filter((r) => r.controller !== 'none'), 'setting', `NP=${np}: controller setting (extra polls, or hold us)`, 'setting', until, false), path.join(outDir, 'sim-setting.svg')));
  }
  return files;
}
