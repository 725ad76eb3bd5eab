/**
 * Renders benchmark records as SVG charts with Vega-Lite (headless: no browser, no canvas).
 * Usage: node dist/bench/lib/plot.js <results.json> <out dir>
 */
import { readFileSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { BenchRecord } from './stats.js';
import { renderSvg as render } from './svg.js';

/** Writes nic-rtt.svg and nic-stream.svg into `outDir`; returns their paths. */
export async function plotNic(records: BenchRecord[], outDir: string): Promise<string[]> {
  mkdirSync(outDir, { recursive: true });
  const rtt = records.filter((r) => r.metric === 'rtt_us').map((r) => ({ provider: r.provider, us: r.median }));
  const memcpy = records.find((r) => r.provider === 'memcpy')?.median;
  const stream = records.filter((r) => r.metric === 'gbps' && r.provider !== 'memcpy').map((r) => ({ provider: r.provider, bytes: r.bytes, gbps: r.median }));
  const files = [path.join(outDir, 'nic-rtt.svg'), path.join(outDir, 'nic-stream.svg')];
  await render(
    {
      $schema: 'https://vega.github.io/schema/vega-lite/v5.json',
      title: '64 B WRITE_IMM ping-pong round trip (median, lower is better)',
      data: { values: rtt },
      mark: 'bar',
      encoding: {
        y: { field: 'provider', type: 'nominal', sort: '-x' },
        x: { field: 'us', type: 'quantitative', title: 'round trip (us)' },
      },
      width: 420,
    },
    files[0],
  );
  await render(
    {
      $schema: 'https://vega.github.io/schema/vega-lite/v5.json',
      title: `WRITE_IMM streaming rate (median)${memcpy ? `; memcpy ${memcpy.toFixed(1)} GB/s` : ''}`,
      data: { values: stream },
      layer: [
        {
          mark: { type: 'line', point: true },
          encoding: {
            x: { field: 'bytes', type: 'quantitative', scale: { type: 'log', base: 2 }, title: 'message size (bytes)' },
            y: { field: 'gbps', type: 'quantitative', title: 'GB/s' },
            color: { field: 'provider', type: 'nominal' },
          },
        },
        ...(memcpy ? [{ mark: { type: 'rule' as const, strokeDash: [4, 4] }, encoding: { y: { datum: memcpy } } }] : []),
      ],
      width: 420,
      height: 260,
    },
    files[1],
  );
  return files;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  const [input, out] = process.argv.slice(2);
  const { records } = JSON.parse(readFileSync(input, 'utf8')) as { records: BenchRecord[] };
  plotNic(records, out ?? '.').then((f) => console.log(f.join('\n')));
}
