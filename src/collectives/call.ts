/**
 * The running state of one collective call, and the two drivers. Algorithms are generators
 * that post sends and receives and yield the operations they must wait for; `runSync` waits
 * by busy-polling (for tight loops), `runAsync` by awaiting the device's shared progress loop.
 * One algorithm text serves both. Any failure aborts the job on every rank: after a
 * mismatch, a timeout or a dead rank, messages may be in flight and the context is unusable.
 */
import { WeftError } from '../errors.js';
import { copyInto } from '../host/copy.js';
import { Deadline, type WaitOptions } from '../util/deadline.js';
import type { DType, ReduceOp } from '../reduce/index.js';
import type { CollectiveTransport } from '../transport/group-view.js';
import { RecvOp, SendOp, type ReduceSink, type TransportOp } from '../transport/ops.js';
import { collectiveSlot, signature, type CollectiveName } from '../transport/signature.js';
import { agreed, CHECK_CALLS } from './agreement.js';

/** What collectives need from a connected group of ranks. */
export interface Group {
  readonly rank: number;
  readonly size: number;
  /**
   * Who this rank is in messages (default "rank R"). A subgroup's says the job rank too: the
   * ranks its operations name (a receive from rank N) are job ranks.
   */
  readonly label?: string;
  /** The job's transport, or a subgroup's view of it (ranks and slots of its own). */
  readonly transport: CollectiveTransport;
  /** Lends a scratch area of at least `bytes` bytes (pooled: no allocation in steady state). */
  acquire(bytes: number): Uint8Array;
  /** Returns a scratch area lent by acquire or acquireRegistered. */
  release(area: Uint8Array): void;
  /**
   * Lends scratch memory registered with the device, which the fabric sends from in place
   * (heap memory when the rank has registered enough already); the job's group has it.
   */
  acquireRegistered?(bytes: number): Uint8Array;
}

/** Options every collective takes. */
export interface CollectiveOptions extends WaitOptions {
  /** Distinguishes concurrent collectives of the same kind (default 0). */
  tag?: number;
  /**
   * A job that spans hosts runs allreduce, broadcast, allgather, reduceScatter and barrier
   * inside each host first, then across hosts (collectives/hierarchical.ts). false: the flat
   * algorithm over every rank. Ignored on one host and on subgroups.
   */
  hierarchical?: boolean;
}

export type Algorithm = Generator<readonly TransportOp[], void, void>;

/** How long an async collective polls a step before awaiting it (holds the event loop at most this long). */
const ASYNC_SPIN_MS = 0.25;

/** A collective's tag: an integer in [0, 2^32). */
export function isTag(tag: unknown): tag is number {
  return Number.isInteger(tag) && (tag as number) >= 0 && (tag as number) <= 0xffffffff;
}

export class CollectiveCall {
  readonly rank: number;
  readonly size: number;
  readonly device: CollectiveTransport;
  readonly slot: number;
  /** This call's number among its slot's calls: every rank counts the same (transport H.CALL). */
  readonly call: number;
  readonly deadline: Deadline;
  readonly tag: number;
  private held: Uint8Array[] | undefined;
  constructor(
    readonly group: Group,
    readonly collective: CollectiveName,
    readonly sig: number,
    options: CollectiveOptions,
    /**
     * What every rank's call must agree on besides the signature (a byte length, a hash of
     * counts; 0: nothing), compared in the WEFT_CHECK=1 agreement round.
     */
    readonly shape = 0,
  ) {
    this.rank = group.rank;
    this.size = group.size;
    this.device = group.transport;
    const tag = options.tag ?? 0;
    if (!isTag(tag)) throw new WeftError('EINVAL', `rank ${this.rank}: ${collective}: tag must be an integer in [0, 2^32), got ${tag}`);
    this.slot = collectiveSlot(collective, tag) + this.device.slotBase;
    this.tag = tag;
    try {
      this.deadline = new Deadline(options.timeoutMs, options.signal);
    } catch (err) {
      throw new WeftError('EINVAL', `${this.what}: ${(err as Error).message}`);
    }
    if (this.device.failure || this.device.closed) this.device.checkUsable(`${collective} (tag ${tag})`);
    if (options.signal?.aborted) throw new WeftError('EABORTED', `${this.what}: the AbortSignal was aborted before the call started`, { cause: options.signal.reason });
    // Counted on every call, whatever its path (board or messages), so the ranks stay in step.
    this.call = this.device.nextCall(this.slot);
  }

  /** "rank 3: allreduce (tag 0)", for messages (built only when needed). */
  get what(): string {
    return `${this.group.label ?? `rank ${this.rank}`}: ${this.collective} (tag ${this.tag})`;
  }

  /** Scratch memory for this call, given back when it ends. */
  scratch(bytes: number): Uint8Array {
    const a = this.group.acquire(bytes);
    (this.held ??= []).push(a);
    return a.subarray(0, bytes);
  }

  releaseScratch(): void {
    if (!this.held) return;
    for (const a of this.held) this.group.release(a);
    this.held = undefined;
  }

  send(to: number, bytes: Uint8Array): SendOp {
    const op = new SendOp(this.device.worldRank(to), this.slot, bytes, this.sig, 0, 0);
    // Registered arrays go out in place (transport/pair.ts, from 512 KiB): the send finishes
    // once its last write completed locally instead of once staged (docs/collectives.md).
    op.allowZeroCopy = true;
    op.call = this.call;
    this.device.pair(to).send(op);
    return op;
  }

  /** Receives exactly `dst.byteLength` bytes from `from` into dst. */
  recv(from: number, dst: Uint8Array): RecvOp {
    const op = new RecvOp([this.device.worldRank(from)], this.slot, dst, dst.byteLength, this.sig, undefined);
    op.call = this.call;
    this.device.pair(from).post(op);
    return op;
  }

  /** Receives into dst as dst = a op incoming (the reduction runs chunk by chunk, out of the ring). */
  recvReduce(from: number, dst: Uint8Array, a: Uint8Array, red: Reduction): RecvOp {
    const sink: ReduceSink = { op: red.op, dtype: red.dtype, elementBytes: red.elementBytes, a };
    const op = new RecvOp([this.device.worldRank(from)], this.slot, dst, dst.byteLength, this.sig, sink);
    op.call = this.call;
    this.device.pair(from).post(op);
    return op;
  }
}

/** The reduction a call performs. */
export interface Reduction {
  readonly op: ReduceOp;
  readonly dtype: DType;
  readonly elementBytes: number;
}

export function beginCall(group: Group, collective: CollectiveName, options: CollectiveOptions, dtype?: DType, op?: ReduceOp, root?: number, shape = 0): CollectiveCall {
  return new CollectiveCall(group, collective, signature(collective, dtype, op, root), options, shape);
}

/** A u32 that differs when counts differ (FNV-1a): the shape of a v-collective. */
export function countsShape(counts: readonly number[]): number {
  if (!CHECK_CALLS) return 0; // compared only by the WEFT_CHECK=1 round
  let h = 0x811c9dc5;
  for (const c of counts) h = Math.imul(h ^ c, 0x01000193) >>> 0;
  return h;
}

function failed(c: CollectiveCall, err: unknown): WeftError {
  const e = err instanceof WeftError ? err : new WeftError('ETRANSPORT', `${c.what}: ${(err as Error)?.message ?? err}`, { cause: err });
  c.device.abort(e);
  return e;
}

/**
 * A call refused on this rank before it reached the wire (bad arguments, an aborted signal,
 * a busy tag): the other ranks would wait for it until their timeout, or take the next call's
 * messages for this one's. So the job is aborted with the same error, and every rank's
 * pending and later calls fail with its code (docs/collectives.md, "Errors"). A closed
 * context reaches nobody: its ECLOSED stays local.
 */
export function refused(g: Group, err: unknown): unknown {
  const d = g.transport;
  if (err instanceof WeftError && err.code !== 'ECLOSED' && !d.closed) d.abort(err);
  return err;
}

/**
 * Runs a message-based call: claims its slot (one call per collective and tag in flight),
 * runs the algorithm (after the WEFT_CHECK=1 agreement round) by busy-polling, and aborts the
 * job on any failure.
 */
export function runSync(c: CollectiveCall, alg: Algorithm): void {
  try {
    c.device.claimSlot(c.slot, c);
  } catch (err) {
    throw failed(c, err);
  }
  try {
    driveSync(c, CHECK_CALLS ? agreed(c, alg) : alg);
    c.device.finishCall(c.slot, c.call);
  } finally {
    c.device.releaseSlot(c.slot);
  }
}

/** runSync for the Promise API: waits through the process's shared progress loop. */
export async function runAsync(c: CollectiveCall, alg: Algorithm): Promise<void> {
  try {
    c.device.claimSlot(c.slot, c);
  } catch (err) {
    throw failed(c, err);
  }
  // Awaited even when every step completes at once: a Promise call is always in flight until
  // a later microtask, so a second call on the same tag issued beside it is always refused,
  // never accepted or refused depending on how fast the first one ran.
  try {
    await driveAsync(c, CHECK_CALLS ? agreed(c, alg) : alg);
    c.device.finishCall(c.slot, c.call);
  } finally {
    c.device.releaseSlot(c.slot);
  }
}

/** Runs `alg`'s steps, waiting for each by busy-polling; any failure aborts the job. */
export function driveSync(c: CollectiveCall, alg: Algorithm): void {
  try {
    for (let r = alg.next(); !r.done; r = alg.next()) c.device.waitSync(r.value, c.deadline, c);
  } catch (err) {
    throw failed(c, err);
  } finally {
    c.releaseScratch();
  }
}

/** driveSync for the Promise API: a step already streaming in finishes without an event-loop hop. */
export async function driveAsync(c: CollectiveCall, alg: Algorithm): Promise<void> {
  try {
    for (let r = alg.next(); !r.done; r = alg.next()) {
      if (c.device.pollFor(r.value, ASYNC_SPIN_MS)) continue;
      await c.device.waitAsync(r.value, c.deadline, c);
    }
  } catch (err) {
    throw failed(c, err);
  } finally {
    c.releaseScratch();
  }
}

/** memcpy between byte views (nothing when they are the same memory). */
export function copy(dst: Uint8Array, src: Uint8Array): void {
  if (dst.buffer === src.buffer && dst.byteOffset === src.byteOffset) return;
  copyInto(dst, 0, src, 0, src.byteLength);
}
