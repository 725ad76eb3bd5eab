/**
 * A thread's copyrpc side: its own engine (each worker thread is its own JS world, as each
 * daemon of the notes has its own copyrpc Context) and one endpoint per link it takes part
 * in. The infos go to the rank's main thread, which exchanges them with the other ranks
 * through the job's store (the notes' MPI exchange, step 8) and sends back the peers'.
 */
import type { MessagePort } from 'node:worker_threads';
import { createRpcEngine, type CallFailedHandler, type Endpoint, type RpcEngine } from 'weftjs/rpc';
import type { KvConfig } from './config.js';
import { endsOf, links, threadName, type ThreadRef } from './topology.js';

/** How long a peer rank on another host may stay silent in the fabric before the run ends (ms, at most). */
const PEER_TIMEOUT_MS = 10_000;

/**
 * The onCallFailed of a thread's polls: a call whose endpoint failed (the peer rank died, its
 * host is gone, or it broke the protocol) never gets its answer, and a client waits on it, so
 * the thread throws, naming the peer: the rank then ends the run instead of the clients
 * waiting out the drain timeout.
 */
export function endRunOnCallFailed(who: string): CallFailedHandler<number> {
  return (_userData, err, ep) => {
    throw new Error(`${who}: a copyrpc call to ${ep.peerLabel} failed: ${err.message.replace(`${who}: `, '')}`);
  };
}

export interface ThreadRpc {
  rpc: RpcEngine<number>;
  /** `eps[p]`: the endpoint toward rank p (undefined when this thread has none toward p). */
  eps: (Endpoint<number> | undefined)[];
  /** All endpoints (a daemon of the direct backend holds several toward one rank). */
  all: Endpoint<number>[];
}

/** Messages between a thread and its rank's main thread during set-up. */
export type SetupMessage =
  | { type: 'names'; ipc?: string; flux?: string; deleg?: string }
  | { type: 'infos'; infos: Record<string, Uint8Array> }
  | { type: 'connect'; infos: Record<string, Uint8Array>; flux?: string }
  | { type: 'ready' };

function nextMessage<T>(port: MessagePort, type: string): Promise<T> {
  return new Promise((resolve) => {
    const on = (m: { type: string }) => {
      if (m.type !== type) return;
      port.off('message', on);
      resolve(m as T);
    };
    port.on('message', on);
  });
}

/** Creates the engine and endpoints of thread `self`, trades infos with main, connects. Undefined when it has no links. */
export async function connectThread(cfg: KvConfig, self: ThreadRef, port: MessagePort): Promise<ThreadRpc | undefined> {
  const ends = endsOf(links(cfg.backend, cfg.ranks, cfg.daemons, cfg.clients), cfg.rank, self);
  if (ends.length === 0) {
    port.postMessage({ type: 'infos', infos: {} } satisfies SetupMessage);
    await nextMessage(port, 'connect');
    return undefined;
  }
  const rpc = await createRpcEngine<number>({
    provider: cfg.provider,
    job: cfg.job,
    label: `rank ${cfg.rank} ${threadName(self)}`,
    srqSize: Math.max(1024, 64 * ends.length),
    // A rank on another host that died leaves its probes unanswered (rxm fails nothing toward
    // it): its endpoints fail after this, and the daemons and clients end the run naming it,
    // before the main thread's collectives time out (--timeout-ms) naming only the rank.
    peerTimeoutMs: Math.min(PEER_TIMEOUT_MS, Math.max(1000, cfg.timeoutMs / 2)),
    ...(cfg.bindAddress ? { node: cfg.bindAddress } : {}),
  });
  const eps: (Endpoint<number> | undefined)[] = new Array(cfg.ranks).fill(undefined);
  const byKey = new Map<string, Endpoint<number>>();
  const infos: Record<string, Uint8Array> = {};
  for (const e of ends) {
    const ep = rpc.createEndpoint({ sendRingSize: cfg.ringBytes, recvRingSize: cfg.ringBytes, peerLabel: `rank ${e.peerRank} ${threadName(e.peer)}` });
    byKey.set(e.key, ep);
    infos[e.key] = ep.localInfo();
    // A client (direct) calls through its endpoint toward each rank; a daemon of the direct
    // backend may hold several toward one rank (one per remote client) and only serves them.
    if (eps[e.peerRank] === undefined) eps[e.peerRank] = ep;
  }
  port.postMessage({ type: 'infos', infos } satisfies SetupMessage);
  const peer = await nextMessage<{ infos: Record<string, Uint8Array> }>(port, 'connect');
  for (const [key, ep] of byKey) {
    const info = peer.infos[key];
    if (!info) throw new Error(`rank ${cfg.rank} ${threadName(self)}: no endpoint info from the peer of link ${key}`);
    ep.connect(new Uint8Array(info));
  }
  return { rpc, eps, all: [...byKey.values()] };
}

export { nextMessage };
