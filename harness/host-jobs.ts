/**
 * Runs one weft job across emulated hosts (harness/emulated-hosts.ts): one `weft run
 * --nnodes K --node-rank R` per host, with the ranks per host given, over a Redis server on
 * host 0 (password in the environment, as in production) or a TcpStore hosted by node 0's
 * launcher (`--master-addr`, with a per-job secret). Collects every launcher's output.
 *
 * @example
 * const hosts = await EmulatedHosts.create(2);
 * const redis = await startRedisOn(hosts, 0);
 * const r = await runOnHosts(hosts, { perHost: [2, 2], script, args: ['matrix'], store: redis });
 */
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ChildProcess } from 'node:child_process';
import type { EmulatedHosts } from './emulated-hosts.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
/** The `weft` command of this checkout. */
export const WEFT = path.join(root, 'bin', 'weft.js');

/** Where a job's ranks meet: a Redis server on a host, or a launcher-hosted TcpStore. */
export type HostStore = { kind: 'redis'; url: string; password: string } | { kind: 'master'; host: number; port: number; secret: string };

/** Starts redis-server on host `i` (bound to that host's address, with a password). */
export async function startRedisOn(hosts: EmulatedHosts, i: number, port = 6379): Promise<HostStore & { kind: 'redis' }> {
  const password = randomBytes(12).toString('hex');
  const addr = hosts.hosts[i].address;
  hosts.spawn(i, 'redis-server', ['--port', String(port), '--bind', addr, '--save', '', '--appendonly', 'no', '--requirepass', password], { stdio: 'ignore' });
  // The host's address is only reachable from inside the emulated network: probe from host i.
  for (let k = 0; k < 100; k++) {
    if (await probeFromHost(hosts, i, addr, port)) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  return { kind: 'redis', url: `redis://${addr}:${port}`, password };
}

function probeFromHost(hosts: EmulatedHosts, i: number, addr: string, port: number): Promise<boolean> {
  const code = `const s=require('net').connect(${port},'${addr}',()=>process.exit(0));s.on('error',()=>process.exit(1))`;
  return new Promise((resolve) => {
    const c = hosts.spawn(i, process.execPath, ['-e', code], { stdio: 'ignore' });
    c.on('exit', (rc) => resolve(rc === 0));
  });
}

export interface HostJob {
  /** Ranks on each host (host i runs perHost[i]; 0 skips the host). */
  perHost: number[];
  script: string;
  args?: string[];
  store: HostStore;
  /** Extra environment for every launcher (and so every rank). */
  env?: Record<string, string>;
  /** Extra environment for the launcher of one host. */
  hostEnv?: Record<number, Record<string, string>>;
  prefix?: string;
  timeoutMs?: number;
  /** Called with each host's launcher as it starts (a test may kill one). */
  onStart?: (host: number, child: ChildProcess) => void;
}

export interface HostJobResult {
  /** Exit code of each host's launcher (null when killed). */
  codes: (number | null)[];
  /** Every launcher's output, host by host. */
  out: string;
  /** Output of each host's launcher. */
  outs: string[];
  ms: number;
}

/** Runs the job on its hosts; resolves when every launcher has exited (or was killed at the timeout). */
export async function runOnHosts(hosts: EmulatedHosts, job: HostJob): Promise<HostJobResult> {
  const used = job.perHost.map((n, i) => [n, i] as const).filter(([n]) => n > 0);
  const nnodes = used.length;
  const prefix = job.prefix ?? `hosts-${randomBytes(4).toString('hex')}`;
  const t0 = performance.now();
  const outs: string[] = job.perHost.map(() => '');
  const codes: (number | null)[] = job.perHost.map(() => null);
  const timeoutMs = job.timeoutMs ?? 300_000;
  await Promise.all(
    used.map(([n, host], nodeRank) => {
      const env: Record<string, string> = { ...(process.env as Record<string, string>), NO_COLOR: '1', ...job.env, ...job.hostEnv?.[host] };
      const args = [WEFT, 'run', '-n', String(n), '--nnodes', String(nnodes), '--node-rank', String(nodeRank), '--prefix', prefix];
      if (job.store.kind === 'redis') {
        env.WEFT_STORE = job.store.url;
        env.WEFT_STORE_PASSWORD = job.store.password;
      } else {
        args.push('--master-addr', hosts.hosts[job.store.host].address, '--master-port', String(job.store.port));
        if (job.store.secret) env.WEFT_STORE_SECRET = job.store.secret;
        else delete env.WEFT_STORE_SECRET;
      }
      Object.assign(env, job.hostEnv?.[host]);
      args.push(job.script, ...(job.args ?? []));
      const child = hosts.spawn(host, process.execPath, args, { env });
      job.onStart?.(host, child);
      child.stdout!.on('data', (d) => (outs[host] += d));
      child.stderr!.on('data', (d) => (outs[host] += d));
      return new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          outs[host] += `\n(test: host ${host} killed after ${timeoutMs} ms)`;
          try {
            process.kill(-(child.pid as number), 'SIGKILL');
          } catch {}
        }, timeoutMs);
        child.on('exit', (code) => {
          clearTimeout(timer);
          codes[host] = code;
          resolve();
        });
      });
    }),
  );
  const out = outs.map((o, i) => `--- host ${i} ---\n${o}`).join('\n');
  return { codes, out, outs, ms: performance.now() - t0 };
}
