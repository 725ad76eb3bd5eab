/**
 * `weft bench rendezvous`: time for N ranks to connect a full mesh, and the store traffic
 * each rank issues, for 2..16 ranks over each store. Round trips per rank should not grow
 * with N (one write of the rank's address blob, one batched read of everybody else's).
 *
 * Usage: node dist/bench/rendezvous/index.js [--ranks 2,4,8,16] [--stores tcp,redis,file] [--redis URL] [--runs 3] [--json]
 */
import { fileURLToPath } from 'node:url';
import { PassThrough } from 'node:stream';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Command } from 'commander';
import { positiveInt } from '../../src/cli/arguments.js';
import { applyQuick, runIfMain } from '../lib/command.js';
import { launch } from '../../src/launch/run.js';
import { median, saveResults, table, type BenchRecord } from '../lib/stats.js';

const RANK = path.join(path.dirname(fileURLToPath(import.meta.url)), 'rank.js');

export interface RendezvousBenchOptions {
  ranks: number[];
  stores: string[];
  redis?: string;
  runs: number;
  json: boolean;
}

interface RankLine {
  rank: number;
  init_ms: number;
  since_launch_ms: number;
  commands: number;
  round_trips: number;
}

async function once(n: number, store: string, redis: string | undefined): Promise<RankLine[]> {
  const out = new PassThrough();
  let text = '';
  out.on('data', (d) => (text += d));
  const err = new PassThrough();
  let errText = '';
  err.on('data', (d) => (errText += d));
  let dir: string | undefined;
  let url: string | undefined;
  if (store === 'redis') url = redis;
  if (store === 'file') url = `file://${(dir = mkdtempSync(path.join(tmpdir(), 'weft-bench-fs-')))}`;
  process.env.WEFT_BENCH_T0 = String(Date.now());
  try {
    const code = await launch({ ranks: n, script: RANK, args: [], store: url, out, err, color: false });
    if (code !== 0) throw new Error(`bench rendezvous: ${n} ranks over ${store} failed: ${errText.slice(-500)}`);
  } finally {
    if (dir) rmSync(dir, { recursive: true, force: true });
  }
  return [...text.matchAll(/BENCH (\{.*\})/g)].map((m) => JSON.parse(m[1]) as RankLine);
}

export async function runRendezvousBench(o: RendezvousBenchOptions): Promise<BenchRecord[]> {
  const records: BenchRecord[] = [];
  for (const store of o.stores) {
    if (store === 'redis' && !o.redis) {
      process.stderr.write('  redis: skipped (pass --redis redis://… or set WEFT_TEST_REDIS_URL)\n');
      continue;
    }
    for (const n of o.ranks) {
      const connect: number[] = [];
      const rtts: number[] = [];
      const cmds: number[] = [];
      for (let r = 0; r < o.runs; r++) {
        const lines = await once(n, store, o.redis);
        connect.push(Math.max(...lines.map((l) => l.since_launch_ms)));
        rtts.push(Math.max(...lines.map((l) => l.round_trips)));
        cmds.push(Math.max(...lines.map((l) => l.commands)));
      }
      const base = { bench: 'rendezvous', provider: store, bytes: 0, ranks: n };
      const recs: BenchRecord[] = [
        { ...base, metric: 'connect_ms', median: median(connect), unit: 'ms', runs: connect },
        { ...base, metric: 'round_trips_per_rank', median: median(rtts), unit: 'round trips', runs: rtts },
        { ...base, metric: 'commands_per_rank', median: median(cmds), unit: 'commands', runs: cmds },
      ];
      for (const r of recs) {
        records.push(r);
        if (o.json) console.log(JSON.stringify(r));
      }
      if (!o.json) process.stderr.write(`  ${store} ${n} ranks: ${median(connect).toFixed(0)} ms, ${median(rtts)} round trips per rank\n`);
    }
  }
  return records;
}

export function rendezvousReport(records: BenchRecord[]): string {
  const keys = [...new Set(records.map((r) => `${r.provider}|${r.ranks}`))];
  const get = (k: string, m: string) => records.find((r) => `${r.provider}|${r.ranks}` === k && r.metric === m)?.median ?? NaN;
  const rows = keys.map((k) => {
    const [store, n] = k.split('|');
    return [store, n, `${get(k, 'connect_ms').toFixed(0)} ms`, String(get(k, 'round_trips_per_rank')), String(get(k, 'commands_per_rank'))];
  });
  return table(['store', 'ranks', 'launch to all connected (median)', 'round trips / rank (max)', 'commands / rank (max)'], rows);
}

export async function benchRendezvous(o: RendezvousBenchOptions): Promise<BenchRecord[]> {
  const records = await runRendezvousBench(o);
  const file = saveResults('rendezvous', records, { date: new Date().toISOString(), node: process.version, runs: o.runs });
  if (!o.json) console.log(rendezvousReport(records));
  process.stderr.write(`results: ${file}\n`);
  return records;
}

/** `weft bench rendezvous`. */
export function rendezvousCommand(): Command {
  return new Command('rendezvous')
    .description('time for 2..16 ranks to connect a full mesh, and store round trips per rank, per store')
    .option('--ranks <list>', 'world sizes', '2,4,8,16')
    .option('--stores <list>', 'stores: tcp, redis, file', 'tcp,redis,file')
    .option('--redis <url>', 'Redis URL for the redis store (default WEFT_TEST_REDIS_URL)', process.env.WEFT_TEST_REDIS_URL)
    .option('--runs <n>', 'runs per point; the median is reported', positiveInt, 3)
    .option('--json', 'print one JSON object per line')
    .option('--quick', 'smoke test: 2 and 4 ranks, one run (options given explicitly win)')
    .action(async (opts: { ranks: string; stores: string; redis?: string; runs: number; json?: boolean; quick?: boolean }, cmd: Command) => {
      const o = applyQuick(opts, cmd, { ranks: '2,4', runs: 1 });
      await benchRendezvous({ ranks: o.ranks.split(',').map(Number), stores: o.stores.split(','), redis: o.redis, runs: o.runs, json: !!o.json });
    });
}

runIfMain(import.meta.url, rendezvousCommand);
