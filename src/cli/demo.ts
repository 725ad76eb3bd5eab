/** `weft demo`: several ranks on this host exchanging real traffic, with a short report. */
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { availableParallelism, tmpdir } from 'node:os';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { launch } from '../launch/run.js';

const RANK = path.join(path.dirname(fileURLToPath(import.meta.url)), 'demo-worker.js');
/** `weft bench` (bin/weft-bench.js): the demo runs benchkv as a child, shipped code never imports bench/. */
const WEFT_BENCH = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'bin', 'weft-bench.js');

export interface DemoOptions {
  ranks: number;
  provider: string;
  laps: number;
  blocks: number;
  /** End with a few seconds of benchkv (default true). */
  kv?: boolean;
}

/** Runs the demo job through `weft run`'s launcher (embedded TcpStore); resolves with its exit code. */
export async function runDemo(o: DemoOptions): Promise<number> {
  console.log(`weft demo: weft run -n ${o.ranks} with an embedded TcpStore, provider ${o.provider}, ${availableParallelism()} cores`);
  console.log(`each rank: token ring x${o.laps}, a one-sided READ of its left neighbor, ${o.blocks} x 1 MiB WRITE_IMMs to its right neighbor\n`);
  const t = performance.now();
  const code = await launch({ ranks: o.ranks, script: RANK, args: [String(o.laps), String(o.blocks)], provider: o.provider });
  if (code === 0) console.log(`\ndone in ${((performance.now() - t) / 1000).toFixed(2)} s`);
  if (code !== 0 || o.kv === false) return code;
  return runKvDemo();
}

/** A few seconds of benchkv: 2 ranks, each with 2 daemon and 2 client threads, every backend. */
function runKvDemo(): Promise<number> {
  console.log('\nbenchkv, the distributed KV benchmark: 2 ranks x (2 daemons + 2 clients), QD 4, 50% reads, 1024 keys (weft bench kv --help for more)\n');
  const out = mkdtempSync(path.join(tmpdir(), 'weft-demo-kv-'));
  const args = [WEFT_BENCH, 'kv', '--ranks', '2', '--duration', '1', '--runs', '1', '--warmup', '0.3', '--epochs', '3', '--peers', 'none', '--verify', '--out', out];
  return new Promise((resolve) => {
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'inherit', 'inherit'] });
    child.on('exit', (c) => {
      rmSync(out, { recursive: true, force: true });
      resolve(c ?? 1);
    });
  });
}
