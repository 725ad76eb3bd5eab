/**
 * SVG charts of `weft bench collectives` with Vega-Lite, rendered headless as bench/lib/plot.ts
 * does: allreduce bus bandwidth and latency against size, log scales, one line per system and
 * transport, one panel per np. The floors (memory at np=2; the link between emulated hosts at
 * the job's np) are drawn as dashed lines.
 *
 * Re-plot a results file: node dist/bench/collectives/plot.js <collectives-*.json> <out dir>
 */
import { mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type * as vl from 'vega-lite';
import { LINK_FLOOR, type CollectiveResult } from './metrics.js';
import { renderSvg as render } from '../lib/svg.js';

function series(r: CollectiveResult): string {
  if (r.system !== 'floor') return `${r.system} ${r.provider}`;
  return r.provider === LINK_FLOOR ? 'link floor (tcp, the bytes each way)' : `memory floor (${r.provider})`;
}

/** At most 8 of the measured sizes, evenly spaced, the largest always among them. */
function tickSizes(bytes: number[]): number[] {
  const sizes = [...new Set(bytes)].sort((a, b) => a - b);
  const step = Math.ceil(sizes.length / 8);
  return sizes.filter((_, i) => (sizes.length - 1 - i) % step === 0);
}

/** Writes collectives-allreduce-busbw.svg and collectives-allreduce-latency.svg into outDir. */
export async function plotCollectives(rows: CollectiveResult[], outDir: string, title = ''): Promise<string[]> {
  mkdirSync(outDir, { recursive: true });
  const points = rows
    .filter((r) => r.op === 'allreduce' && (r.np === 2 || r.np === 4) && r.bytes > 0 && r.provider !== 'memcpy')
    .map((r) => ({ series: series(r), floor: r.system === 'floor', np: `np=${r.np}`, bytes: r.bytes, us: r.median_us, busbw: r.busbw_gbps }));
  const x = { field: 'bytes', type: 'quantitative' as const, scale: { type: 'log' as const, base: 2 }, title: 'size (bytes, per rank)', axis: { values: tickSizes(points.map((p) => p.bytes)), labelExpr: "datum.value >= 1048576 ? datum.value / 1048576 + ' MiB' : datum.value >= 1024 ? datum.value / 1024 + ' KiB' : datum.value + ' B'" } };
  const chart = (metric: 'busbw' | 'us', yTitle: string, heading: string): vl.TopLevelSpec => ({
    $schema: 'https://vega.github.io/schema/vega-lite/v5.json',
    title: `${heading}${title ? ` (${title})` : ''}`,
    data: { values: points.filter((p) => p[metric] !== null && p[metric] !== undefined) },
    facet: { column: { field: 'np', type: 'nominal', title: null } },
    spec: {
      width: 360,
      height: 260,
      mark: { type: 'line', point: true },
      encoding: {
        x,
        y: { field: metric, type: 'quantitative', scale: { type: 'log' }, title: yTitle },
        color: { field: 'series', type: 'nominal', title: 'system / transport', legend: { labelLimit: 320 } },
        strokeDash: { field: 'floor', type: 'nominal', scale: { domain: [false, true], range: [[1, 0], [4, 3]] }, legend: null },
      },
    },
  });
  const files = [path.join(outDir, 'collectives-allreduce-busbw.svg'), path.join(outDir, 'collectives-allreduce-latency.svg')];
  await render(chart('busbw', 'bus bandwidth (GB/s, higher is better)', 'allreduce float32 sum: bus bandwidth (median)'), files[0]);
  await render(chart('us', 'time (us, lower is better)', 'allreduce float32 sum: time (median of max over ranks)'), files[1]);
  return files;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  const [input, out] = process.argv.slice(2);
  const { rows, meta } = JSON.parse(readFileSync(input, 'utf8')) as { rows: CollectiveResult[]; meta?: { date?: string; cpus?: number } };
  const title = meta?.date ? `${meta.date.slice(0, 10)}, ${meta.cpus} cores` : '';
  plotCollectives(rows, out ?? '.', title).then((f) => console.log(f.join('\n')));
}
