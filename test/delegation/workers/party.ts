/**
 * One party of a delegation test, run as a worker_thread (workerData) or as a child process
 * (argv[2], JSON): a server or a client of delegationrpc, ipc or Flux. It reports with one
 * message (parentPort or process.send): {event: 'ready'|'reserved'|'done'|'error', ...}.
 */
import { isMainThread, parentPort, workerData } from 'node:worker_threads';
import { DelegationClient, DelegationServer, FluxNode, IpcClient, IpcServer } from '../../../src/delegation/index.js';
import { openSegment } from '../../../src/host/segments.js';

export interface PartySpec {
  role: 'dlg-server' | 'dlg-client' | 'dlg-hang' | 'dlg-sleep' | 'ipc-sleep' | 'ipc-server' | 'ipc-client' | 'flux-node' | 'flux-caller' | 'hostile';
  name?: string;
  producer?: number;
  calls?: number;
  qd?: number;
  /** Total calls a server serves before it reports done. */
  expect?: number;
  producers?: number;
  ringDepth?: number;
  respDepth?: number;
  maxClients?: number;
  timeoutMs?: number;
  nodes?: number;
  nodeId?: number;
  /** hostile: how long to scribble, and the seed. */
  ms?: number;
  seed?: number;
}

const spec: PartySpec = isMainThread ? JSON.parse(process.argv[2]) : workerData;

function send(msg: Record<string, unknown>): void {
  if (isMainThread) process.send!(msg);
  else parentPort!.postMessage(msg);
}

const u32 = (b: Uint8Array, i: number) => (b[i] | (b[i + 1] << 8) | (b[i + 2] << 16) | (b[i + 3] << 24)) >>> 0;
function put(b: Uint8Array, i: number, v: number): void {
  b[i] = v & 255;
  b[i + 1] = (v >>> 8) & 255;
  b[i + 2] = (v >>> 16) & 255;
  b[i + 3] = (v >>> 24) & 255;
}

/** Checks per-producer order at the server: the request [producer, seq] must be the next seq. */
function orderChecker(producers: number) {
  const next = new Float64Array(producers);
  let errors = 0;
  let first = '';
  return {
    check(p: Uint8Array): void {
      const who = u32(p, 0);
      const seq = u32(p, 4);
      if (who >= producers || next[who] !== seq) {
        if (errors++ === 0) first = `producer ${who}: got seq ${seq}, expected ${next[who]}`;
        if (who < producers) next[who] = seq + 1;
      } else next[who]++;
    },
    report: () => ({ errors, first, next: [...next] }),
  };
}

function serveDelegation(): void {
  const s = DelegationServer.create({ maxClients: spec.maxClients ?? 8, ringDepth: spec.ringDepth ?? 8, respDepth: spec.respDepth ?? 4, requestBytes: 16, responseBytes: 16, holeTimeoutMs: 50 });
  send({ event: 'ready', name: s.name });
  const order = orderChecker(spec.producers ?? 4);
  let served = 0;
  const end = performance.now() + (spec.timeoutMs ?? 60_000);
  while (served < spec.expect! && performance.now() < end) {
    if (s.poll() === 0) {
      try {
        s.waitSync({ timeoutMs: 200 });
      } catch {
        // idle slice: look again (the hole check runs inside poll)
      }
      continue;
    }
    for (let e = s.recv(); e !== null; e = s.recv()) {
      order.check(e.payload);
      s.reply(e.clientId, e.respSlot, e.payload);
      served++;
    }
    s.advanceTail();
  }
  send({ event: 'done', served, stats: s.stats, ...order.report() });
  // Let the last clients read their answers before the segment is marked gone.
  const linger = performance.now() + 200;
  while (performance.now() < linger);
  s.close();
}

type Caller = { inFlight: number; call(p: Uint8Array, u: number): boolean; poll(cb: (u: number, r: Uint8Array) => void): number; waitSync(o: { timeoutMs: number }): void; close(): void };

function drive(c: Caller): void {
  const n = spec.calls!;
  const qd = spec.qd ?? 4;
  const req = new Uint8Array(16);
  put(req, 0, spec.producer!);
  let sent = 0;
  let got = 0;
  let bad = 0;
  let firstBad = '';
  const onResponse = (seq: number, r: Uint8Array) => {
    got++;
    if (u32(r, 0) !== spec.producer || u32(r, 4) !== seq) {
      if (bad++ === 0) firstBad = `call ${seq} answered with [${u32(r, 0)}, ${u32(r, 4)}]`;
    }
  };
  while (got < n) {
    while (sent < n && c.inFlight < qd) {
      put(req, 4, sent);
      if (!c.call(req, sent)) break;
      sent++;
    }
    if (c.poll(onResponse) === 0 && c.inFlight > 0) c.waitSync({ timeoutMs: spec.timeoutMs ?? 30_000 });
  }
  c.close();
  send({ event: 'done', got, bad, firstBad });
}

function serveIpc(): void {
  const s = IpcServer.create({ maxClients: spec.maxClients ?? 8, depth: spec.ringDepth ?? 8, requestBytes: 16, responseBytes: 16, reapIntervalMs: 50 });
  send({ event: 'ready', name: s.name });
  const order = orderChecker(spec.producers ?? 4);
  let served = 0;
  const end = performance.now() + (spec.timeoutMs ?? 60_000);
  while (served < spec.expect! && performance.now() < end) {
    const r = s.recv();
    if (r === null) {
      try {
        s.waitSync({ timeoutMs: 200 });
      } catch {
        // idle slice
      }
      continue;
    }
    order.check(r.payload);
    s.reply(r.clientId, r.tag, r.payload);
    served++;
  }
  send({ event: 'done', served, stats: s.stats, ...order.report() });
  const linger = performance.now() + 200;
  while (performance.now() < linger);
  s.close();
}

/** A Flux node that answers calls (echo) until `expect` were answered. */
function fluxServe(node: FluxNode<number>): void {
  const order = orderChecker(spec.producers ?? 4);
  let served = 0;
  const end = performance.now() + (spec.timeoutMs ?? 60_000);
  while (served < spec.expect! && performance.now() < end) {
    const r = node.tryRecv();
    if (r === null) {
      try {
        node.waitSync({ timeoutMs: 200 });
      } catch {
        // idle slice
      }
      continue;
    }
    order.check(r.payload);
    node.reply(r.replyToken, r.payload);
    served++;
  }
  send({ event: 'done', served, ...order.report() });
  const linger = performance.now() + 200;
  while (performance.now() < linger);
}

function fluxCaller(node: FluxNode<number>): void {
  drive({
    get inFlight() {
      return node.inFlight;
    },
    call: (p, u) => node.call(0, p, u),
    poll: (cb) => node.poll((token, reply) => cb(token, reply)),
    waitSync: (o) => node.waitSync(o),
    close: () => {},
  });
}

/** Scribbles random bytes over a segment (a hostile process with write access). */
function hostile(): void {
  const sab = openSegment(spec.name!);
  const u8 = new Uint8Array(sab);
  let x = spec.seed ?? 1;
  const rnd = () => ((x = (Math.imul(x, 1103515245) + 12345) >>> 0) / 2 ** 32);
  const end = performance.now() + (spec.ms ?? 500);
  let writes = 0;
  while (performance.now() < end) {
    u8[Math.floor(rnd() * u8.length)] = Math.floor(rnd() * 256);
    writes++;
    if ((writes & 63) === 0) {
      const spin = performance.now() + 0.05;
      while (performance.now() < spin);
    }
  }
  send({ event: 'done', writes });
}

try {
  switch (spec.role) {
    case 'dlg-server':
      serveDelegation();
      break;
    case 'dlg-client':
      drive(DelegationClient.connect<number>(spec.name!, { requestBytes: 16, timeoutMs: spec.timeoutMs }) as unknown as Caller);
      break;
    case 'dlg-hang': {
      const c = DelegationClient.connect<number>(spec.name!);
      c.begin(0);
      send({ event: 'reserved', clientId: c.clientId });
      for (;;) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1000);
    }
    case 'dlg-sleep':
    case 'ipc-sleep': {
      // One call, then asleep in a wait for its answer (killed there by the test).
      const c = spec.role === 'dlg-sleep' ? DelegationClient.connect<number>(spec.name!) : IpcClient.connect<number>(spec.name!);
      c.call(new Uint8Array(8), 0);
      send({ event: 'called', clientId: c.clientId });
      c.waitSync({ timeoutMs: 600_000 });
      break;
    }
    case 'ipc-server':
      serveIpc();
      break;
    case 'ipc-client':
      drive(IpcClient.connect<number>(spec.name!, { requestBytes: 16, timeoutMs: spec.timeoutMs }) as unknown as Caller);
      break;
    case 'flux-node': {
      // Without a name, this party makes the mesh and is node 0 (its segment's owner).
      const node = spec.name ? FluxNode.join<number>(spec.name, spec.nodeId!) : FluxNode.create<number>({ nodes: spec.nodes!, payloadBytes: 16, capacity: spec.ringDepth ?? 16, maxInflight: spec.qd ?? 8 });
      send({ event: 'ready', name: node.name });
      fluxServe(node);
      node.close();
      break;
    }
    case 'flux-caller': {
      const node = FluxNode.join<number>(spec.name!, spec.nodeId!);
      send({ event: 'ready' });
      fluxCaller(node);
      node.close();
      break;
    }
    case 'hostile':
      hostile();
      break;
  }
} catch (err) {
  const e = err as { name?: string; code?: string; message?: string };
  send({ event: 'error', name: e.name, code: e.code, message: e.message });
}
if (isMainThread) process.disconnect?.();
