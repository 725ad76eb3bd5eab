// Plots a fault campaign's results (scripts/fault-campaign.mjs --out FILE) as an SVG: the time
// from the signal to each survivor's first error, per configuration (SIGKILL: how fast a dead
// rank is seen; SIGSTOP: the timeout). Usage: node scripts/fault-campaign-plot.mjs FILE OUT.svg
import { readFileSync, writeFileSync } from 'node:fs';
import * as vega from 'vega';
import * as vl from 'vega-lite';

const [file, out] = process.argv.slice(2);
if (!file || !out) {
  console.error('usage: node scripts/fault-campaign-plot.mjs <campaign.json> <out.svg>');
  process.exit(2);
}
const { trials, meta } = JSON.parse(readFileSync(file, 'utf8'));
const values = [];
for (const t of trials) {
  if (t.status !== 'ok') continue;
  for (const s of t.survivors ?? []) if (typeof s.errorMs === 'number') values.push({ config: t.config, ms: Math.max(s.errorMs, 0.5), collective: s.coll ?? '?' });
}
const spec = {
  $schema: 'https://vega.github.io/schema/vega-lite/v5.json',
  title: `Fault campaign: signal to each survivor's first error (${values.length} survivors, timeout ${meta?.options?.timeoutMs ?? '?'} ms)`,
  data: { values },
  width: 560,
  height: 260,
  mark: { type: 'tick', opacity: 0.5 },
  encoding: {
    y: { field: 'config', type: 'nominal', title: null },
    x: { field: 'ms', type: 'quantitative', scale: { type: 'log' }, title: 'ms (log scale)' },
    color: { field: 'collective', type: 'nominal' },
  },
};
const view = new vega.View(vega.parse(vl.compile(spec).spec), { renderer: 'none' });
writeFileSync(out, await view.toSVG());
console.log(`wrote ${out} (${values.length} points)`);
