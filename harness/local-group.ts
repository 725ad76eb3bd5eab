/**
 * A local process group: the parent forks N real worker processes, relays their QP addresses
 * and region descriptors over the IPC channel (standing in for a rendezvous store), and
 * collects one result from each. Workers call `joinMesh` to get connected QPs toward every
 * other rank. Used by the NIC benchmarks and the conformance tests (which need no store).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { createDevice, sweepProcessSegments, type Device, type MemoryRegion, type QueuePair, type RemoteRegion, type DeviceOptions } from '../src/nic/index.js';


type Msg = { type: 'addr'; rank: number; addrs: Record<number, string>; descs: string[] } | { type: 'connected'; rank: number } | { type: 'result'; rank: number; result: unknown } | { type: 'event'; rank: number; event: string; data?: unknown } | { type: 'error'; rank: number; message: string };

export interface ScenarioRun {
  results: unknown[];
  children: ChildProcess[];
}

export interface RunOptions {
  n: number;
  provider: string;
  args?: Record<string, unknown>;
  timeoutMs?: number;
  /** Called on worker events (e.g. to SIGKILL a worker when it says so). */
  onEvent?: (rank: number, event: string, children: ChildProcess[], data?: unknown) => void;
  /** Ranks expected to die (their missing result is not an error). */
  mayDie?: number[];
  /** Worker script, run as `node worker <scenario> <rank> <n> <provider> <json args>`. */
  worker: string;
}

/** Runs `scenario` in N worker processes and returns each rank's result. */
export function runScenario(scenario: string, opts: RunOptions): Promise<ScenarioRun> {
  const { n } = opts;
  const timeoutMs = opts.timeoutMs ?? 60_000;
  const job = `t${process.pid}x${Math.floor(Math.random() * 1e6)}`;
  return new Promise((resolve, reject) => {
    const children: ChildProcess[] = [];
    const addrs: Msg[] = [];
    const results: unknown[] = new Array(n).fill(undefined);
    let done = 0;
    let finished = false;
    const stderr: string[] = new Array(n).fill('');
    const finish = (err?: Error) => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      if (err) {
        for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
        reject(err);
        return;
      }
      // Let released workers close their devices and exit; kill stragglers.
      const exited = children.map((c) => (c.exitCode !== null || c.signalCode !== null ? Promise.resolve() : new Promise<void>((r) => c.once('exit', () => r()))));
      const grace = setTimeout(() => children.forEach((c) => c.exitCode === null && c.signalCode === null && c.kill('SIGKILL')), 5000);
      void Promise.all(exited).then(() => {
        clearTimeout(grace);
        resolve({ results, children });
      });
    };
    const timer = setTimeout(() => finish(new Error(`scenario ${scenario} (${opts.provider}) timed out after ${timeoutMs} ms; results so far: ${JSON.stringify(results)}; stderr: ${stderr.join(' | ')}`)), timeoutMs);
    let connected = 0;
    const maybeDone = () => {
      if (done === n) finish();
    };
    for (let rank = 0; rank < n; rank++) {
      const child = fork(opts.worker, [scenario, String(rank), String(n), opts.provider, JSON.stringify(opts.args ?? {})], {
        stdio: ['ignore', 'inherit', 'pipe', 'ipc'],
        env: { ...process.env, WEFT_JOB: job },
      });
      child.stderr?.on('data', (d: Buffer) => {
        stderr[rank] += d.toString();
      });
      children.push(child);
      // A worker that exits without closing its device (the NIC benchmark's do) leaves its
      // libfabric shm region behind: removed as each one exits.
      child.once('exit', () => child.pid && sweepProcessSegments(child.pid));
      child.on('message', (m: Msg) => {
        if (m.type === 'addr') {
          addrs.push(m);
          if (addrs.length === n) for (const c of children) c.send({ type: 'peers', table: addrs });
        } else if (m.type === 'connected') {
          if (++connected === n) for (const c of children) c.send({ type: 'all-connected' });
        } else if (m.type === 'result') {
          results[m.rank] = m.result;
          done++;
          maybeDone();
          // Workers stay up until every rank reported, so nobody tears down memory a peer still uses.
          if (done === n) for (const c of children) if (c.connected) c.send({ type: 'release' });
        } else if (m.type === 'event') {
          opts.onEvent?.(m.rank, m.event, children, m.data);
        } else if (m.type === 'error') {
          finish(new Error(`rank ${m.rank} failed in ${scenario} (${opts.provider}): ${m.message}`));
        }
      });
      child.on('exit', (code, signal) => {
        if (results[rank] !== undefined || finished) return;
        if (code === 0 && signal === null && done === n) return;
        if (opts.mayDie?.includes(rank)) {
          results[rank] = { died: signal ?? code };
          done++;
          maybeDone();
          return;
        }
        finish(new Error(`rank ${rank} exited (${signal ?? code}) without a result in ${scenario} (${opts.provider}); stderr: ${stderr[rank]}`));
      });
    }
  });
}

/** What a worker gets from joinMesh. */
export interface Mesh {
  device: Device;
  rank: number;
  n: number;
  /** Local regions, one per `sizes` entry. */
  mrs: MemoryRegion[];
  /** qps[peer] (undefined at own rank). */
  qps: (QueuePair | undefined)[];
  /** remotes[peer][i]: the peer's region i. */
  remotes: RemoteRegion[][];
  /** Raw descriptors, remoteDescs[peer][i] (for tests that tamper with them). */
  remoteDescs: Uint8Array[][];
  qpOf(qpn: number): number;
}

/** In a worker: creates a device, regions and QPs to every peer, and connects them. */
export async function joinMesh(rank: number, n: number, provider: string, sizes: number[], options: Partial<DeviceOptions> & { recvCredits?: number } = {}): Promise<Mesh> {
  const device = await createDevice({ provider, label: `rank ${rank}`, ...options });
  const mrs = sizes.map((s) => device.allocate(s));
  const qps: (QueuePair | undefined)[] = [];
  const addrs: Record<number, string> = {};
  for (let p = 0; p < n; p++) {
    if (p === rank) {
      qps.push(undefined);
      continue;
    }
    const qp = device.createQueuePair({ peerLabel: `rank ${p}`, recvCredits: options.recvCredits });
    qps.push(qp);
    addrs[p] = Buffer.from(qp.address()).toString('base64');
  }
  const table = await new Promise<Extract<Msg, { type: 'addr' }>[]>((resolve) => {
    process.on('message', (m: { type: string; table: Extract<Msg, { type: 'addr' }>[] }) => {
      if (m.type === 'peers') resolve(m.table);
    });
    process.send!({ type: 'addr', rank, addrs, descs: mrs.map((m) => Buffer.from(m.descriptor()).toString('base64')) });
  });
  const remotes: RemoteRegion[][] = [];
  const remoteDescs: Uint8Array[][] = [];
  const byRank = new Map(table.map((e) => [e.rank, e]));
  for (let p = 0; p < n; p++) {
    if (p === rank) {
      remotes.push([]);
      remoteDescs.push([]);
      continue;
    }
    const e = byRank.get(p)!;
    const qp = qps[p]!;
    qp.connect(new Uint8Array(Buffer.from(e.addrs[rank], 'base64')));
    const descs = e.descs.map((d) => new Uint8Array(Buffer.from(d, 'base64')));
    remoteDescs.push(descs);
    remotes.push(descs.map((d) => qp.importRegion(d)));
  }
  // Return only once every rank has mapped every peer: a rank that dies right after (a test
  // that kills it) must not take its segments from a peer still connecting.
  await new Promise<void>((resolve) => {
    const onMsg = (m: { type: string }) => {
      if (m.type !== 'all-connected') return;
      process.off('message', onMsg);
      resolve();
    };
    process.on('message', onMsg);
    process.send!({ type: 'connected', rank });
  });
  const qpnToRank = new Map<number, number>();
  qps.forEach((qp, p) => qp && qpnToRank.set(qp.qpn, p));
  return { device, rank, n, mrs, qps, remotes, remoteDescs, qpOf: (qpn) => qpnToRank.get(qpn) ?? -1 };
}

