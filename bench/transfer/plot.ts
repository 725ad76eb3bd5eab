/** The SVG of `weft bench transfer`: GB/s against block size, weft and the NIC layer, per provider and op. */
import type { TopLevelSpec } from 'vega-lite';
import { renderSvg } from '../lib/svg.js';
import type { TransferSummary } from './report.js';

export async function plotTransfer(summary: TransferSummary[], file: string): Promise<string> {
  const data = summary.map((s) => ({ system: s.system === 'nic' ? 'NIC layer stream (ceiling)' : `weft transfer engine (${s.wait === 'sync' ? 'waitBatchSync' : 'await waitBatch'})`, panel: `${s.provider} ${s.op}`, block: s.block_bytes, gbps: s.gbps }));
  const spec: TopLevelSpec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v5.json',
    title: 'weft bench transfer: throughput by block size',
    data: { values: data },
    facet: { field: 'panel', type: 'nominal', title: null },
    columns: 2,
    spec: {
      mark: { type: 'line', point: true },
      encoding: {
        x: { field: 'block', type: 'quantitative', scale: { type: 'log', base: 2 }, title: 'block (bytes)' },
        y: { field: 'gbps', type: 'quantitative', title: 'GB/s' },
        color: { field: 'system', type: 'nominal', title: null },
      },
      width: 280,
      height: 180,
    },
  };
  return renderSvg(spec, file);
}
