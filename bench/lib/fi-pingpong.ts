/**
 * Plain libfabric, measured in the same run: libfabric's own `fi_pingpong` (Debian's
 * libfabric-bin), C code on the same providers, as the reference the ofi provider's JS path
 * is compared with. It sends messages (not RMA), one in flight: its round trip is twice its
 * "usec/xfer", and its MB/sec is a ping-pong rate, not a stream.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { sweepProcessSegments } from '../../src/nic/index.js';
import { freePort } from '../../harness/ports.js';

export interface FiPingPong {
  provider: string;
  bytes: number;
  rttUs: number;
  gbps: number;
}

export function haveFiPingPong(): boolean {
  return spawnSync('sh', ['-c', 'command -v fi_pingpong']).status === 0;
}

/**
 * Ends the server: SIGTERM (libfabric unlinks its shm regions on a caught signal), SIGKILL if
 * it is still there after a second, then removes whatever regions a killed server left (16 MiB
 * each: `weft bench nic` left ten per run when it only sent SIGKILL).
 */
async function stop(server: ChildProcess): Promise<void> {
  if (server.exitCode === null && server.signalCode === null) {
    const exited = new Promise<void>((r) => server.once('exit', () => r()));
    server.kill('SIGTERM');
    const t = setTimeout(() => server.kill('SIGKILL'), 1000);
    await exited;
    clearTimeout(t);
  }
  if (server.pid) sweepProcessSegments(server.pid);
}

/** One fi_pingpong run (server and client on this host); undefined when it fails. */
export async function fiPingPong(provider: string, bytes: number, iterations: number): Promise<FiPingPong | undefined> {
  const port = await freePort();
  const common = ['-p', provider, '-e', 'rdm', '-I', String(iterations), '-S', String(bytes)];
  const server = spawn('fi_pingpong', [...common, '-B', String(port)], { stdio: 'ignore' });
  await new Promise((r) => setTimeout(r, 300));
  const out = await new Promise<string>((resolve) => {
    const client = spawn('fi_pingpong', [...common, '-P', String(port), '127.0.0.1'], { stdio: ['ignore', 'pipe', 'ignore'] });
    let text = '';
    client.stdout.on('data', (d) => (text += d));
    const t = setTimeout(() => client.kill('SIGKILL'), 60_000);
    client.on('exit', () => {
      clearTimeout(t);
      if (client.pid) sweepProcessSegments(client.pid);
      resolve(text);
    });
  });
  await stop(server);
  // bytes  #sent  #ack  total  time  MB/sec  usec/xfer  Mxfers/sec
  const line = out.split('\n').find((l) => /^\s*\d/.test(l) && l.includes('='));
  if (!line) return undefined;
  const f = line.trim().split(/\s+/);
  const mbps = Number(f[5]);
  const usec = Number(f[6]);
  if (!Number.isFinite(usec)) return undefined;
  return { provider, bytes, rttUs: 2 * usec, gbps: mbps / 1000 };
}
