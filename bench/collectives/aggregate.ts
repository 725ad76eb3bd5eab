/**
 * Folds the rows of K repeated runs into one row per (system, op, np, provider, bytes): the
 * median of the runs' medians (what `--runs K` reports), the lowest min, the median p90, and
 * every run's median in `runs_us` so the spread stays visible in the JSON.
 */
import { median } from '../lib/stats.js';
import { withBandwidth, type CollectiveResult } from './metrics.js';

export interface AggregatedRow extends CollectiveResult {
  /** Each run's median, in run order. */
  runs_us: number[];
}

export function rowKey(r: Pick<CollectiveResult, 'system' | 'op' | 'np' | 'provider' | 'bytes'>): string {
  return `${r.system}|${r.op}|${r.np}|${r.provider}|${r.bytes}`;
}

/** Rows grouped by rowKey, in the order each key was first seen. */
export function aggregate(rows: CollectiveResult[]): AggregatedRow[] {
  const groups = new Map<string, CollectiveResult[]>();
  for (const r of rows) {
    const k = rowKey(r);
    const g = groups.get(k);
    if (g) g.push(r);
    else groups.set(k, [r]);
  }
  return [...groups.values()].map((g) => {
    const medians = g.map((r) => r.median_us);
    const folded = withBandwidth({ ...g[0], median_us: median(medians), min_us: Math.min(...g.map((r) => r.min_us)), p90_us: median(g.map((r) => r.p90_us)) });
    return { ...folded, runs_us: medians };
  });
}
