/**
 * The peers a user would pick instead of benchkv's backends, on the same workload and cores:
 * a redis-server the bench starts on a free loopback port, loaded with the same key range,
 *  - driven by ioredis: one process per rank, each with one connection per client thread
 *    keeping `qd` commands in flight (ioredis pipelines what is outstanding on a connection),
 *    the same read ratio, distribution and seed (`system: "redis"`);
 *  - driven by `redis-benchmark` with as many connections and a pipeline of `qd`: Redis's own
 *    ceiling. It cannot mix reads and writes in one run, so GET and SET run separately and the
 *    mix is their harmonic blend at the read ratio (`system: "redis-benchmark"`).
 * Run as a child (`node redis-peer.js drive <json>`) for the ioredis processes.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { freePort } from '../../harness/ports.js';
import { generate, type Distribution } from './workload.js';

export interface RedisWorkload {
  processes: number;
  clients: number;
  qd: number;
  keys: number;
  readRatio: number;
  distribution: Distribution;
  seed: number;
  duration: number;
  warmup: number;
}

export interface RedisResult {
  system: 'redis' | 'redis-benchmark';
  mops: number;
  p50_us: number;
  p99_us: number;
  note?: string;
}

const SELF = fileURLToPath(import.meta.url);

function has(cmd: string): boolean {
  return spawnSync('sh', ['-c', `command -v ${cmd}`]).status === 0;
}

/** Why the Redis peers cannot run here, or undefined. */
export function redisMissing(): string | undefined {
  if (!has('redis-server')) return 'redis-server is not installed (Debian: apt-get install redis-server)';
  return undefined;
}

/** A redis-server of our own: no persistence, loopback only; stopped by `stop()`. */
export async function startRedis(): Promise<{ port: number; stop(): void }> {
  const port = await freePort();
  const child: ChildProcess = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--protected-mode', 'yes'], { stdio: 'ignore' });
  const client = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  client.on('error', () => {}); // refused until the server listens: retried below
  const until = Date.now() + 10_000;
  for (;;) {
    try {
      await client.connect();
      await client.ping();
      break;
    } catch {
      if (Date.now() > until || child.exitCode !== null) {
        child.kill('SIGKILL');
        throw new Error(`redis-server on port ${port} did not start`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  client.disconnect();
  return { port, stop: () => child.kill('SIGTERM') };
}

const keyName = (k: number) => `k:${k}`;

/** SETs every key of the range (value 8 bytes, like benchkv's u64), pipelined. */
export async function loadKeys(port: number, keys: number): Promise<void> {
  const r = new Redis({ port, host: '127.0.0.1' });
  for (let k = 0; k < keys; k += 1000) {
    const p = r.pipeline();
    for (let j = k; j < Math.min(keys, k + 1000); j++) p.set(keyName(j), '00000000');
    await p.exec();
  }
  r.disconnect();
}

/** The ioredis driver, in one child process per rank; ops summed. */
export async function runIoredis(port: number, w: RedisWorkload): Promise<RedisResult> {
  const outs = await Promise.all(
    Array.from({ length: w.processes }, (_, p) => new Promise<{ ops: number; seconds: number; rtts: number[] }>((resolve, reject) => {
      const child = spawn(process.execPath, [SELF, 'drive', JSON.stringify({ ...w, port, index: p })], { stdio: ['ignore', 'pipe', 'inherit'] });
      let out = '';
      child.stdout!.on('data', (d) => (out += d));
      child.on('exit', (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`ioredis driver ${p} exited with ${code}`))));
    })),
  );
  const mops = outs.reduce((a, o) => a + o.ops / o.seconds, 0) / 1e6;
  const rtts = outs.flatMap((o) => o.rtts).sort((a, b) => a - b);
  const q = (x: number) => (rtts.length ? rtts[Math.min(rtts.length - 1, Math.floor(x * rtts.length))] : NaN);
  return { system: 'redis', mops, p50_us: q(0.5), p99_us: q(0.99) };
}

/** redis-benchmark at the same connections and pipeline depth; GET and SET blended at the read ratio. */
export function runRedisBenchmark(port: number, w: RedisWorkload): RedisResult | string {
  if (!has('redis-benchmark')) return 'redis-benchmark is not installed (it comes with redis-tools)';
  const n = Math.max(100_000, Math.round(400_000 * w.duration));
  const rate = (test: string) => {
    const r = spawnSync('redis-benchmark', ['-h', '127.0.0.1', '-p', String(port), '-c', String(w.processes * w.clients), '-P', String(w.qd), '-n', String(n), '-r', String(w.keys), '-d', '8', '-t', test, '--csv'], { encoding: 'utf8', timeout: 300_000 });
    // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
    const line = r.stdout.split('\n').find((l) => l.toUpperCase().startsWith(`"${test.toUpperCase()}"`));
    if (!line) throw new Error(`redis-benchmark -t ${test} printed no result: ${r.stderr || r.stdout}`);
    const f = line.split(',').map((x) => Number(x.replace(/"/g, '')));
    return { rps: f[1], p50: f[4] * 1000, p99: f[6] * 1000 };
  };
  const get = rate('get');
  const set = rate('set');
  const mix = 1 / (w.readRatio / get.rps + (1 - w.readRatio) / set.rps);
  return {
    system: 'redis-benchmark',
    mops: mix / 1e6,
    p50_us: w.readRatio * get.p50 + (1 - w.readRatio) * set.p50,
    p99_us: Math.max(get.p99, set.p99),
    note: 'uniform keys only; GET and SET measured apart and blended at the read ratio',
  };
}

// ---- the ioredis driver process --------------------------------------------------------
async function drive(spec: RedisWorkload & { port: number; index: number }): Promise<void> {
  const conns = Array.from({ length: spec.clients }, () => new Redis({ port: spec.port, host: '127.0.0.1' }));
  await Promise.all(conns.map((c) => c.ping()));
  let ops = 0;
  let measuring = false;
  let stop = false;
  const rtts: number[] = [];
  const loops = conns.map(async (c, ci) => {
    const wl = generate({ keys: spec.keys, readRatio: spec.readRatio, distribution: spec.distribution, ranks: 1, rank: 0, seed: (spec.seed * 7919 + (spec.index * spec.clients + ci) * 104729) >>> 0, length: 1 << 16 });
    let pos = 0;
    const lane = async () => {
      for (let n = 0; !stop; n++) {
        const i = pos;
        pos = (pos + 1) & 0xffff;
        const t = n % 8 === 0 ? performance.now() : 0;
        if (wl.read[i]) await c.get(keyName(wl.key[i]));
        else await c.set(keyName(wl.key[i]), '00000000');
        if (measuring) {
          ops++;
          if (t > 0 && rtts.length < 200_000) rtts.push((performance.now() - t) * 1000);
        }
      }
    };
    await Promise.all(Array.from({ length: spec.qd }, lane));
  });
  await new Promise((r) => setTimeout(r, spec.warmup * 1000));
  measuring = true;
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, spec.duration * 1000));
  measuring = false;
  const seconds = (performance.now() - t0) / 1000;
  stop = true;
  await Promise.all(loops);
  for (const c of conns) c.disconnect();
  process.stdout.write(JSON.stringify({ ops, seconds, rtts }));
}

if (process.argv[1] === SELF && process.argv[2] === 'drive') {
  drive(JSON.parse(process.argv[3])).catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
