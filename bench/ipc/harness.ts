/**
 * One point of `weft bench ipc`: the server in a worker thread or a child process (or, for a
 * `serverOnMain` system, on this thread), `clients` clients likewise (bench/ipc/worker.ts),
 * the server's descriptor handed to every client, the clients started together, their elapsed
 * times collected; then the stop flag is raised and every worker and child ends (terminated,
 * or asked to exit and killed after 3 s). A point that outlives its timeout, or any error in
 * a worker or child, rejects after everything it started has ended. Segments a point leaves
 * in /dev/shm are removed: a child's when it exits (its pid is gone), this process's own
 * (threads placement) once the point is torn down.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { MessageChannel, Worker, type MessagePort } from 'node:worker_threads';
import { fileURLToPath } from 'node:url';
import { createSegment, devicePrefix, listSegments, parseSegmentName, sweepDeadSegments, unlinkSegment } from '../../src/host/segments.js';
import { native } from '../../src/native/binding.js';
import type { IpcServer, IpcSystem, Placement, PointConfig } from './system.js';

const WORKER = fileURLToPath(new URL('./worker.js', import.meta.url));

/** What a worker/child is started with (bench/ipc/worker.ts). */
export interface WorkerInit {
  role: 'server' | 'client';
  system: string;
  /** A module outside the registry (tests). */
  module?: string;
  index: number;
  placement: Placement;
  cfg: PointConfig;
  /** Threads: the stop flag. */
  flag?: Int32Array;
  /** Processes: the segment holding the stop flag. */
  flagSegment?: string;
  /** Threads: the worker's control port. */
  control?: MessagePort;
  /** `ports` systems: a client's end, the server's ends. */
  port?: MessagePort;
  ports?: MessagePort[];
}

export type ToHarness = { t: 'ready' } | { t: 'descriptor'; d: unknown } | { t: 'closed' } | { t: 'barrier' } | { t: 'result'; ms: number } | { t: 'error'; message: string };
export type ToWorker = { t: 'start'; d: unknown } | { t: 'release' } | { t: 'exit' };

export interface PointSpec {
  /** The system as loaded here (its flags; startServer for serverOnMain). */
  system: IpcSystem;
  /** Its registry name, and a module URL outside the registry (tests). */
  name: string;
  module?: string;
  placement: Placement;
  cfg: PointConfig;
  timeoutMs: number;
}

let live = 0;

/** Workers and children started by runPoint that have not exited yet. */
export function livePeers(): number {
  return live;
}

interface Peer {
  label: string;
  worker?: Worker;
  send(m: ToWorker): void;
  next<T extends ToHarness['t']>(t: T): Promise<Extract<ToHarness, { t: T }>>;
  /** Graceful: a child gets 'exit' and 3 s; otherwise (and for threads) terminate / SIGKILL. */
  end(graceful: boolean): Promise<void>;
}

let points = 0;

/** Runs one point; resolves with each client's measured ms. */
export async function runPoint(spec: PointSpec): Promise<number[]> {
  const { system, placement, cfg } = spec;
  const threads = placement === 'threads';
  const id = points++;
  const peers: Peer[] = [];
  let fail: (err: Error) => void = () => {};
  const failure = new Promise<never>((_, reject) => (fail = reject));
  failure.catch(() => {});

  const ownBefore = threads ? new Set(ownSegments()) : undefined;
  let flag: Int32Array;
  let flagSegment: string | undefined;
  if (threads) flag = new Int32Array(new SharedArrayBuffer(4));
  else {
    flagSegment = `${devicePrefix('bench', `ipc${id}`)}.stop`;
    flag = new Int32Array(createSegment(flagSegment, 64), 0, 1);
  }
  const stop = () => Atomics.load(flag, 0) !== 0;

  let clients: Peer[] = [];
  let arrivals = 0;
  const onBarrier = () => {
    if (++arrivals < cfg.clients) return;
    arrivals = 0;
    for (const c of clients) c.send({ t: 'release' });
  };

  const spawn = (init: Omit<WorkerInit, 'system' | 'module' | 'placement' | 'cfg' | 'flag' | 'flagSegment' | 'control'>): Peer => {
    const label = `${spec.name} ${init.role}${init.role === 'client' ? ` ${init.index}` : ''}`;
    const full: WorkerInit = { ...init, system: spec.name, module: spec.module, placement, cfg, ...(threads ? { flag } : { flagSegment }) };
    const peer = threads ? spawnThread(label, full, fail, onBarrier) : spawnProcess(label, full, fail, onBarrier);
    peers.push(peer);
    return peer;
  };

  let mainServer: IpcServer | undefined;
  let mainServing: Promise<void> | undefined;
  const closeMain = () => {
    const s = mainServer;
    mainServer = undefined;
    s?.close();
  };

  const flow = async (): Promise<number[]> => {
    const links = threads && system.ports ? Array.from({ length: cfg.clients }, () => new MessageChannel()) : undefined;
    clients = Array.from({ length: cfg.clients }, (_, i) => spawn({ role: 'client', index: i, port: links?.[i].port2 }));
    let server: Peer | undefined;
    let descriptor: unknown;
    if (threads && system.serverOnMain) {
      mainServer = await system.startServer(cfg, { placement, workers: clients.map((c) => c.worker!) });
      descriptor = mainServer.descriptor;
      mainServing = Promise.resolve(mainServer.serve(stop));
    } else {
      server = spawn({ role: 'server', index: -1, ports: links?.map((l) => l.port1) });
      descriptor = (await server.next('descriptor')).d;
    }
    await Promise.all(clients.map((c) => c.next('ready')));
    for (const c of clients) c.send({ t: 'start', d: descriptor });
    const results = await Promise.all(clients.map((c) => c.next('result')));
    Atomics.store(flag, 0, 1);
    if (server) await server.next('closed');
    else {
      await mainServing;
      closeMain();
    }
    return results.map((r) => r.ms);
  };

  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${(spec.timeoutMs / 1000).toFixed(0)} s`)), spec.timeoutMs);
  });
  let ok = false;
  try {
    const run = flow();
    run.catch(() => {});
    const ms = await Promise.race([run, failure, timeout]);
    for (const m of ms) if (!(m > 0 && Number.isFinite(m))) throw new Error(`a client returned ${m} ms`);
    ok = true;
    return ms;
  } finally {
    clearTimeout(timer);
    Atomics.store(flag, 0, 1);
    await Promise.all(peers.map((p) => p.end(ok)));
    closeMain();
    if (flagSegment) unlinkSegment(flagSegment);
    if (ownBefore) {
      const left = ownSegments().filter((n) => !ownBefore.has(n));
      for (const n of left) unlinkSegment(n);
      if (left.length && ok) process.stderr.write(`  ${spec.name}: removed ${left.length} segment(s) its server or clients left: ${left.join(', ')}\n`);
    }
  }
}

/**
 * Unlinks the segments of bench runs whose processes are gone (a harness killed with its
 * children leaves its stop flag and the floor's rings); other jobs' segments are left alone.
 */
export function sweepBenchSegments(): string[] {
  const removed: string[] = [];
  for (const name of listSegments()) {
    const p = parseSegmentName(name);
    if (p?.job !== 'bench' || native.processAlive(p.pid, p.startTime)) continue;
    unlinkSegment(name);
    removed.push(name);
  }
  return removed;
}

/** This process's weft segments. */
function ownSegments(): string[] {
  return listSegments().filter((n) => parseSegmentName(n)?.pid === process.pid);
}

/** Message routing shared by both kinds of peer. */
function mailbox(label: string, fail: (err: Error) => void, onBarrier: () => void) {
  const queue: ToHarness[] = [];
  const waiters = new Map<string, (m: ToHarness) => void>();
  return {
    deliver(m: ToHarness) {
      if (m.t === 'error') return fail(new Error(`${label}: ${m.message}`));
      if (m.t === 'barrier') return onBarrier();
      const w = waiters.get(m.t);
      if (w) {
        waiters.delete(m.t);
        w(m);
      } else queue.push(m);
    },
    next<T extends ToHarness['t']>(t: T): Promise<Extract<ToHarness, { t: T }>> {
      const i = queue.findIndex((m) => m.t === t);
      if (i >= 0) return Promise.resolve(queue.splice(i, 1)[0] as Extract<ToHarness, { t: T }>);
      return new Promise((resolve) => waiters.set(t, resolve as (m: ToHarness) => void));
    },
  };
}

function spawnThread(label: string, init: WorkerInit, fail: (err: Error) => void, onBarrier: () => void): Peer {
  const box = mailbox(label, fail, onBarrier);
  const { port1, port2 } = new MessageChannel();
  const transferList = [port2, ...(init.port ? [init.port] : []), ...(init.ports ?? [])];
  const worker = new Worker(WORKER, { workerData: { ipcBench: { ...init, control: port2 } }, transferList });
  live++;
  let ending = false;
  const exited = new Promise<void>((resolve) =>
    worker.once('exit', (code) => {
      live--;
      if (!ending) fail(new Error(`${label} exited (code ${code})`));
      resolve();
    }),
  );
  worker.on('error', (err) => fail(new Error(`${label}: ${err.stack ?? err.message}`)));
  port1.on('message', box.deliver);
  return {
    label,
    worker,
    send: (m) => port1.postMessage(m),
    next: box.next,
    async end() {
      ending = true;
      port1.close();
      await worker.terminate();
      await exited;
    },
  };
}

function spawnProcess(label: string, init: WorkerInit, fail: (err: Error) => void, onBarrier: () => void): Peer {
  const box = mailbox(label, fail, onBarrier);
  const child: ChildProcess = fork(WORKER, [JSON.stringify(init)], { stdio: ['ignore', 'inherit', 'pipe', 'ipc'] });
  live++;
  let ending = false;
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-4000);
  });
  const exited = new Promise<void>((resolve) =>
    child.once('exit', (code, signal) => {
      live--;
      if (child.pid) sweepDeadSegments(child.pid);
      if (!ending) fail(new Error(`${label} exited (${signal ?? `code ${code}`})${stderr ? `: ${stderr.trim().split('\n').slice(-3).join(' | ')}` : ''}`));
      resolve();
    }),
  );
  child.on('error', (err) => fail(new Error(`${label}: ${err.message}`)));
  child.on('message', (m) => box.deliver(m as ToHarness));
  const alive = () => child.exitCode === null && child.signalCode === null;
  return {
    label,
    send(m) {
      if (child.connected) child.send(m, (err: Error | null) => err && fail(new Error(`${label}: ${err.message}`)));
    },
    next: box.next,
    async end(graceful) {
      ending = true;
      if (!alive()) return exited;
      if (graceful && child.connected) {
        child.send({ t: 'exit' }, () => {});
        let t: NodeJS.Timeout | undefined;
        await Promise.race([exited, new Promise((r) => (t = setTimeout(r, 3000)))]);
        clearTimeout(t);
      }
      if (alive()) child.kill('SIGKILL');
      await exited;
    },
  };
}
