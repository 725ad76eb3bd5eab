/**
 * `weft bench kv`: the distributed KV benchmark of the design notes (docs/benchkv.md). Each
 * backend runs as its own job (fresh rank processes started like `weft run`), then the Redis
 * peers on the same workload; prints a table, writes JSON, CSV and SVG.
 *
 * One host:     weft bench kv --ranks 2 --daemons 2 --clients 2 --qd 4
 * Several hosts (on each host R of K, the same arguments):
 *               weft bench kv --ranks 2 --nnodes K --node-rank R --store redis://host0:6379
 */
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { Command, InvalidArgumentError, Option } from 'commander';
import { fabricStatus } from 'weftjs';
import { createPollController, POLL_CONTROLLER_SPECS } from 'weftjs/rpc';
import { integerAtLeast, runIfMain } from '../lib/command.js';
import { resultsDir } from '../lib/stats.js';
import { RESULT_PREFIX, WARMUP_EXTRA_MAX_S, type RankPlan, type RankResult } from './result.js';
import { formatTable, median, plotKv, toCsv, type KvRow, type KvSeries } from './report.js';
import { loadKeys, redisMissing, runIoredis, runRedisBenchmark, startRedis, type RedisWorkload } from './redis-peer.js';
import { BACKENDS, type Backend } from './topology.js';
import type { KvShape } from './config.js';
import { ZIPF_MAX_KEYS, type Distribution } from './workload.js';

/** Ctrl-C: the running job is stopped (weft run stops its ranks and sweeps their segments), nothing else starts. */
let interrupted = false;

const HERE = path.dirname(fileURLToPath(import.meta.url));
const RANK = path.join(HERE, 'rank.js');
const WEFT = path.resolve(HERE, '../../../bin/weft.js');

export interface KvOptions extends KvShape {
  ranks: number;
  nnodes: number;
  nodeRank: number;
  store?: string;
  prefix?: string;
  backends: Backend[];
  workload?: 'A' | 'B' | 'C';
  duration: number;
  warmup: number;
  settle: number;
  runs: number;
  epochs: number;
  peers: string[];
  pollController: string;
  pollBudget?: number;
  quick: boolean;
  json: boolean;
  out?: string;
  ringBytes: number;
  timeoutMs: number;
  bind: boolean;
  provider: 'auto' | 'ofi';
}

const int = integerAtLeast;
const seconds = (v: string) => {
  const n = Number(v);
  if (!(n > 0)) throw new InvalidArgumentError('a positive number of seconds');
  return n;
};
const nonNegativeSeconds = (v: string) => {
  const n = Number(v);
  if (!(n >= 0)) throw new InvalidArgumentError('a number of seconds >= 0');
  return n;
};
const pollControllerSpec = (v: string) => {
  try {
    return createPollController(v).spec;
  } catch {
    throw new InvalidArgumentError(POLL_CONTROLLER_SPECS);
  }
};
const ratio = (v: string) => {
  const n = Number(v);
  if (!(n >= 0 && n <= 1)) throw new InvalidArgumentError('a number in [0, 1]');
  return n;
};

export function parseDistribution(v: string): Distribution {
  if (v === 'uniform') return { kind: 'uniform' };
  const m = /^zipf(?:ian)?(?::([0-9.]+))?$/.exec(v);
  if (!m) throw new InvalidArgumentError("'uniform', 'zipfian' or 'zipfian:<theta>' (theta > 0, e.g. 0.99 as YCSB, 1.0 as the notes)");
  const theta = m[1] === undefined ? 0.99 : Number(m[1]);
  if (!(theta > 0 && theta < 10)) throw new InvalidArgumentError('zipfian theta must be > 0');
  return { kind: 'zipfian', theta };
}

function describeDistribution(d: Distribution): string {
  return d.kind === 'uniform' ? 'uniform' : `zipfian:${d.theta}`;
}

/** YCSB's core workloads: read share and zipfian keys (theta 0.99). */
const YCSB: Record<string, { readRatio: number }> = { A: { readRatio: 0.5 }, B: { readRatio: 0.95 }, C: { readRatio: 1 } };

export function kvCommand(): Command {
  return new Command('kv')
    .description('benchkv: the distributed KV benchmark of the design notes (meta, delegation, direct backends) against Redis in the same run')
    .option('--ranks <n>', 'ranks on this host', int(1), 2)
    .option('--nnodes <k>', 'hosts in the job (run the command on each, with --node-rank and --store)', int(1), 1)
    .option('--node-rank <r>', "this host's index in [0, nnodes)", int(0), 0)
    .option('--store <url>', 'store every host reaches (several hosts; also WEFT_STORE)')
    .option('--prefix <p>', 'job namespace in the store (several hosts: the same on every host)')
    .option('--backends <list>', 'meta,delegation,direct', (v) => v.split(',').map((b) => {
      if (!BACKENDS.includes(b as Backend)) throw new InvalidArgumentError(`backends are ${BACKENDS.join(', ')}`);
      return b as Backend;
    }), [...BACKENDS])
    .option('--daemons <k>', 'daemon threads per rank (key shards)', int(1), 2)
    .option('--clients <c>', 'client threads per rank', int(1), 2)
    .option('--qd <n>', 'requests in flight per client', int(1), 4)
    .option('--keys <n>', 'key range [0, n)', int(1), 1024)
    .option('--read-ratio <r>', 'share of gets', ratio, 0.5)
    .option('--distribution <d>', 'uniform | zipfian[:theta]', parseDistribution, { kind: 'uniform' } as Distribution)
    .addOption(new Option('--workload <w>', 'YCSB preset: A (50% reads), B (95%), C (100%), zipfian 0.99 keys').choices(['A', 'B', 'C']))
    .option('--locality <p>', 'probability that a request targets its own rank (default: uniform over ranks)', ratio)
    .option('--duration <s>', 'seconds per run', seconds, 3)
    .option('--warmup <s>', 'seconds of warm-up at least; it goes on (up to --settle s more) until the throughput is steady', seconds, 1)
    .option('--settle <s>', 'seconds the warm-up may go on past --warmup until the throughput is steady (0: exactly --warmup, e.g. for a --verify run)', nonNegativeSeconds, WARMUP_EXTRA_MAX_S)
    .option('--runs <n>', 'runs per backend (the median is reported)', int(1), 3)
    .option('--epochs <n>', 'epochs per run; the fastest and slowest are trimmed', int(1), 5)
    .option('--peers <list>', "'redis,redis-benchmark' or 'none'", (v) => (v === 'none' ? [] : v.split(',')), ['redis', 'redis-benchmark'])
    .option('--poll-budget <n>', "the notes' fixed poll budget: each daemon loop polls until N responses came in or it polled N times (same as --poll-controller fixed:N)", int(0))
    .option('--poll-controller <c>', `the daemon loops' poll control: ${POLL_CONTROLLER_SPECS} (docs/bistability.md)`, pollControllerSpec, 'none')
    .option('--verify', 'partition keys per client and check every get against its last completed put', false)
    .option('--quick', 'a short run: 1 s, 1 run, 3 epochs, --warmup 0.3 (options given explicitly win)', false)
    .option('--json', 'print one JSON object per line instead of the table', false)
    .option('--out <dir>', 'where JSON, CSV and SVG go (default bench/results or WEFT_BENCH_OUT)')
    .option('--seed <n>', 'workload seed', int(0), 1)
    .option('--ring-bytes <n>', 'copyrpc ring bytes per endpoint', int(1024), 1 << 18)
    .option('--timeout-ms <ms>', 'bound of set-up, drain and every barrier', int(1000), 60_000)
    .option('--no-bind', 'do not pin ranks to cores (WEFT_BIND=none)')
    .addOption(new Option('--provider <p>', "copyrpc between ranks: 'auto' (shared memory inside a host, libfabric between hosts) or 'ofi' (libfabric between every pair of ranks, also on one host: the cost of the fabric path without a second host; also WEFT_PROVIDER=ofi or ofi:<fabric>)").choices(['auto', 'ofi']).default(process.env.WEFT_PROVIDER?.startsWith('ofi') ? 'ofi' : 'auto'))
    .action(async (o: KvOptions, cmd: Command) => {
      if (o.quick) {
        for (const [k, v] of Object.entries({ duration: 1, runs: 1, warmup: 0.3, epochs: 3 })) {
          if (cmd.getOptionValueSource(k) === 'default') (o as unknown as Record<string, unknown>)[k] = v;
        }
      }
      if (o.pollBudget !== undefined) {
        if (cmd.getOptionValueSource('pollController') === 'cli' && o.pollController !== `fixed:${o.pollBudget}`) throw new Error(`weft bench kv: --poll-budget ${o.pollBudget} and --poll-controller ${o.pollController} disagree; give one`);
        o.pollController = `fixed:${o.pollBudget}`;
      }
      if (o.workload) {
        o.readRatio = YCSB[o.workload].readRatio;
        if (cmd.getOptionValueSource('distribution') === 'default') o.distribution = { kind: 'zipfian', theta: 0.99 };
      }
      const code = await runKv(o);
      process.exitCode = code;
    });
}

function check(o: KvOptions): void {
  if (o.nodeRank >= o.nnodes) throw new Error(`--node-rank ${o.nodeRank} is outside [0, ${o.nnodes})`);
  if (o.nnodes > 1 && !(o.store ?? process.env.WEFT_STORE)) throw new Error('several hosts need --store URL (or WEFT_STORE): a store every host reaches');
  if (o.provider === 'ofi' || o.nnodes > 1) {
    // Checked here, once: each rank would otherwise fail in init with the provider's error.
    const f = fabricStatus();
    const why = o.provider === 'ofi' ? '--provider ofi' : 'a run across hosts';
    if (!f.available) throw new Error(`${why} needs libfabric, which this build of weft cannot use: ${f.reason}; install libfabric-dev (Debian) and rebuild (npm rebuild weftjs --build-from-source), or run on one host with --provider auto`);
  }
  if (o.keys > 2 ** 32) throw new Error('--keys: keys are u32 on the wire here (at most 2^32)');
  if (o.distribution.kind === 'zipfian' && o.keys > ZIPF_MAX_KEYS) throw new Error(`--keys: zipfian keys are tabulated, at most ${ZIPF_MAX_KEYS}`);
  for (const p of o.peers) if (p !== 'redis' && p !== 'redis-benchmark') throw new Error(`--peers: unknown peer ${p} (redis, redis-benchmark, or none)`);
  if (o.verify && o.keys < o.ranks * o.nnodes * o.clients) throw new Error('--verify partitions keys per client: --keys must be at least ranks x clients');
}

/** Runs one backend as a job; resolves with rank 0's result (undefined on hosts other than node 0). */
function runBackend(o: KvOptions, backend: Backend, onLine: (line: string) => void): Promise<RankResult | undefined> {
  const plan: RankPlan = {
    backend,
    daemons: o.daemons,
    clients: o.clients,
    qd: o.qd,
    keys: o.keys,
    readRatio: o.readRatio,
    distribution: o.distribution,
    locality: o.locality,
    seed: o.seed,
    verify: o.verify,
    pollController: o.pollController,
    ringBytes: o.ringBytes,
    provider: o.provider === 'ofi' ? 'ofi' : 'shm',
    patternLength: 1 << 16,
    timeoutMs: o.timeoutMs,
    duration: o.duration,
    warmup: o.warmup,
    settle: o.settle,
    runs: o.runs,
    epochs: o.epochs,
  };
  const args = [WEFT, 'run', '-n', String(o.ranks)];
  if (o.nnodes > 1) args.push('--nnodes', String(o.nnodes), '--node-rank', String(o.nodeRank), '--prefix', `${o.prefix ?? 'benchkv'}-${backend}`);
  else args.push('--prefix', `${o.prefix ?? 'benchkv'}-${backend}-${randomBytes(3).toString('hex')}`);
  if (o.store) args.push('--store', o.store);
  args.push(RANK, JSON.stringify(plan));
  const env: NodeJS.ProcessEnv = { ...process.env, WEFT_JOB: `kv${backend.slice(0, 3)}${process.pid}` };
  if (!o.bind) env.WEFT_BIND = 'none';
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { env, stdio: ['ignore', 'pipe', 'inherit'] });
    let result: RankResult | undefined;
    let buf = '';
    child.stdout.on('data', (d: Buffer) => {
      buf += d.toString();
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        const at = line.indexOf(RESULT_PREFIX);
        if (at >= 0) result = JSON.parse(line.slice(at + RESULT_PREFIX.length)) as RankResult;
        else onLine(line);
      }
    });
    const stop = () => {
      interrupted = true;
      child.kill('SIGINT');
    };
    process.once('SIGINT', stop);
    child.on('exit', (code, signal) => {
      process.off('SIGINT', stop);
      if (code === 0) resolve(result);
      else reject(new Error(`benchkv ${backend}: the job failed (${signal ?? `exit code ${code}`}); see the ranks' messages above`));
    });
  });
}

function rowOf(o: KvOptions, r: RankResult): KvRow {
  const mops = median(r.runsMops);
  return {
    bench: 'kv',
    system: r.backend,
    ranks: r.ranks,
    hosts: r.hosts,
    fabric: r.fabric,
    daemons: o.daemons,
    clients: o.clients,
    qd: o.qd,
    read_ratio: o.readRatio,
    distribution: describeDistribution(o.distribution),
    locality: o.locality ?? null,
    poll_controller: r.backend === 'direct' ? 'n/a (no daemon on the path)' : r.poll_controller,
    poll_setting_avg: r.backend === 'direct' ? null : r.poll_setting_avg,
    mops,
    mops_runs: r.runsMops,
    mops_per_rank: mops / r.ranks,
    per_rank_mops: r.perRankMops,
    p50_us: r.p50_us,
    p90_us: r.p90_us,
    p99_us: r.p99_us,
    p999_us: r.p999_us,
    outstanding_avg: r.outstanding_avg,
    cqe_batch_avg: r.cqe_batch_avg,
    cqe_hist: r.cqe_hist,
    loops_per_s_per_daemon: r.loops_per_s_per_daemon,
    yields_per_request: r.yields_per_request,
    local_share: r.local_share,
    mismatches: o.verify ? r.mismatches : null,
    threads_per_host: r.threads,
    cores: r.cores,
    oversubscribed: r.oversubscribed,
    warmup_s: Math.round(r.warmup_s * 100) / 100,
    warmup_steady: r.warmup_steady,
  };
}

function peerRow(o: KvOptions, system: string, mops: number, p50: number, p99: number, note?: string): KvRow {
  const ranks = o.ranks * o.nnodes;
  return {
    bench: 'kv', system, ranks, hosts: 1, fabric: 'tcp (loopback)', daemons: o.daemons, clients: o.clients, qd: o.qd, read_ratio: o.readRatio,
    distribution: describeDistribution(o.distribution), locality: null, poll_controller: null, poll_setting_avg: null, mops, mops_runs: [mops], mops_per_rank: mops / ranks,
    per_rank_mops: [], p50_us: p50, p90_us: null, p99_us: p99, p999_us: null, outstanding_avg: null, cqe_batch_avg: null, cqe_hist: null,
    loops_per_s_per_daemon: null, yields_per_request: null, local_share: null, mismatches: null, threads_per_host: null, cores: cpus().length, oversubscribed: null, warmup_s: o.warmup, warmup_steady: null, ...(note ? { note } : {}),
  };
}

const FABRIC_WORDS = "shm: shared memory; ofi: libfabric; shm+ofi: shared memory inside a host, libfabric between hosts";

/** Progress on a terminal: which configuration runs and for how long. */
function progress(label: string, expectS: number): () => void {
  if (!process.stderr.isTTY) return () => {};
  const t0 = Date.now();
  const tick = () => process.stderr.write(`\r\x1b[K${label}: ${((Date.now() - t0) / 1000).toFixed(0)} s of about ${expectS.toFixed(0)} s`);
  tick();
  const timer = setInterval(tick, 1000);
  return () => {
    clearInterval(timer);
    process.stderr.write('\r\x1b[K');
  };
}

export async function runKv(o: KvOptions): Promise<number> {
  check(o);
  const rows: KvRow[] = [];
  const series: KvSeries[] = [];
  const emit = (row: KvRow) => {
    rows.push(row);
    if (o.json) console.log(JSON.stringify(row));
  };
  // The warm-up goes past --warmup until steady: about a second more, typically.
  const perBackend = o.warmup + Math.min(1, o.settle) + o.runs * o.duration + 2;
  let failed = 0;
  for (const backend of o.backends) {
    if (interrupted) break;
    const done = progress(`benchkv ${backend}`, perBackend);
    try {
      const r = await runBackend(o, backend, (line) => console.error(line));
      done();
      if (r) {
        emit(rowOf(o, r));
        series.push({ system: backend, controller: backend === 'direct' ? 'n/a' : r.poll_controller, series: r.series });
        if (!o.json) console.error(`${backend}: ${median(r.runsMops).toFixed(2)} Mops`);
      }
    } catch (err) {
      done();
      console.error((err as Error).message);
      failed++;
    }
  }
  if (interrupted) {
    console.error('benchkv: interrupted');
    return 130;
  }
  if (o.nodeRank !== 0) return failed ? 1 : 0;

  if (o.peers.length > 0) {
    const missing = redisMissing();
    if (missing) console.error(`redis peers skipped: ${missing}`);
    else {
      const redis = await startRedis();
      try {
        await loadKeys(redis.port, o.keys);
        const w: RedisWorkload = { processes: o.ranks * o.nnodes, clients: o.clients, qd: o.qd, keys: o.keys, readRatio: o.readRatio, distribution: o.distribution, seed: o.seed, duration: o.duration, warmup: o.warmup };
        if (o.peers.includes('redis')) {
          const runs: number[] = [];
          let last;
          for (let i = 0; i < o.runs; i++) {
            const done = progress(`redis (ioredis) run ${i + 1}`, o.warmup + o.duration + 1);
            last = await runIoredis(redis.port, w).finally(done);
            runs.push(last.mops);
          }
          const row = peerRow(o, 'redis', median(runs), last!.p50_us, last!.p99_us);
          row.mops_runs = runs;
          emit(row);
        }
        if (o.peers.includes('redis-benchmark')) {
          if (o.distribution.kind !== 'uniform') console.error('redis-benchmark: it draws keys uniformly (-r); the row is its uniform ceiling');
          const done = progress('redis-benchmark', 2 * o.duration + 2);
          const r = runRedisBenchmark(redis.port, w);
          done();
          if (typeof r === 'string') console.error(`redis-benchmark skipped: ${r}`);
          else emit(peerRow(o, 'redis-benchmark', r.mops, r.p50_us, r.p99_us, r.note));
        }
      } finally {
        redis.stop();
      }
    }
  }

  if (!o.json) {
    console.log(formatTable(rows));
    const fabrics = [...new Set(rows.filter((r) => r.system !== 'redis' && r.system !== 'redis-benchmark').map((r) => r.fabric))];
    if (fabrics.length) console.log(`copyrpc between ranks over ${fabrics.join(', ')} (${FABRIC_WORDS})`);
    const over = rows.find((r) => r.oversubscribed);
    if (over) console.log(`note: ${over.threads_per_host} busy threads per host on ${over.cores} cores (oversubscribed): idle passes yield the core at once instead of spinning`);
    const warm = rows.filter((r) => r.warmup_steady !== null);
    if (warm.length) console.log(`warm-up: ${warm.map((r) => `${r.system} ${r.warmup_s!.toFixed(1)} s`).join(', ')} (--warmup ${o.warmup} s, then until the throughput was steady)`);
    const unsettled = warm.filter((r) => r.warmup_steady === false).map((r) => r.system);
    if (unsettled.length) console.log(`note: the throughput of ${unsettled.join(', ')} had not settled ${o.settle} s past --warmup (--settle); its runs started anyway and may be low`);
  }
  const dir = o.out ? path.resolve(o.out) : resultsDir();
  mkdirSync(dir, { recursive: true });
  const stamp = `kv-${new Date().toISOString().replace(/[:.]/g, '-')}`;
  const meta = { date: new Date().toISOString(), cores: cpus().length, options: { ...o, distribution: describeDistribution(o.distribution) } };
  const jsonFile = path.join(dir, `${stamp}.json`);
  writeFileSync(jsonFile, JSON.stringify({ meta, rows, series }, null, 2));
  writeFileSync(path.join(dir, `${stamp}.csv`), toCsv(rows));
  process.stderr.write(`results: ${jsonFile} (and .csv)\n`);
  try {
    const plots = await plotKv(rows, series, path.join(dir, stamp));
    process.stderr.write(`plots: ${plots.join(', ')}\n`);
  } catch (err) {
    process.stderr.write(`plots skipped (${(err as Error).message.split('\n')[0]})\n`);
  }
  if (o.verify) {
    const bad = rows.filter((r) => (r.mismatches ?? 0) > 0);
    if (bad.length) failed++;
  }
  return failed ? 1 : 0;
}

runIfMain(import.meta.url, kvCommand);
