/**
 * A rank's membership in a job: its rank and world size, the job's store, the process's one
 * NIC device with its completion router, one connected queue pair per peer, and the
 * transport over them. `connect()` returns one; `init()` returns a ProcessGroup, which adds
 * the collectives and copyrpc.
 */
import type { WaitOptions } from '../util/deadline.js';
import { isPeerAlive } from '../host/identity.js';
import { WeftError } from '../errors.js';
import type { CompletionRouter } from '../nic/completion-router.js';
import type { Device, QueuePair } from '../nic/types.js';
import type { PrefixStore } from '../rendezvous/prefix-store.js';
import type { EnvStyle } from '../rendezvous/env.js';
import type { HostMap } from '../rendezvous/hosts.js';
import type { Device as TransportDevice } from '../transport/device.js';

/** What a JobMember is built from (see joinJob). */
export interface JobParts {
  rank: number;
  size: number;
  store: PrefixStore;
  device: Device;
  router: CompletionRouter;
  pairs: (QueuePair | undefined)[];
  transport: TransportDevice;
  style: EnvStyle;
  serving: boolean;
  hosts: HostMap;
}

/** A connected rank. */
export class JobMember {
  /**
   * This rank, in [0, size).
   *
   * @example
   * if (ctx.rank === 0) console.log(`job of ${ctx.size} ranks`);
   */
  readonly rank: number;
  /** Ranks in the job (the world size). */
  readonly size: number;
  /**
   * The job's store, under its prefix: small keys every rank sees (configuration, results).
   *
   * @example
   * await ctx.store.set('epoch', new TextEncoder().encode('3'));
   */
  readonly store: PrefixStore;
  /** The process's NIC device (one per process: the transport and copyrpc share it). */
  readonly device: Device;
  /** Hands the device's completions to their owners (transport, copyrpc) by QP. */
  readonly router: CompletionRouter;
  /** pairs[p]: the QP toward rank p (undefined at this rank). */
  readonly pairs: (QueuePair | undefined)[];
  /** Gloo-style transport over the QPs (pairs, rings, progress). */
  readonly transport: TransportDevice;
  /** How this rank found its settings. */
  readonly style: EnvStyle;
  /** Where every rank runs (host ids, names, fabric addresses, local ranks). */
  readonly hosts: HostMap;
  private readonly serving: boolean;
  private closed = false;
  private readonly pool: Uint8Array[] = [];
  /** Registered scratch areas not lent out, and the bytes registered for scratch in all. */
  private readonly registeredPool: Uint8Array[] = [];
  private registeredScratchBytes = 0;

  constructor(parts: JobParts) {
    this.rank = parts.rank;
    this.size = parts.size;
    this.store = parts.store;
    this.device = parts.device;
    this.router = parts.router;
    this.pairs = parts.pairs;
    this.transport = parts.transport;
    this.style = parts.style;
    this.hosts = parts.hosts;
    this.serving = parts.serving;
  }

  /** This rank's index among the ranks on its host (rank order). */
  get localRank(): number {
    return this.hosts.localRank[this.rank];
  }

  /** How many ranks of the job run on this rank's host. */
  get localSize(): number {
    return this.hosts.localSize[this.rank];
  }

  /** The host name rank `r` runs on. */
  hostOf(r: number): string {
    if (!Number.isInteger(r) || r < 0 || r >= this.size) throw new RangeError(`rank ${this.rank}: hostOf(${r}): no such rank in a world of ${this.size}`);
    return this.hosts.ranks[r].hostName;
  }

  /** Lends scratch memory to a collective (pooled by power-of-two size). */
  acquire(bytes: number): Uint8Array {
    const best = bestFit(this.pool, bytes);
    if (best >= 0) return this.pool.splice(best, 1)[0];
    return new Uint8Array(powerOfTwoAtLeast(bytes, 64));
  }

  release(area: Uint8Array): void {
    if (this.transport.shared.regionOf(area)) this.registeredPool.push(area);
    else if (this.pool.length < 16) this.pool.push(area);
  }

  /**
   * Lends scratch memory registered with the device (as `ctx.alloc` arrays are): a send over
   * the fabric from it writes in place, where heap memory is first copied into the staging
   * ring. A hierarchical allreduce's shard crosses hosts from such scratch (2 hosts x 2
   * ranks, 512 KiB between hosts: 0.94-1.19 ms per call against 1.44-1.61 ms from the heap).
   * Registered memory is never given back before close(), so past REGISTERED_SCRATCH_MAX
   * bytes in all this lends heap memory instead. Return it with release().
   */
  acquireRegistered(bytes: number): Uint8Array {
    const i = bestFit(this.registeredPool, bytes);
    if (i >= 0) return this.registeredPool.splice(i, 1)[0];
    const size = powerOfTwoAtLeast(bytes, 4096);
    if (this.registeredScratchBytes + size > REGISTERED_SCRATCH_MAX || this.closed) return this.acquire(bytes);
    this.registeredScratchBytes += size;
    return this.transport.shared.alloc(Uint8Array, size);
  }

  /** Closes whatever a subclass added on the device before it goes (copyrpc endpoints). */
  protected closeUsers(): void {}

  /**
   * Closes the QPs and the device, and leaves the store: the last rank out deletes the job's
   * keys, and a rank hosting the store server waits (briefly) for the others first.
   */
  async close(options: WaitOptions = {}): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.transport.linger();
    this.transport.close();
    this.closeUsers();
    for (const qp of this.pairs) qp?.close();
    this.router.close(new WeftError('ECLOSED', `rank ${this.rank}: the context was closed while this wait was pending`));
    this.device.close();
    try {
      await this.store.set(`_gone/${this.rank}`, new Uint8Array(0));
      const left = await this.store.add('_left', 1);
      // The server's host leaves last, or the others lose their store mid-goodbye.
      if (this.serving) {
        // A dead rank never says goodbye: waiting for it held a launcher-less job 5 s after a SIGKILL.
        const dead = (q: QueuePair) => q.error?.code === 'EPEERDEAD' || (q.peerIdentity !== undefined && !isPeerAlive(q.peerIdentity));
        const others = this.pairs.flatMap((q, p) => (q && !dead(q) ? [`_gone/${p}`] : []));
        await this.store.wait(others, { timeoutMs: options.timeoutMs ?? 5000, signal: options.signal }).catch(() => {});
      }
      await this.store.close({ purge: left === this.size });
    } catch {
      await this.store.close().catch(() => {});
    }
  }
}

/** Registered scratch a rank keeps at most (its hierarchical collectives' shards); beyond, heap scratch. */
export const REGISTERED_SCRATCH_MAX = 64 * 1024 * 1024;

/** The smallest power of two of at least `bytes` and `min` (pooled areas come in these sizes). */
function powerOfTwoAtLeast(bytes: number, min: number): number {
  return 2 ** Math.ceil(Math.log2(Math.max(bytes, min)));
}

/** The index of the smallest area of at least `bytes` bytes in `pool`, or -1. */
function bestFit(pool: readonly Uint8Array[], bytes: number): number {
  let best = -1;
  for (let i = 0; i < pool.length; i++) {
    if (pool[i].byteLength >= bytes && (best < 0 || pool[i].byteLength < pool[best].byteLength)) best = i;
  }
  return best;
}
