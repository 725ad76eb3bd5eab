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
