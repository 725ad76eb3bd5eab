/** `weft demo`: several ranks on this host exchanging real traffic, with a short report. */
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { availableParallelism } from 'node:os';
import { launch } from '../launch/run.js';

const RANK = path.join(path.dirname(fileURLToPath(import.meta.url)), 'demo-worker.js');

export interface DemoOptions {
  ranks: number;
  provider: string;
  laps: number;
  blocks: number;
}

/** Runs the demo job through `weft run`'s launcher (embedded TcpStore); resolves with its exit code. */
export async function runDemo(o: DemoOptions): Promise<number> {
  console.log(`weft demo: weft run -n ${o.ranks} with an embedded TcpStore, provider ${o.provider}, ${availableParallelism()} cores`);
  console.log(`each rank: token ring x${o.laps}, a one-sided READ of its left neighbor, ${o.blocks} x 1 MiB WRITE_IMMs to its right neighbor\n`);
  const t = performance.now();
  const code = await launch({ ranks: o.ranks, script: RANK, args: [String(o.laps), String(o.blocks)], provider: o.provider });
  if (code === 0) console.log(`\ndone in ${((performance.now() - t) / 1000).toFixed(2)} s`);
  return code;
}
