/**
 * Full-mesh connection through a store, as Gloo's connectFullMesh: every rank creates one QP
 * per peer, publishes ONE blob holding all of their addresses, and reads the other ranks'
 * blobs with one batched multiGet. Store round trips per rank stay constant in the world size.
 *
 * Blob layout (little-endian): u32 magic 'WFM1', u32 rank, u32 world size, then for each peer
 * in rank order: u32 peer rank, u32 length, address bytes.
 */
import { WeftError } from '../errors.js';
import type { WaitOptions } from '../util/deadline.js';
import type { Device, QueuePair, QueuePairOptions } from '../nic/types.js';
import type { Store } from './store.js';

const MESH_MAGIC = 0x314d4657;

export interface FullMeshOptions extends WaitOptions {
  /** Options for every QP (receive credits). */
  qp?: Omit<QueuePairOptions, 'peerLabel'>;
  /** Key namespace inside the store (default 'mesh'). */
  key?: string;
}

/** Encodes a rank's addresses (`addrs[p]` toward peer p, undefined at own rank). */
export function encodeMeshBlob(rank: number, size: number, addrs: (Uint8Array | undefined)[]): Uint8Array {
  let total = 12;
  for (const a of addrs) if (a) total += 8 + a.byteLength;
  const out = new Uint8Array(total);
  const v = new DataView(out.buffer);
  v.setUint32(0, MESH_MAGIC, true);
  v.setUint32(4, rank, true);
  v.setUint32(8, size, true);
  let o = 12;
  addrs.forEach((a, p) => {
    if (!a) return;
    v.setUint32(o, p, true);
    v.setUint32(o + 4, a.byteLength, true);
    out.set(a, o + 8);
    o += 8 + a.byteLength;
  });
  return out;
}

/** Finds the address that `from`'s blob holds for `to`; throws EPROTO on malformed bytes. */
export function addressFor(blob: Uint8Array, from: number, to: number, size: number): Uint8Array {
  const bad = (why: string) => new WeftError('EPROTO', `rank ${to}: the address blob of rank ${from} is malformed (${why}); is another job using the same store prefix?`);
  if (blob.byteLength < 12) throw bad('too short');
  const v = new DataView(blob.buffer, blob.byteOffset, blob.byteLength);
  if (v.getUint32(0, true) !== MESH_MAGIC) throw bad('bad magic');
  if (v.getUint32(4, true) !== from) throw bad(`it says rank ${v.getUint32(4, true)}`);
  if (v.getUint32(8, true) !== size) throw new WeftError('EINVAL', `rank ${to}: rank ${from} was started with world size ${v.getUint32(8, true)}, this rank with ${size}; start every rank with the same size`);
  let o = 12;
  while (o + 8 <= blob.byteLength) {
    const p = v.getUint32(o, true);
    const len = v.getUint32(o + 4, true);
    if (o + 8 + len > blob.byteLength) throw bad('entry past the end');
    if (p === to) return blob.subarray(o + 8, o + 8 + len);
    o += 8 + len;
  }
  throw bad(`no address for rank ${to}`);
}

/**
 * Connects `device` to every other rank. Returns `qps[p]` (undefined at `rank`).
 *
 * @example
 * const qps = await connectFullMesh(store, device, rank, size, { timeoutMs: 30_000 });
 */
export async function connectFullMesh(store: Store, device: Device, rank: number, size: number, options: FullMeshOptions = {}): Promise<(QueuePair | undefined)[]> {
  if (!Number.isInteger(size) || size < 1) throw new WeftError('EINVAL', `connectFullMesh: world size must be a positive integer, got ${size}`);
  if (!Number.isInteger(rank) || rank < 0 || rank >= size) throw new WeftError('EINVAL', `connectFullMesh: rank ${rank} is outside [0, ${size})`);
  const ns = options.key ?? 'mesh';
  const qps: (QueuePair | undefined)[] = [];
  for (let p = 0; p < size; p++) qps.push(p === rank ? undefined : device.createQueuePair({ ...options.qp, peerLabel: `rank ${p}` }));
  try {
    await store.set(`${ns}/${rank}`, encodeMeshBlob(rank, size, qps.map((q) => q?.address())), { once: true });
    const peers = [...Array(size).keys()].filter((p) => p !== rank);
    const keys = peers.map((p) => `${ns}/${p}`);
    let blobs: Uint8Array[];
    try {
      blobs = await store.multiGet(keys, options);
    } catch (err) {
      if ((err as WeftError).code === 'ETIMEDOUT') {
        const missing = await missingRanks(store, peers, ns);
        throw new WeftError('ETIMEDOUT', `rank ${rank}: connectFullMesh timed out; ranks ${missing.join(', ') || '(none, retry)'} never published their addresses: are they running with the same store and prefix, and world size ${size}?`, { cause: err });
      }
      throw err;
    }
    peers.forEach((p, i) => (qps[p] as QueuePair).connect(addressFor(blobs[i], p, rank, size)));
    return qps;
  } catch (err) {
    for (const q of qps) q?.close();
    throw err;
  }
}

async function missingRanks(store: Store, peers: number[], ns: string): Promise<number[]> {
  const out: number[] = [];
  for (const p of peers) {
    try {
      await store.get(`${ns}/${p}`, { timeoutMs: 0 });
    } catch {
      out.push(p);
    }
  }
  return out;
}
