/**
 * Transport operations in flight. A SendOp moves `src` to a peer in chunks; a RecvOp takes
 * the next message of a slot from one of its sources and copies it into `dst` or reduces it
 * into `dst`. Both settle once (done or failed); waiters look at them after progress.
 */
import type { WeftError } from '../errors.js';
import type { DType, ReduceOp } from '../reduce/index.js';
import type { MemoryRegion } from '../nic/types.js';

export abstract class TransportOp {
  private finished = false;
  private failure: WeftError | undefined = undefined;
  get error(): WeftError | undefined {
    return this.failure;
  }
  set error(e: WeftError | undefined) {
    this.failure = e;
  }
  get done(): boolean {
    return this.finished;
  }
  set done(v: boolean) {
    this.finished = v;
  }
  /** The peer this op finished with (the sender, for a receive from any). */
  peer = -1;
  get settled(): boolean {
    return this.done || this.error !== undefined;
  }
  fail(err: WeftError): void {
    if (!this.settled) this.error = err;
  }
  abstract describe(): string;
}

export class SendOp extends TransportOp {
  /** Payload bytes already written into the peer's ring. */
  pos = 0;
  /**
   * The caller lets the pair write `src` in place (collectives). Point-to-point sends stay
   * buffered: they complete as soon as the bytes are copied, before the fabric has taken them.
   */
  allowZeroCopy = false;
  /**
   * Set when `src` lies in registered memory and the pair writes it from there (no staging
   * copy): the op is then done once the last chunk's write completes locally.
   */
  zcRegion: MemoryRegion | undefined = undefined;
  /** Where `src` starts in `zcRegion`. */
  zcOffset = 0;
  /** The collective call this message belongs to (layout H.CALL; 0: point to point). */
  call = 0;
  constructor(
    readonly to: number,
    readonly slot: number,
    readonly src: Uint8Array,
    readonly sig: number,
    readonly flags: number,
    readonly roffset: number,
  ) {
    super();
    this.peer = to;
  }
  describe(): string {
    return `send of ${this.src.byteLength} bytes to rank ${this.to} (slot ${this.slot})`;
  }
}

/** How a receive folds incoming bytes into its destination. */
export interface ReduceSink {
  readonly op: ReduceOp;
  readonly dtype: DType;
  readonly elementBytes: number;
  /** dst = a op incoming (a may be dst itself). */
  readonly a: Uint8Array;
}

export class RecvOp extends TransportOp {
  /** Set when a message matched (the others sources then skip it). */
  matched = false;
  /** Bytes delivered. */
  got = 0;
  /** Persistent receives (bound buffers) stay posted and count messages instead. */
  messages = 0;
  /** The collective call whose message this receive takes (0: point to point, any). */
  call = 0;
  constructor(
    readonly srcs: readonly number[],
    readonly slot: number,
    /** Where the bytes go (whole destination; the message lands at dstOffset). */
    readonly dst: Uint8Array,
    /** Bytes expected; a message of another size is a mismatch error. -1: any size up to dst. */
    readonly nbytes: number,
    readonly sig: number,
    readonly reduce: ReduceSink | undefined,
    readonly persistent = false,
  ) {
    super();
  }
  describe(): string {
    const from = this.srcs.length === 1 ? `rank ${this.srcs[0]}` : `any of ranks ${this.srcs.join(', ')}`;
    return `receive of ${this.nbytes < 0 ? 'a message' : `${this.nbytes} bytes`} from ${from} (slot ${this.slot})`;
  }
}

/** Done once a persistent receive (bound buffer) has taken `target` messages. */
export class CountOp extends TransportOp {
  constructor(
    readonly sink: RecvOp,
    readonly target: number,
  ) {
    super();
    this.peer = sink.srcs[0];
  }
  override get done(): boolean {
    return this.sink.messages >= this.target;
  }
  override set done(_v: boolean) {}
  override get error(): WeftError | undefined {
    return this.sink.error;
  }
  override set error(_e: WeftError | undefined) {}
  describe(): string {
    return `message ${this.target} from rank ${this.peer} into the bound buffer of slot ${this.sink.slot}`;
  }
}
