/**
 * Connects one copyrpc endpoint toward every other rank through a store, the way
 * connectFullMesh connects QPs: each rank publishes ONE blob with all of its endpoints'
 * localInfo() and reads the others' with one batched multiGet, so store round trips per rank
 * do not grow with the world size.
 */
import { WeftError } from '../errors.js';
import { addressFor, encodeMeshBlob } from '../rendezvous/full-mesh.js';
import type { Store } from '../rendezvous/store.js';
import type { WaitOptions } from '../util/deadline.js';
import type { RpcEngine } from './engine.js';
import type { Endpoint, EndpointOptions } from './endpoint.js';

export interface RpcMeshOptions extends WaitOptions {
  /** Options for every endpoint (ring sizes, credits). */
  endpoint?: Omit<EndpointOptions, 'peerLabel'>;
  /** Key namespace in the store (default 'rpc'). */
  key?: string;
}

/**
 * Returns `eps[p]`, the connected endpoint toward rank p (undefined at `rank`).
 *
 * @example
 * const eps = await connectRpcMesh(store, rpc, rank, size, { endpoint: { sendRingSize: 1 << 16, recvRingSize: 1 << 16 } });
 * const reply = await eps[(rank + 1) % size]!.request(bytes, { timeoutMs: 5000 });
 */
export async function connectRpcMesh<U>(store: Store, rpc: RpcEngine<U>, rank: number, size: number, options: RpcMeshOptions = {}): Promise<(Endpoint<U> | undefined)[]> {
  if (!Number.isInteger(size) || size < 1) throw new WeftError('EINVAL', `connectRpcMesh: world size must be a positive integer, got ${size}`);
  if (!Number.isInteger(rank) || rank < 0 || rank >= size) throw new WeftError('EINVAL', `connectRpcMesh: rank ${rank} is outside [0, ${size})`);
  const ns = options.key ?? 'rpc';
  const eps: (Endpoint<U> | undefined)[] = [];
  try {
    for (let p = 0; p < size; p++) eps.push(p === rank ? undefined : rpc.createEndpoint({ ...options.endpoint, peerLabel: `rank ${p}` }));
    await store.set(`${ns}/${rank}`, encodeMeshBlob(rank, size, eps.map((e) => e?.localInfo())), { once: true });
    const peers = [...Array(size).keys()].filter((p) => p !== rank);
    let blobs: Uint8Array[];
    try {
      blobs = await store.multiGet(peers.map((p) => `${ns}/${p}`), options);
    } catch (err) {
      if ((err as WeftError).code === 'ETIMEDOUT') throw new WeftError('ETIMEDOUT', `rank ${rank}: connectRpcMesh timed out waiting for the other ranks' endpoint info under '${ns}/'; are they all running with the same store, prefix and world size ${size}?`, { cause: err });
      throw err;
    }
    peers.forEach((p, i) => (eps[p] as Endpoint<U>).connect(addressFor(blobs[i], p, rank, size)));
    return eps;
  } catch (err) {
    for (const e of eps) e?.close();
    throw err;
  }
}
