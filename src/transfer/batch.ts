/**
 * A batch of transfer requests (the note's BatchID): fixed capacity, and per request its
 * parsed fields and state in parallel typed arrays, so that submitting, completing a slice and
 * reading a status allocate nothing. Freed batches of the same capacity are reused.
 */
import { Task } from './types.js';
import type { LocalBuffer } from './local-memory.js';
import type { RemoteBuffer, RemoteSegment } from './remote-segment.js';

export const OP_READ = 0;
export const OP_WRITE = 1;

export class Batch {
  id = 0;
  /** Requests submitted so far. */
  count = 0;
  /** Requests PENDING or WAITING. */
  unsettled = 0;
  /** Slices posted to the NIC and not completed, over all requests. */
  flyingTotal = 0;
  /** ms a request may take from its submit (TIMEOUT after). */
  timeoutMs = 0;
  freed = false;
  readonly status: Uint8Array;
  readonly transferred: Float64Array;
  /** Slices of the request not yet completed. */
  readonly left: Uint32Array;
  /** Slices of the request posted and not completed. */
  readonly flying: Uint32Array;
  /** 1 once the request let go of its source buffer. */
  readonly released: Uint8Array;
  readonly op: Uint8Array;
  readonly length: Float64Array;
  /** Source offset inside its registered buffer. */
  readonly localOff: Float64Array;
  /** Target address (the request's targetOffset). */
  readonly targetAddr: Float64Array;
  /** Target offset inside the remote buffer's region. */
  readonly remoteOff: Float64Array;
  readonly deadline: Float64Array;
  readonly local: (LocalBuffer | undefined)[];
  readonly remote: (RemoteBuffer | undefined)[];
  /** undefined for this rank's own segment. */
  readonly segment: (RemoteSegment | undefined)[];
  /** For this rank's own segment: the target buffer. */
  readonly selfTarget: (LocalBuffer | undefined)[];
  readonly reason: (string | undefined)[];

  constructor(readonly capacity: number) {
    this.status = new Uint8Array(capacity);
    this.transferred = new Float64Array(capacity);
    this.left = new Uint32Array(capacity);
    this.flying = new Uint32Array(capacity);
    this.released = new Uint8Array(capacity);
    this.op = new Uint8Array(capacity);
    this.length = new Float64Array(capacity);
    this.localOff = new Float64Array(capacity);
    this.targetAddr = new Float64Array(capacity);
    this.remoteOff = new Float64Array(capacity);
    this.deadline = new Float64Array(capacity);
    this.local = new Array(capacity).fill(undefined);
    this.remote = new Array(capacity).fill(undefined);
    this.segment = new Array(capacity).fill(undefined);
    this.selfTarget = new Array(capacity).fill(undefined);
    this.reason = new Array(capacity).fill(undefined);
  }

  /** Ready for reuse under a new id. */
  reset(id: number, timeoutMs: number): void {
    const n = this.count;
    for (let i = 0; i < n; i++) {
      this.local[i] = undefined;
      this.remote[i] = undefined;
      this.segment[i] = undefined;
      this.selfTarget[i] = undefined;
      this.reason[i] = undefined;
    }
    this.transferred.fill(0, 0, n);
    this.released.fill(0, 0, n);
    this.id = id;
    this.count = 0;
    this.unsettled = 0;
    this.flyingTotal = 0;
    this.timeoutMs = timeoutMs;
    this.freed = false;
  }

  /** True while request i is PENDING or WAITING. */
  open(i: number): boolean {
    const s = this.status[i];
    return s === Task.WAITING || s === Task.PENDING;
  }
}
