/** `weft demo`: several ranks on this host exchanging real traffic, with a short report. */
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { availableParallelism } from 'node:os';
import { runScenario } from '../launch/local-group.js';

const WORKER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'demo-worker.js');

export interface DemoOptions {
  ranks: number;
  provider: string;
  laps: number;
  blocks: number;
}

interface RankReport {
  rank: number;
  pid: number;
  provider: string;
  hopUs: number;
  heard: string;
  gbps: number;
  received: number;
}

export async function runDemo(o: DemoOptions): Promise<void> {
  console.log(`weft demo: ${o.ranks} ranks on this host over ${o.provider}; token ring x${o.laps}, one-sided READs, ${o.blocks} x 1 MiB writes per rank`);
  const t = performance.now();
  const { results } = await runScenario('ring', { n: o.ranks, provider: o.provider, worker: WORKER, args: { laps: o.laps, blocks: o.blocks }, timeoutMs: 120_000 });
  const rows = results as RankReport[];
  console.log('');
  console.log('rank  pid      read from left neighbor (one-sided)          stream to right');
  for (const r of rows) console.log(`${String(r.rank).padEnd(4)}  ${String(r.pid).padEnd(7)}  ${r.heard.padEnd(43)}  ${r.gbps.toFixed(2)} GB/s (${r.received} MiB in)`);
  const hop = rows[0].hopUs;
  const total = rows.reduce((a, r) => a + r.gbps, 0);
  console.log('');
  console.log(`token ring: ${hop.toFixed(2)} us per hop (64 B WRITE_IMM; ${o.ranks} processes that spin, yield, then sleep, on ${availableParallelism()} cores)`);
  console.log(`aggregate streaming: ${total.toFixed(2)} GB/s; finished in ${((performance.now() - t) / 1000).toFixed(2)} s`);
}
