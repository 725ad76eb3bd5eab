/**
 * weft's side of `weft bench collectives`: one job of np ranks (bench/collectives/rank.ts)
 * under launch(), the same launcher as `weft run`, with an embedded TcpStore; rank 0's
 * `WEFT_ROW` lines become rows, streamed to `onRow` as they arrive.
 */
import { PassThrough } from 'node:stream';
import { createInterface } from 'node:readline';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { launch } from '../../src/launch/run.js';
import { withBandwidth, type CollectiveResult, type CollectiveRow } from './metrics.js';
import { ROW_PREFIX, type RankPlan } from './plan.js';

const RANK_SCRIPT = path.join(path.dirname(fileURLToPath(import.meta.url)), 'rank.js');

/** A rank plan (timeout optional) and how many ranks run it. */
export interface WeftRunOptions extends Omit<RankPlan, 'timeoutMs' | 'provider'> {
  np: number;
  /** WEFT_PROVIDER: 'shm', 'ofi', 'ofi:tcp', ... (rows name it with providerLabel). */
  provider: string;
  /** Per collective call inside the ranks (default 60 s). */
  timeoutMs?: number;
}

/** The provider as rows name it: 'ofi' is spelled out as the fabric it picks ('ofi:tcp'). */
export function providerLabel(provider: string): string {
  if (provider !== 'ofi') return provider;
  return process.env.FI_PROVIDER ? `ofi:${process.env.FI_PROVIDER}` : 'ofi:tcp';
}

/** Runs the sweep on np weft ranks; rejects with the ranks' stderr tail when the job fails. */
export async function runWeft(o: WeftRunOptions, onRow?: (r: CollectiveResult) => void): Promise<CollectiveResult[]> {
  const { np, provider, timeoutMs, ...rest } = o;
  const plan: RankPlan = { ...rest, provider: providerLabel(provider), timeoutMs: timeoutMs ?? 60_000 };
  const out = new PassThrough();
  const err = new PassThrough();
  const rows: CollectiveResult[] = [];
  const other: string[] = [];
  let errTail = '';
  err.on('data', (d: Buffer) => (errTail = (errTail + d.toString()).slice(-4000)));
  // launch() prefixes every line with "[rank R] "; rank 0 alone prints rows.
  const lines = createInterface({ input: out });
  lines.on('line', (line) => {
    const at = line.indexOf(ROW_PREFIX);
    if (at < 0) return void other.push(line);
    const row = withBandwidth(JSON.parse(line.slice(at + ROW_PREFIX.length)) as CollectiveRow);
    rows.push(row);
    onRow?.(row);
  });
  const closed = new Promise<void>((resolve) => lines.once('close', resolve));
  const code = await launch({ ranks: np, script: RANK_SCRIPT, args: [JSON.stringify(plan)], provider, out, err, color: false });
  out.end();
  err.end();
  await closed;
  if (code !== 0) {
    const stdout = other.slice(-10).join('\n');
    throw new Error(`weft np=${np} over ${plan.provider} failed (exit ${code}) after ${rows.length} rows:\n${errTail.trim()}${stdout ? `\n${stdout}` : ''}`);
  }
  return rows;
}
