/** Starts delegation test parties (workers/party.ts) as worker_threads or child processes. */
import { fork, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { PartySpec } from './workers/party.js';

export type Placement = 'threads' | 'processes';
const SCRIPT = path.join(path.dirname(fileURLToPath(import.meta.url)), 'workers', 'party.js');

export interface Msg {
  event: string;
  [k: string]: unknown;
}

export interface Party {
  /** Resolves with the next message whose event is `event` (or 'error'), rejects after ms. */
  next(event: string, ms?: number): Promise<Msg>;
  /** SIGKILL (process) or terminate (thread). */
  kill(): Promise<void>;
  /** Resolves when the party has exited. */
  exited: Promise<void>;
  /** The thread's or process's id (for a process: its pid). */
  pid?: number;
}

/** `env`: extra environment of a process party (threads share this process's). */
export function start(placement: Placement, spec: PartySpec, env?: Record<string, string>): Party {
  const queue: Msg[] = [];
  const waiters: ((m: Msg) => void)[] = [];
  const push = (m: Msg) => {
    const w = waiters.shift();
    if (w) w(m);
    else queue.push(m);
  };
  let kill: () => Promise<void>;
  let exited: Promise<void>;
  let pid: number | undefined;
  if (placement === 'threads') {
    const w = new Worker(SCRIPT, { workerData: spec });
    w.on('message', push);
    w.on('error', (e) => push({ event: 'error', message: e.message }));
    exited = new Promise((r) => w.once('exit', () => r()));
    kill = async () => {
      await w.terminate();
    };
  } else {
    const c: ChildProcess = fork(SCRIPT, [JSON.stringify(spec)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], env: { ...process.env, ...env } });
    pid = c.pid;
    c.on('message', (m) => push(m as Msg));
    exited = new Promise((r) => c.once('exit', () => r()));
    kill = async () => {
      c.kill('SIGKILL');
      await exited;
    };
  }
  return {
    pid,
    exited,
    kill: () => kill(),
    next(event: string, ms = 120_000): Promise<Msg> {
      const take = (): Msg | undefined => {
        const i = queue.findIndex((m) => m.event === event || m.event === 'error');
        return i >= 0 ? queue.splice(i, 1)[0] : undefined;
      };
      const now = take();
      if (now) return Promise.resolve(now);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no '${event}' from ${spec.role} within ${ms} ms`)), ms);
        const wait = (m: Msg) => {
          if (m.event === event || m.event === 'error') {
            clearTimeout(timer);
            resolve(m);
          } else {
            queue.push(m);
            waiters.push(wait);
          }
        };
        waiters.push(wait);
      });
    },
  };
}
