/**
 * The plug-in contract of `weft bench ipc`: one module per system in bench/ipc/systems/
 * (registered in bench/ipc/systems/index.ts), whose default export is an IpcSystem.
 *
 * The harness (bench/ipc/harness.ts) runs, for each point, the server in a worker thread
 * (placement `threads`) or a child process (`processes`), and `clients` clients likewise; it
 * hands the server's descriptor to every client, starts them together, collects their elapsed
 * times, then raises the stop flag and tears everything down.
 *
 * Descriptors travel by structured clone in the threads placement (postMessage: they may
 * carry a SharedArrayBuffer) and as JSON in the processes placement (a /dev/shm segment
 * name, a socket path).
 */
import type { MessagePort, Worker } from 'node:worker_threads';

export type Placement = 'threads' | 'processes';

export interface PointConfig {
  /** Client workers/processes of the point (each talks to the one server). */
  clients: number;
  /** Calls each client keeps in flight. */
  qd: number;
  /** Request and response payload bytes (the first 4 carry the call's number). */
  bytes: number;
  /** Measured calls per client. */
  calls: number;
  /** Calls per client before the measured ones (not timed). */
  warmup: number;
}

/** What the server side hands back from startServer. */
export interface IpcServer {
  /** Sent to every client (structured clone in threads, JSON in processes). */
  descriptor: unknown;
  /**
   * Serves requests (a response of cfg.bytes bytes per request) until stop() returns true.
   * A busy server polls stop() in its loop; an event-driven one may use whenStopped().
   */
  serve(stop: () => boolean): Promise<void> | void;
  /** Releases what startServer took (sockets, segments). Called once serve() has returned. */
  close(): void;
}

/** Optional second argument of startServer: what the harness set up for this point. */
export interface ServerContext {
  placement: Placement;
  /** Systems with `ports`: one MessagePort per client (index i), linked to that client's ClientContext.port. */
  ports?: MessagePort[];
  /** Systems with `serverOnMain`: the client Workers (their parentPort is free for the system). */
  workers?: Worker[];
}

/** Optional fourth argument of runClient. */
export interface ClientContext {
  placement: Placement;
  /** Systems with `ports`: this client's end of the MessageChannel to the server. */
  port?: MessagePort;
  /**
   * Resolves once every client of the point has called it. Call it between the warmup and
   * the measured calls (with nothing in flight) so that the clients' clocks start together;
   * either all clients of a system call it the same number of times, or none does. Not
   * calling it is fine too: the harness already starts the clients together.
   */
  barrier(): Promise<void>;
}

export interface IpcSystem {
  /** 'postMessage' | 'MessageChannel' | 'node:net' | 'floor' | 'delegation' | 'ipc' | 'flux' */
  name: string;
  placements: readonly Placement[];
  /**
   * Runs in the server worker/process. Returns a descriptor that clients receive and
   * serve(), which busy-serves requests (echoing a response of cfg.bytes bytes) until
   * stop() returns true.
   */
  startServer(cfg: PointConfig, ctx?: ServerContext): Promise<IpcServer>;
  /**
   * Runs in client worker/process number `index` (0-based): connects, does cfg.warmup then
   * cfg.calls calls keeping cfg.qd in flight, checks every response is the right one, and
   * returns the elapsed ms of the measured calls.
   */
  runClient(descriptor: unknown, index: number, cfg: PointConfig, ctx?: ClientContext): Promise<number>;
  /** Threads placement: the harness links the server and each client with a MessageChannel (ServerContext.ports, ClientContext.port). */
  ports?: boolean;
  /**
   * Threads placement: startServer and serve run on the harness's own thread, which created
   * the client workers (ServerContext.workers); clients reach it through parentPort.
   * serve() must then be event-driven (it shares the thread with the harness).
   */
  serverOnMain?: boolean;
}

/** For event-driven servers: resolves once stop() returns true (checked every `everyMs`). */
export function whenStopped(stop: () => boolean, everyMs = 5): Promise<void> {
  return new Promise((resolve) => {
    if (stop()) return resolve();
    const timer = setInterval(() => {
      if (!stop()) return;
      clearInterval(timer);
      resolve();
    }, everyMs);
  });
}

/** Smallest power of two >= n (n >= 1). */
export function nextPow2(n: number): number {
  let p = 1;
  while (p < n) p *= 2;
  return p;
}

/** The byte the payloads of the baselines are filled with at position i (the first 4 bytes hold the call's number). */
export function payloadByte(i: number): number {
  return (i * 31 + 7) & 0xff;
}
