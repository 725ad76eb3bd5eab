/**
 * The server or a client of one point of `weft bench ipc`, in a worker thread (its init in
 * workerData.ipcBench) or a child process (`node worker.js <init as JSON>`). It talks to the
 * harness (bench/ipc/harness.ts) over a control channel of its own: a MessagePort in a worker
 * (so that parentPort stays free for the systems), the IPC channel in a child process.
 *
 * Server: startServer, send the descriptor, serve until the stop flag is raised (an Int32 on a
 * SharedArrayBuffer in threads, on a small /dev/shm segment in processes: a busy server's
 * event loop never turns), close, say 'closed'. Client: load the system, say 'ready', run on
 * 'start', send the elapsed ms. A child process also starts a watchdog thread that kills it
 * when its parent is gone: a client or server spinning in JS never sees 'disconnect'.
 */
import { isMainThread, workerData, Worker, type MessagePort } from 'node:worker_threads';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { loadSystem } from './systems/index.js';
import type { ToHarness, ToWorker, WorkerInit } from './harness.js';

interface Control {
  send(m: ToHarness): Promise<void>;
  on(fn: (m: ToWorker) => void): void;
}

function portControl(port: MessagePort): Control {
  return {
    send: async (m) => port.postMessage(m),
    on: (fn) => port.on('message', fn),
  };
}

function processControl(): Control {
  return {
    send: (m) => new Promise((resolve) => (process.connected ? process.send!(m, undefined, undefined, () => resolve()) : resolve())),
    on: (fn) => process.on('message', fn as (m: unknown) => void),
  };
}

function errorText(err: unknown): string {
  return err instanceof Error ? (err.stack ?? err.message) : String(err);
}

/** Kills this process (all its threads) once the parent that forked it is gone. */
function watchParent(): void {
  const code = `const { workerData } = require('node:worker_threads');
setInterval(() => { if (process.ppid !== workerData) process.kill(process.pid, 'SIGKILL'); }, 250);`;
  new Worker(code, { eval: true, workerData: process.ppid }).unref();
}

async function main(init: WorkerInit, control: Control): Promise<void> {
  control.on((m) => {
    if (m.t === 'exit') process.exit(0);
  });
  const sys = await loadSystem(init.system, init.module);
  if (init.role === 'server') {
    let flag: Int32Array;
    if (init.flag) flag = init.flag;
    else {
      const { openSegment } = await import('../../src/host/segments.js');
      flag = new Int32Array(openSegment(init.flagSegment!), 0, 1);
    }
    const stop = () => Atomics.load(flag, 0) !== 0;
    const server = await sys.startServer(init.cfg, { placement: init.placement, ports: init.ports });
    await control.send({ t: 'descriptor', d: server.descriptor });
    await server.serve(stop);
    server.close();
    await control.send({ t: 'closed' });
    return;
  }
  let release: (() => void) | undefined;
  const barrier = () =>
    new Promise<void>((resolve) => {
      release = resolve;
      void control.send({ t: 'barrier' });
    });
  const run = async (descriptor: unknown) => {
    try {
      const ms = await sys.runClient(descriptor, init.index, init.cfg, { placement: init.placement, port: init.port, barrier });
      await control.send({ t: 'result', ms });
    } catch (err) {
      await control.send({ t: 'error', message: errorText(err) });
    }
  };
  control.on((m) => {
    if (m.t === 'start') void run(m.d);
    else if (m.t === 'release') {
      const r = release;
      release = undefined;
      r?.();
    }
  });
  await control.send({ t: 'ready' });
}

const SELF = fileURLToPath(import.meta.url);
const threadInit = !isMainThread ? (workerData as { ipcBench?: WorkerInit } | undefined)?.ipcBench : undefined;

if (threadInit) {
  const control = portControl(threadInit.control!);
  main(threadInit, control).catch((err) => void control.send({ t: 'error', message: errorText(err) }));
} else if (isMainThread && process.argv[1] && path.resolve(process.argv[1]) === SELF && process.send) {
  watchParent();
  const init = JSON.parse(process.argv[2]) as WorkerInit;
  const control = processControl();
  process.on('disconnect', () => process.exit(0));
  const fail = (err: unknown) => void control.send({ t: 'error', message: errorText(err) });
  process.on('uncaughtException', fail);
  process.on('unhandledRejection', fail);
  main(init, control).catch(fail);
}
