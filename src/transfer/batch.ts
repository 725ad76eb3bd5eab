/**
 * A batch of transfer requests (the note's BatchID): fixed capacity; each request's parsed
 * fields and state sit together in one Float64Array record of RS numbers (and its object
 * references in one array, 4 per request). A request's bookkeeping is then one or two cache
 * lines, which matters: each 64 KiB copy between two of them flushes the L1 cache, and
 * parallel arrays (one line per field) cost a miss per field. Submitting, completing a slice
 * and reading a status allocate nothing; freed batches of the same capacity are reused.
 */
import { Task } from './types.js';
import type { LocalBuffer } from './local-memory.js';
import type { RemoteBuffer, RemoteSegment } from './remote-segment.js';

export const OP_READ = 0;
export const OP_WRITE = 1;

/** Numbers per request record, and their places. */
export const RS = 12;
export const R_STATUS = 0;
/** Bytes moved so far. */
export const R_TRANSFERRED = 1;
/** Slices not yet completed. */
export const R_LEFT = 2;
/** Slices posted and not completed. */
export const R_FLYING = 3;
/** 1 once the request let go of its source buffer. */
export const R_RELEASED = 4;
export const R_OP = 5;
export const R_LENGTH = 6;
/** Source offset inside its registered buffer. */
export const R_LOCAL_OFF = 7;
/** The request's targetOffset. */
export const R_TARGET_ADDR = 8;
/** Target offset inside the remote buffer's region. */
export const R_REMOTE_OFF = 9;
export const R_DEADLINE = 10;

/** Object references per request, and their places. */
export const RO = 4;
export const O_LOCAL = 0;
export const O_REMOTE = 1;
/** undefined for a request refused before its target was known. */
export const O_SEGMENT = 2;
/** For this rank's own segment: the target buffer. */
export const O_SELF = 3;

export class Batch {
  id = 0;
  /**
   * Grows at every reuse: queued slices, descriptor waits and own-segment copies carry the
   * generation they were made for, and one of an earlier use is dropped, never applied to the
   * request that now has its index.
   */
  gen = 0;
  /** Requests submitted so far. */
  count = 0;
  /** Inside submitTransfer (a request's getter that submits to the batch again is refused). */
  submitting = false;
  /** Requests PENDING or WAITING. */
  unsettled = 0;
  /** Slices posted to the NIC and not completed, over all requests. */
  flyingTotal = 0;
  /** ms a request may take from its submit (TIMEOUT after). */
  timeoutMs = 0;
  freed = false;
  readonly f: Float64Array;
  readonly refs: (LocalBuffer | RemoteBuffer | RemoteSegment | undefined)[];
  readonly reason: (string | undefined)[];

  constructor(readonly capacity: number) {
    this.f = new Float64Array(capacity * RS);
    this.refs = new Array(capacity * RO).fill(undefined);
    this.reason = new Array(capacity).fill(undefined);
  }

  /** Ready for reuse under a new id. */
  reset(id: number, timeoutMs: number): void {
    const n = this.count;
    this.refs.fill(undefined, 0, n * RO);
    this.reason.fill(undefined, 0, n);
    this.f.fill(0, 0, n * RS);
    this.id = id;
    this.gen++;
    this.count = 0;
    this.unsettled = 0;
    this.flyingTotal = 0;
    this.timeoutMs = timeoutMs;
    this.freed = false;
  }

  status(i: number): number {
    return this.f[i * RS + R_STATUS];
  }

  /** True while request i of generation `gen` is PENDING or WAITING. */
  live(i: number, gen: number): boolean {
    return this.gen === gen && this.open(i);
  }

  /** True while request i is PENDING or WAITING. */
  open(i: number): boolean {
    const s = this.f[i * RS + R_STATUS];
    return s === Task.WAITING || s === Task.PENDING;
  }

  local(i: number): LocalBuffer | undefined {
    return this.refs[i * RO + O_LOCAL] as LocalBuffer | undefined;
  }
  remote(i: number): RemoteBuffer | undefined {
    return this.refs[i * RO + O_REMOTE] as RemoteBuffer | undefined;
  }
  segment(i: number): RemoteSegment | undefined {
    return this.refs[i * RO + O_SEGMENT] as RemoteSegment | undefined;
  }
  selfTarget(i: number): LocalBuffer | undefined {
    return this.refs[i * RO + O_SELF] as LocalBuffer | undefined;
  }
}
