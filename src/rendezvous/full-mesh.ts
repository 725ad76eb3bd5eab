/**
 * Full-mesh connection through a store, as Gloo's connectFullMesh: every rank creates one QP
 * per peer, publishes ONE blob holding all of their addresses, and reads the other ranks'
 * blobs with one batched multiGet. Store round trips per rank stay constant in the world size.
 *
 * Blob layout (little-endian): u32 magic 'WFM1', u32 rank, u32 world size, then for each peer
 * in rank order: u32 peer rank, u32 length, address bytes; then optionally one entry with peer
 * rank 0xffffffff holding the layer above's extra bytes (e.g. the transport's ring descriptor).
 */
import { codedText, fromCodedText, WeftError } from '../errors.js';
import { Deadline, type WaitOptions } from '../util/deadline.js';
import type { Device, QueuePair, QueuePairOptions } from '../nic/types.js';
import { planFor, waitAsync } from '../host/wait.js';
import type { HostMap } from './hosts.js';
import type { Store } from './store.js';

const MESH_MAGIC = 0x314d4657;
const EXTRA = 0xffffffff;

/**
 * A rank that cannot join (a world size that differs from the others', a rank outside the
 * world, a malformed blob, a timeout) writes why under this key; the others' waits look at it
 * between slices and fail with that reason at once, instead of timing out or seeing the
 * failed rank vanish (EPEERDEAD).
 */
export const JOIN_FAILURE_KEY = '_join-failure';
/** How often a waiting rank looks for a published join failure: 250 ms, doubling to 2 s (a
 * store serving many slow-starting ranks must not be polled hard). */
const FIRST_SLICE_MS = 250;
const MAX_SLICE_MS = 2000;
/** Said with reasons read from the store: they may be a previous job's. */
const STALE_HINT = ' (if no rank of this job did that, a previous job with this store prefix left its keys: use a fresh prefix)';
/** Join failures read from the store (not republished). */
const readFromStore = new WeakSet<object>();

/**
 * Tells the job's other ranks that this rank cannot join (best effort, bounded by 1 s; the
 * first failure published stays).
 */
export async function publishJoinFailure(store: Store, err: unknown): Promise<void> {
  const e = err as WeftError;
  if (readFromStore.has(e)) return; // another rank's, already there
  const text = codedText(e?.code ?? 'EINVAL', e?.message ?? String(err));
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      store.compareSet(JOIN_FAILURE_KEY, new Uint8Array(0), new TextEncoder().encode(text)),
      new Promise((resolve) => (timer = setTimeout(resolve, 1000))),
    ]);
  } catch {
    // The store is gone or refuses: the others will time out instead.
  } finally {
    clearTimeout(timer);
  }
}

/**
 * For a rank hosting the store that is about to fail: waits (at most `ms`) until `readers`
 * other ranks have read the published failure, so they fail with its reason, not with a lost
 * connection to the store.
 */
export async function awaitFailureReaders(store: Store, readers: number, ms = 3000): Promise<void> {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    const seen = await store.add(`${JOIN_FAILURE_KEY}-seen`, 0).catch(() => readers);
    if (seen >= readers) return;
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The failure another rank published, as an error of this rank, if any. */
export async function joinFailure(store: Store, rank: number): Promise<WeftError | undefined> {
  let bytes: Uint8Array;
  try {
    bytes = await store.get(JOIN_FAILURE_KEY, { timeoutMs: 0 });
  } catch {
    return undefined;
  }
  const { code, message } = fromCodedText(new TextDecoder().decode(bytes), 'EINVAL');
  const err = new WeftError(code, `rank ${rank}: the job cannot start: ${message}${STALE_HINT}`);
  readFromStore.add(err);
  return err;
}

/**
 * `store.multiGet(keys)` that also fails, within a slice (250 ms, then up to 2 s), when a rank of the job published a
 * join failure. The timeout error is the caller's to word (`onTimeout`).
 */
export async function multiGetOrFailure(store: Store, keys: string[], rank: number, options: WaitOptions, onTimeout: (err: WeftError) => Promise<WeftError> | WeftError): Promise<Uint8Array[]> {
  const deadline = new Deadline(options.timeoutMs, options.signal);
  for (let sliceMs = FIRST_SLICE_MS; ; sliceMs = Math.min(2 * sliceMs, MAX_SLICE_MS)) {
    const slice = Math.max(0, Math.min(deadline.remaining(), sliceMs));
    try {
      return await store.multiGet(keys, { timeoutMs: slice, signal: options.signal });
    } catch (err) {
      if ((err as WeftError).code !== 'ETIMEDOUT') throw err;
      const failed = await joinFailure(store, rank);
      if (failed) {
        // Counted, so that a rank hosting the store keeps it up until the others have read this.
        await store.add(`${JOIN_FAILURE_KEY}-seen`, 1).catch(() => 0);
        throw failed;
      }
      if (deadline.remaining() <= 0) throw await onTimeout(err as WeftError);
    }
  }
}

/** Every rank must be started with the same world size: the first one's is the job's. */
export async function checkWorldSize(store: Store, ns: string, rank: number, size: number): Promise<void> {
  const mine = new Uint8Array(4);
  new DataView(mine.buffer).setUint32(0, size, true);
  const stored = await store.compareSet(`${ns}/world`, new Uint8Array(0), mine);
  const theirs = stored.byteLength === 4 ? new DataView(stored.buffer, stored.byteOffset, 4).getUint32(0, true) : -1;
  if (theirs !== size) {
    throw new WeftError('EINVAL', `rank ${rank} was started with world size ${size}, but the job's first rank to arrive was started with ${theirs < 0 ? 'an unreadable size' : theirs}: start every rank with the same world size (WEFT_WORLD_SIZE, -n), and a fresh prefix per job (a previous job's keys say the size of that job)`);
  }
}

export interface FullMeshOptions extends WaitOptions {
  /** Options for every QP (receive credits). */
  qp?: Omit<QueuePairOptions, 'peerLabel'>;
  /** Key namespace inside the store (default 'mesh'). */
  key?: string;
  /** Bytes published with this rank's addresses; peers get them from connectFullMeshWithExtras. */
  extra?: Uint8Array;
  /**
   * Where every rank runs (rendezvous/hosts.ts): each QP is created for its peer's host (a
   * device that mixes providers needs it) and errors name hosts and addresses.
   */
  hosts?: HostMap;
}

/** Encodes a rank's addresses (`addrs[p]` toward peer p, undefined at own rank). */
export function encodeMeshBlob(rank: number, size: number, addrs: (Uint8Array | undefined)[], extra?: Uint8Array): Uint8Array {
  let total = 12;
  for (const a of addrs) if (a) total += 8 + a.byteLength;
  if (extra) total += 8 + extra.byteLength;
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
  if (extra) {
    v.setUint32(o, EXTRA, true);
    v.setUint32(o + 4, extra.byteLength, true);
    out.set(extra, o + 8);
  }
  return out;
}

/** The extra bytes of `from`'s blob (empty when it has none); throws EPROTO on malformed bytes. */
export function extraOf(blob: Uint8Array, from: number, to: number, size: number): Uint8Array {
  try {
    return addressFor(blob, from, EXTRA, size);
  } catch (err) {
    if ((err as WeftError).code === 'EPROTO' && /no address for/.test((err as Error).message)) return new Uint8Array(0);
    throw new WeftError((err as WeftError).code, (err as Error).message.replace(/^rank \d+/, `rank ${to}`), { cause: err });
  }
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
  return (await connectFullMeshWithExtras(store, device, rank, size, options)).qps;
}

/**
 * connectFullMesh that also hands every rank the others' `options.extra` bytes (`extras[p]`,
 * empty at `rank`), in the same store round trips.
 */
export async function connectFullMeshWithExtras(store: Store, device: Device, rank: number, size: number, options: FullMeshOptions = {}): Promise<{ qps: (QueuePair | undefined)[]; extras: Uint8Array[] }> {
  if (!Number.isInteger(size) || size < 1) throw new WeftError('EINVAL', `connectFullMesh: world size must be a positive integer, got ${size}`);
  if (!Number.isInteger(rank) || rank < 0 || rank >= size) throw new WeftError('EINVAL', `connectFullMesh: rank ${rank} is outside [0, ${size})`);
  const ns = options.key ?? 'mesh';
  const qps: (QueuePair | undefined)[] = [];
  const hosts = options.hosts;
  for (let p = 0; p < size; p++) qps.push(p === rank ? undefined : device.createQueuePair({ ...options.qp, peerLabel: `rank ${p}`, peerHostId: hosts?.ranks[p]?.hostId }));
  try {
    await checkWorldSize(store, ns, rank, size);
    await store.set(`${ns}/${rank}`, encodeMeshBlob(rank, size, qps.map((q) => q?.address()), options.extra), { once: true });
    const peers = [...Array(size).keys()].filter((p) => p !== rank);
    const keys = peers.map((p) => `${ns}/${p}`);
    const blobs = await multiGetOrFailure(store, keys, rank, options, async (err) => {
      const missing = await missingRanks(store, peers, ns);
      return new WeftError('ETIMEDOUT', `rank ${rank}: connectFullMesh timed out after ${Math.round(new Deadline(options.timeoutMs).timeoutMs)} ms; ranks ${missing.join(', ') || '(none, retry)'} never published their addresses: are they running with the same store and prefix, and world size ${size}?`, { cause: err });
    });
    peers.forEach((p, i) => (qps[p] as QueuePair).connect(addressFor(blobs[i], p, rank, size)));
    const pairs = qps.flatMap((q, p): [number, QueuePair][] => (q ? [[p, q]] : []));
    await shakeHands(device, pairs, () => device.cq.ready(), rank, 'init', (r) => options.hosts?.describe(r) ?? `rank ${r}`, options);
    await allConnected(store, device, ns, rank, size, options);
    const extras: Uint8Array[] = qps.map(() => new Uint8Array(0));
    peers.forEach((p, i) => (extras[p] = extraOf(blobs[i], p, rank, size)));
    return { qps, extras };
  } catch (err) {
    for (const q of qps) q?.close();
    throw err;
  }
}

/**
 * One small round trip on every fabric pair, within the connect timeout: a rank that bound an
 * address its peer cannot reach fails here, naming both ranks, their hosts and the address,
 * instead of timing out in its first collective. `pairs` are [peer rank, QP]; `progress` moves
 * the CQ (init: `cq.ready()`, nothing else uses the CQ yet; a layer joining later polls through
 * the completion router, so that other owners' completions still reach them). A handshake ends
 * on an internal completion, so this waits on the CQ's doorbell itself (the one waiting loop).
 */
export async function shakeHands(device: Device, pairs: [number, QueuePair][], progress: () => void, rank: number, what: string, describe: (r: number) => string, options: WaitOptions): Promise<void> {
  const shaking = pairs.filter(([, q]) => q.handshake !== undefined);
  if (shaking.length === 0) return;
  for (const [, q] of shaking) q.handshake!();
  const settled = () => {
    progress();
    for (const [, q] of shaking) if (q.handshakeState === 'pending') return false;
    return true;
  };
  const fix = 'Make every rank bind an address the other hosts route to (weft run --iface NAME, WEFT_IFACE or WEFT_ADDR; see docs/hosts.md)';
  try {
    await waitAsync(settled, device.cq.doorbell, planFor(device.oversubscribed, `rank ${rank}: ${what}: handshakes`, options));
  } catch (err) {
    const stuck = [...new Set(shaking.filter(([, q]) => q.handshakeState === 'pending').map(([p, q]) => `${describe(p)} at ${q.peerAddress ?? '?'}`))];
    // init's steps share one deadline: ranks that started far apart can leave the handshake
    // too little time to tell a slow answer from none.
    const ms = Math.round(new Deadline(options.timeoutMs).timeoutMs);
    const short = ms < 2000 ? ` (all that was left of the timeout after the earlier steps: if the ranks started far apart, raise timeoutMs or WEFT_TIMEOUT_MS)` : '';
    throw new WeftError((err as WeftError).code ?? 'ETIMEDOUT', `${describe(rank)}: ${what}: no answer through the fabric from ${stuck.join(', ') || 'a peer'} within ${ms} ms${short}: the address it published is not reachable from this host, or the peer is too slow. ${fix}`, { cause: err });
  }
  const failed = shaking.find(([, q]) => q.handshakeState === 'failed');
  if (failed) {
    const [p, q] = failed;
    throw new WeftError('ETRANSPORT', `${describe(rank)}: ${what}: cannot reach ${describe(p)} at ${q.peerAddress ?? '?'} through the fabric: ${q.error?.message ?? 'handshake failed'}. ${fix}`, { cause: q.error });
  }
}

/**
 * Keeps the device's fabric moving until the returned function is called. libfabric's tcp
 * provider serves a peer's RMA read only while this process polls its CQ: a rank that shook
 * hands and then waits on the store for the others must keep answering theirs. Waits through
 * the one waiting loop (spin, yield, sleep on the CQ's doorbell).
 *
 * @example
 * const stop = keepFabricMoving(device);
 * try { await store.wait(keys); } finally { stop(); }
 */
export function keepFabricMoving(device: Device): () => void {
  let stopped = false;
  let held = false;
  // ready() moves the fabric forward; true when completions wait for the context's owner.
  const ready = () => stopped || (held = device.cq.ready());
  void (async () => {
    while (!stopped) {
      await waitAsync(ready, device.cq.doorbell, { oversubscribed: true });
      // Completions already arrived (a peer that finished init sent its first message): they
      // are the owner's to take, and nothing else needs this rank's progress. Look again in
      // a millisecond rather than spin on them.
      if (!stopped && held) await new Promise((r) => setTimeout(r, 1));
    }
  })().catch(() => {});
  return () => {
    stopped = true;
  };
}

/**
 * Returns once every rank has connected and shaken hands, as a two-sided handshake would: a
 * rank that then fails at once must not take its memory away from a peer still connecting
 * (the peer would fail first and be named as the cause), and a rank must keep answering its
 * peers' handshakes until they are all done.
 */
async function allConnected(store: Store, device: Device, ns: string, rank: number, size: number, options: FullMeshOptions): Promise<void> {
  const stop = keepFabricMoving(device);
  try {
    await store.set(`${ns}/connected/${rank}`, new Uint8Array(0));
    await multiGetOrFailure(store, [...Array(size).keys()].map((p) => `${ns}/connected/${p}`), rank, options, (err) => {
      return new WeftError('ETIMEDOUT', `rank ${rank}: connectFullMesh: every rank published its addresses, but not every rank connected within the timeout: ${err.message}`, { cause: err });
    });
  } finally {
    stop();
  }
}

/** The ranks among `peers` whose `<ns>/<rank>` key is not in the store (for timeout messages). */
export async function missingRanks(store: Store, peers: number[], ns: string): Promise<number[]> {
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
