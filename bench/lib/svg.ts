/**
 * Renders a Vega-Lite spec to an SVG file, headless (no browser, no canvas). Vega is a
 * devDependency, loaded on first use: in an installed package the import fails and each
 * benchmark skips its plots with one line saying so.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { TopLevelSpec } from 'vega-lite';

export async function renderSvg(spec: TopLevelSpec, file: string): Promise<string> {
  const vega = await import('vega');
  const vl = await import('vega-lite');
  const view = new vega.View(vega.parse(vl.compile(spec).spec), { renderer: 'none' });
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, await view.toSVG());
  return file;
}

/** Calls/s against queue depth, one line per system, both axes logarithmic (rpc and ipc benches). */
export function throughputByQd(title: string, data: { system: string; qd: number; calls_per_s: number }[]): TopLevelSpec {
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v5.json',
    title,
    data: { values: data },
    mark: { type: 'line', point: true },
    encoding: {
      x: { field: 'qd', type: 'quantitative', scale: { type: 'log', base: 2 }, title: 'queue depth' },
      y: { field: 'calls_per_s', type: 'quantitative', scale: { type: 'log' }, title: 'calls/s' },
      color: { field: 'system', type: 'nominal' },
    },
    width: 460,
    height: 280,
  };
}
