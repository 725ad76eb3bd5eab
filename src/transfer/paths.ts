/**
 * The engine's paths: `qpsPerPeer` queue pairs toward every other rank of the group, on the
 * process's one device (shared memory toward a peer on this host, the fabric toward one on
 * another host, when the device mixes them). They are the note's RdmaEndPoint QPs, connected
 * the way the job's own mesh is: each rank publishes ONE blob with all of its addresses (and
 * its segment name) and reads the others' with one multiGet; fabric pairs then shake hands
 * (one small READ each) within the timeout, so an unreachable address fails here, naming both
 * ranks, and never as a timeout in the first transfer.
 *
 * Waiting goes through the completion router (the one waiting loop): the handshakes'
 * completions come in among the other layers' without taking theirs.
 */
import { WeftError } from '../errors.js';
import { Deadline, type WaitOptions } from '../util/deadline.js';
import type { CompletionRouter, CompletionSink } from '../nic/completion-router.js';
import type { QueuePair } from '../nic/types.js';
import { addressFor, checkWorldSize, encodeMeshBlob, extraOf, missingRanks, multiGetOrFailure, shakeHands } from '../rendezvous/full-mesh.js';
import type { HostMap } from '../rendezvous/hosts.js';
import type { Store } from '../rendezvous/store.js';

/** What the engine needs of a job (a ProcessGroup has all of it). */
export interface TransferGroup {
  readonly rank: number;
  readonly size: number;
  /** The job's store, under its prefix. */
  readonly store: Store;
  /** The process's one device and the router of its completions. */
  readonly router: CompletionRouter;
  readonly hosts: HostMap;
}

export interface ConnectedPaths {
  /** qps[p][k]: path k toward rank p (empty at this rank). */
  qps: QueuePair[][];
  /** names[p]: the segment name rank p opened its engine with. */
  names: string[];
  /** controls[p]: the descriptor of rank p's key-revocation control region (empty: none). */
  controls: Uint8Array[];
}

/**
 * Connects `perPeer` QPs toward every other rank of `group` under store namespace `ns`; every
 * QP is attached to `sink` in the router before anything can complete on it.
 */
export async function connectPaths(group: TransferGroup, sink: CompletionSink, ns: string, perPeer: number, name: string, control: Uint8Array, recvCreditsFor: (peer: number) => number, options: WaitOptions): Promise<ConnectedPaths> {
  const { rank, size, store, router, hosts } = group;
  const device = router.device;
  const qps: QueuePair[][] = [];
  const describe = (r: number) => hosts.describe(r);
  try {
    for (let p = 0; p < size; p++) {
      const list: QueuePair[] = [];
      qps.push(list);
      if (p === rank) continue;
      for (let k = 0; k < perPeer; k++) {
        const qp = device.createQueuePair({ peerLabel: `rank ${p}`, peerHostId: hosts.ranks[p]?.hostId, recvCredits: recvCreditsFor(p) });
        list.push(qp);
        router.attach(qp.qpn, sink);
      }
    }
    await checkWorldSize(store, ns, rank, size);
    const addrs = qps.map((list) => (list.length ? joinAddresses(list.map((q) => q.address())) : undefined));
    await store.set(`${ns}/${rank}`, encodeMeshBlob(rank, size, addrs, joinAddresses([new TextEncoder().encode(name), control])), { once: true });
    const peers = [...Array(size).keys()].filter((p) => p !== rank);
    const blobs = await multiGetOrFailure(store, peers.map((p) => `${ns}/${p}`), rank, options, async (err) => {
      const missing = await missingRanks(store, peers, ns).catch(() => []);
      return new WeftError('ETIMEDOUT', `rank ${rank}: TransferEngine.open: ${missing.length ? `rank${missing.length > 1 ? 's' : ''} ${missing.join(', ')}` : 'not every rank'} did not open ${missing.length > 1 ? 'their engines' : 'its engine'} within ${Math.round(new Deadline(options.timeoutMs).timeoutMs)} ms: open is collective, every rank of the job calls it (the same number of times, in the same order)`, { cause: err });
    });
    const names: string[] = new Array(size).fill('');
    const controls: Uint8Array[] = new Array<Uint8Array>(size).fill(new Uint8Array(0));
    names[rank] = name;
    peers.forEach((p, i) => {
      const theirs = splitAddresses(addressFor(blobs[i], p, rank, size), perPeer, `rank ${rank}: TransferEngine.open: rank ${p}'s addresses`);
      qps[p].forEach((q, k) => q.connect(theirs[k]));
      const [nameBytes, controlBytes] = splitAddresses(extraOf(blobs[i], p, rank, size), 2, `rank ${rank}: TransferEngine.open: rank ${p}'s segment name and control region`);
      names[p] = new TextDecoder().decode(nameBytes);
      controls[p] = controlBytes;
    });
    const pairs = qps.flatMap((list, p) => list.map((q): [number, QueuePair] => [p, q]));
    await shakeHands(device, pairs, () => router.poll(), rank, 'TransferEngine.open', describe, options);
    await store.set(`${ns}/connected/${rank}`, new Uint8Array(0));
    await multiGetOrFailure(store, [...Array(size).keys()].map((p) => `${ns}/connected/${p}`), rank, options, (err) => {
      return new WeftError('ETIMEDOUT', `rank ${rank}: TransferEngine.open: every rank published its paths, but not every rank connected them within the timeout: ${err.message}`, { cause: err });
    });
    return { qps, names, controls };
  } catch (err) {
    for (const list of qps) for (const q of list) closePath(router, sink, q);
    throw err;
  }
}

/** Detaches and closes one path. */
export function closePath(router: CompletionRouter, sink: CompletionSink, qp: QueuePair): void {
  router.detach(qp.qpn, sink);
  qp.close();
}

/** u32 length + bytes, for each part. */
function joinAddresses(list: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(list.reduce((n, a) => n + 4 + a.byteLength, 0));
  const v = new DataView(out.buffer);
  let o = 0;
  for (const a of list) {
    v.setUint32(o, a.byteLength, true);
    out.set(a, o + 4);
    o += 4 + a.byteLength;
  }
  return out;
}

function splitAddresses(bytes: Uint8Array, n: number, what: string): Uint8Array[] {
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out: Uint8Array[] = [];
  let o = 0;
  for (let k = 0; k < n; k++) {
    if (o + 4 > bytes.byteLength) break;
    const len = v.getUint32(o, true);
    if (o + 4 + len > bytes.byteLength) break;
    out.push(bytes.subarray(o + 4, o + 4 + len));
    o += 4 + len;
  }
  if (out.length !== n || o !== bytes.byteLength) throw new WeftError('EPROTO', `${what} are malformed (want ${n} addresses): was it opened with a different qpsPerPeer? Every rank must pass the same options`);
  return out;
}
