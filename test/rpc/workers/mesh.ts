/**
 * In a worker of runScenario (src/launch/local-group.ts): exchanges copyrpc endpoint infos
 * with the other workers over the parent's IPC relay (the parent stands in for a store) and
 * returns connected endpoints, eps[p] toward rank p.
 */
import { createRpcEngine, type RpcEngine, type CreateRpcEngineOptions, type Endpoint, type EndpointOptions } from '../../../src/rpc/index.js';

type Entry = { type: 'addr'; rank: number; addrs: Record<number, string>; descs: string[] };

/** Sends this rank's blobs (blobs[p] for peer p) and resolves with every rank's entry. */
export function exchange(rank: number, blobs: Record<number, Uint8Array>, descs: Uint8Array[] = []): Promise<Map<number, Entry>> {
  const addrs: Record<number, string> = {};
  for (const [p, b] of Object.entries(blobs)) addrs[Number(p)] = Buffer.from(b).toString('base64');
  return new Promise((resolve) => {
    const onMsg = (m: { type: string; table: Entry[] }) => {
      if (m.type !== 'peers') return;
      process.off('message', onMsg);
      resolve(new Map(m.table.map((e) => [e.rank, e])));
    };
    process.on('message', onMsg);
    process.send!({ type: 'addr', rank, addrs, descs: descs.map((d) => Buffer.from(d).toString('base64')) });
  });
}

export const unb64 = (s: string) => new Uint8Array(Buffer.from(s, 'base64'));

export interface RpcMesh<U> {
  ctx: RpcEngine<U>;
  eps: (Endpoint<U> | undefined)[];
  /** Peers' extra descriptors (descs[p][i]). */
  descs: Uint8Array[][];
}

/**
 * Creates a context and one endpoint per peer, exchanges infos and connects them all.
 * `extraDescs(ctx)`, when given, returns descriptors (e.g. of ctx.allocate'd regions) that
 * travel in the same exchange; the peers find them in `descs[rank]`.
 */
export async function joinRpcMesh<U>(rank: number, n: number, provider: string, ctxOptions: CreateRpcEngineOptions = {}, epOptions: EndpointOptions = {}, only?: number[], extraDescs?: (ctx: RpcEngine<U>) => Uint8Array[]): Promise<RpcMesh<U>> {
  const ctx = await createRpcEngine<U>({ provider, label: `rank ${rank}`, ...ctxOptions });
  const eps: (Endpoint<U> | undefined)[] = [];
  const blobs: Record<number, Uint8Array> = {};
  for (let p = 0; p < n; p++) {
    if (p === rank || (only && !only.includes(p))) {
      eps.push(undefined);
      continue;
    }
    const ep = ctx.createEndpoint({ ...epOptions, peerLabel: `rank ${p}` });
    eps.push(ep);
    blobs[p] = ep.localInfo();
  }
  const table = await exchange(rank, blobs, extraDescs?.(ctx));
  for (let p = 0; p < n; p++) {
    const ep = eps[p];
    if (!ep) continue;
    const info = table.get(p)?.addrs[rank];
    if (!info) throw new Error(`rank ${rank}: rank ${p} published no endpoint info for us`);
    ep.connect(unb64(info));
  }
  const descs: Uint8Array[][] = [];
  for (let p = 0; p < n; p++) descs.push((table.get(p)?.descs ?? []).map(unb64));
  return { ctx, eps, descs };
}

/** Deterministic 32-bit PRNG (mulberry32). */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
}

/** FNV-1a over buf[off, off+len). */
export function fnv(buf: Uint8Array, off: number, len: number): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < len; i++) h = Math.imul(h ^ buf[off + i], 0x01000193);
  return h >>> 0;
}
