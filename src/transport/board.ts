/**
 * The board: on one host (shm provider) every rank keeps a small area in its inbox that its
 * peers read directly, through the mapping the shm provider already holds. Small collectives
 * use it without messages: a rank publishes its bytes and a sequence number, and reads its
 * peers' bytes as soon as their numbers match; it never waits for a message round trip.
 * A job that spans hosts has one board per host (the host board), among the ranks of that
 * host: the hierarchical allreduce and barrier run their steps inside the host on it, holding
 * it from their first board call to their last (holdAsync; CollectiveTransport.hostBoard says
 * why).
 *
 * Layout (at `boardOffset` in every rank's inbox; u32 words):
 *   line 0   word 0 ARRIVE (sequence number of the last published call); words 1 + 2p and
 *            2 + 2p the signature and byte count of the call in slot p (p = seq & 1); words
 *            5 + 5p .. 9 + 5p the bytes of that call when it has at most INLINE_BYTES. A
 *            small call is then ONE cache line for a peer to fetch, not three.
 *   word 16  DONE      sequence number of the last call whose peers' bytes this rank has read
 *   word 32  SLEEPERS  peers asleep on one of this rank's words (a publisher wakes them)
 *   then two buffers of BOARD_BUFFER_BYTES for larger calls: call k uses slot k & 1, so
 *   publishing call k only waits until every peer is done with call k - 2.
 */
import { WeftError } from '../errors.js';
import { native } from '../native/binding.js';
import { reduceMany, type DType, type ReduceOp } from '../reduce/index.js';
import { loadAcquire } from '../host/acquire.js';
import { copyInto } from '../host/copy.js';
import { waitAsync, waitSync, type Doorbell, type WaitPlan } from '../host/wait.js';
import type { Deadline } from '../util/deadline.js';
import type { Device } from './device.js';
import { BOARD_BUFFER_BYTES, BOARD_HEADER_BYTES } from './layout.js';
import { describeSignature } from './signature.js';

const ARRIVE = 0;
const SIG = 1;
const INLINE = 5;
/** Calls up to this many bytes travel inside the ARRIVE line. */
const INLINE_BYTES = 20;
const DONE = 16;
const SLEEPERS = 32;

interface BoardView {
  words: Int32Array;
  buffers: [Uint8Array, Uint8Array];
  inline: [Uint8Array, Uint8Array];
}

function viewOf(inbox: Uint8Array, offset: number): BoardView {
  const base = inbox.byteOffset + offset;
  const b0 = base + BOARD_HEADER_BYTES;
  const i0 = base + INLINE * 4;
  return {
    words: new Int32Array(inbox.buffer, base, BOARD_HEADER_BYTES >> 2),
    buffers: [new Uint8Array(inbox.buffer, b0, BOARD_BUFFER_BYTES), new Uint8Array(inbox.buffer, b0 + BOARD_BUFFER_BYTES, BOARD_BUFFER_BYTES)],
    inline: [new Uint8Array(inbox.buffer, i0, INLINE_BYTES), new Uint8Array(inbox.buffer, i0 + INLINE_BYTES, INLINE_BYTES)],
  };
}

/** Where a board call folds its peers' bytes: `out = srcs[0] op srcs[1] op ...` over `count` elements. */
export interface BoardFold {
  readonly op: ReduceOp;
  readonly dtype: DType;
  readonly count: number;
  readonly out: Uint8Array;
}

/** Reads every rank's published bytes (rank order) before the board frees them. */
export type BoardRead = (srcs: readonly Uint8Array[]) => void;

/** One board call inside Board.holdAsync (exchangeAsync without the queue: the hold is the queue's entry). */
export type HeldExchange = (bytes: Uint8Array, sig: number, call: BoardCall, fold?: BoardFold | BoardRead) => Promise<void>;

/** The call on whose behalf the board waits: its deadline, and its name for errors (lazy). */
export interface BoardCall {
  readonly deadline: Deadline;
  readonly what: string;
}

export class Board {
  /** boards[i]: member i's board (this rank's own, or a peer's through the mapping). */
  private readonly boards: BoardView[] = [];
  /** This rank's index among the members. */
  private readonly me: number;
  /** Sequence number of the last call (int32, wrapping: every comparison is modular). */
  private seq = 0;
  /** Async users queue here: board calls run one at a time, in call order. */
  private tail: Promise<void> = Promise.resolve();
  private pending = 0;
  /** The last DONE value read from each peer: DONE only grows, so a wait it satisfies needs no fresh read (a cache miss). */
  private readonly knownDone: Int32Array;

  private constructor(
    private readonly device: Device,
    /** members[i]: the job rank of member i (every rank of the job, or of this host), ascending. */
    readonly members: readonly number[],
  ) {
    this.plan = { oversubscribed: device.oversubscribed, call: undefined, probe: this.probe };
    this.me = members.indexOf(device.rank);
    this.knownDone = new Int32Array(members.length);
    for (const r of members) {
      const inbox = r === device.rank ? device.inbox.bytes : (device.pairs[r]?.peerInbox as Uint8Array);
      this.boards.push(viewOf(inbox, device.boardOffset));
    }
  }

  /** A board when every peer's inbox is mapped (shm on one host), else undefined. */
  static open(device: Device): Board | undefined {
    if (device.nic.provider !== 'shm' || !Board.fits(device)) return undefined;
    for (let r = 0; r < device.size; r++) if (r !== device.rank && !device.pairs[r]?.peerInbox) return undefined;
    return new Board(device, [...Array(device.size).keys()]);
  }

  /**
   * The board of this rank's host when the job spans hosts: its members are the ranks whose
   * inboxes this rank maps (the shm pairs of a mixed device: the ranks of its host, which map
   * each other's, so every member finds the same set). Undefined when this rank is alone on
   * its host or maps no peer (WEFT_PROVIDER=ofi).
   */
  static openHost(device: Device): Board | undefined {
    if (!Board.fits(device)) return undefined;
    const members: number[] = [];
    for (let r = 0; r < device.size; r++) if (r === device.rank || device.pairs[r]?.peerInbox) members.push(r);
    return members.length > 1 && members.length < device.size ? new Board(device, members) : undefined;
  }

  private static fits(device: Device): boolean {
    return device.inbox.byteLength >= device.boardOffset + BOARD_HEADER_BYTES + 2 * BOARD_BUFFER_BYTES;
  }

  static readonly capacity = BOARD_BUFFER_BYTES;

  /**
   * One blocking board call: publishes `bytes`, waits for every rank's call with the same
   * sequence number, folds their bytes in rank order into `fold.out` (allreduce) or hands
   * them to `fold` when it is a function (the shared allreduce reads descriptors; a barrier
   * passes nothing), and tells the peers it is done reading.
   */
  exchangeSync(bytes: Uint8Array, sig: number, call: BoardCall, fold?: BoardFold | BoardRead): void {
    if (this.pending > 0) throw this.abort(new WeftError('EINVAL', `${call.what}: an async board call (a small collective, or a hierarchical one holding the host board) is still running on this context; await it before a blocking one`));
    const k = (this.seq = (this.seq + 1) | 0);
    this.begin(call, k);
    this.waitSync(DONE, (k - 2) | 0, call);
    this.publish(k, bytes, sig);
    this.waitSync(ARRIVE, k, call);
    this.finish(k, sig, bytes.byteLength, fold);
  }

  /** exchangeSync for the Promise API: async calls run one at a time, in call order (they share the sequence). */
  exchangeAsync(bytes: Uint8Array, sig: number, call: BoardCall, fold?: BoardFold | BoardRead): Promise<void> {
    return this.queue(() => this.exchangeNow(bytes, sig, call, fold));
  }

  /**
   * Runs `body` as one entry of the async queue: the board calls it makes through `held` (as
   * many as it likes, with awaits between them) come one after another, and no async board
   * call made meanwhile slips in between. A call with several board steps needs this: its
   * later steps start when its earlier work ends, at different times on different ranks, and
   * a call made meanwhile would pair with one of them on one rank and not on another.
   *
   * @example
   * await board.holdAsync(async (held) => {
   *   await held(record, sig, call, read);   // publish, read the peers'
   *   await somethingAcrossHosts();
   *   await held(EMPTY, sig, call);           // every rank is past it
   * });
   */
  holdAsync<T>(body: (held: HeldExchange) => Promise<T>): Promise<T> {
    return this.queue(() => body(this.heldExchange));
  }

  private readonly heldExchange: HeldExchange = (bytes, sig, call, fold) => this.exchangeNow(bytes, sig, call, fold);

  private queue<T>(fn: () => Promise<T>): Promise<T> {
    this.pending++;
    const run = this.tail.then(fn);
    this.tail = run.then(
      () => void this.pending--,
      () => void this.pending--,
    );
    return run;
  }

  private async exchangeNow(bytes: Uint8Array, sig: number, call: BoardCall, fold?: BoardFold | BoardRead): Promise<void> {
    const k = (this.seq = (this.seq + 1) | 0);
    this.begin(call, k);
    await this.waitAsync(DONE, (k - 2) | 0, call);
    this.publish(k, bytes, sig);
    await this.waitAsync(ARRIVE, k, call);
    this.finish(k, sig, bytes.byteLength, fold);
  }

  private publish(k: number, bytes: Uint8Array, sig: number): void {
    const me = this.boards[this.me];
    const p = k & 1;
    const n = bytes.byteLength;
    copyInto(n <= INLINE_BYTES ? me.inline[p] : me.buffers[p], 0, bytes, 0, n);
    me.words[SIG + 2 * p] = sig;
    me.words[SIG + 2 * p + 1] = n;
    this.store(ARRIVE, k);
  }

  /** Every peer published call k: check and fold their bytes, then free our reading of them. */
  private finish(k: number, sig: number, nbytes: number, fold: BoardFold | BoardRead | undefined): void {
    const srcs = this.views(k, sig, nbytes);
    try {
      if (typeof fold === 'function') fold(srcs);
      else if (fold) reduceMany(fold.op, fold.dtype, fold.count, fold.out, srcs);
    } finally {
      this.store(DONE, k);
    }
  }

  /** Views of the last size used, per parity: steady loops allocate nothing. */
  private readonly cached: [Uint8Array[], Uint8Array[]] = [[], []];
  private cachedBytes: [number, number] = [-1, -1];

  private views(k: number, sig: number, nbytes: number): Uint8Array[] {
    const p = k & 1;
    const out = this.cached[p];
    const fresh = this.cachedBytes[p] !== nbytes;
    this.cachedBytes[p] = nbytes;
    for (let r = 0; r < this.boards.length; r++) {
      const b = this.boards[r];
      const theirSig = b.words[SIG + 2 * p] >>> 0;
      const theirBytes = b.words[SIG + 2 * p + 1] >>> 0;
      if (theirSig !== sig >>> 0) {
        throw this.abort(new WeftError('EINVAL', `${this.device.label}: ${describeSignature(sig)} met rank ${this.members[r]}, which called ${describeSignature(theirSig)}; every rank must make the same collective calls in the same order, with the same dtype, op and root`));
      }
      if (theirBytes !== nbytes) {
        throw this.abort(new WeftError('EINVAL', `${this.device.label}: ${describeSignature(sig)}: rank ${this.members[r]} passed ${theirBytes} bytes where this rank passed ${nbytes}; every rank must pass arrays of matching lengths (and dtypes)`));
      }
      if (fresh) out[r] = (nbytes <= INLINE_BYTES ? b.inline[p] : b.buffers[p]).subarray(0, nbytes);
    }
    return out;
  }

  private abort(err: WeftError): WeftError {
    this.device.abort(err);
    return err;
  }

  private store(word: number, k: number): void {
    const w = this.boards[this.me].words;
    Atomics.store(w, word, k);
    // The store's full barrier orders this load after it (host/acquire.ts).
    if (loadAcquire(w, SLEEPERS) > 0) native.futexWake(w, word);
  }

  /** The first member whose `word` is below k, or -1. */
  private behind(word: number, k: number): number {
    const me = this.me;
    const known = this.knownDone;
    for (let r = 0; r < this.boards.length; r++) {
      if (r === me) continue;
      if (word === DONE) {
        if (((known[r] - k) | 0) >= 0) continue;
        const v = Atomics.load(this.boards[r].words, DONE);
        known[r] = v;
        if (((v - k) | 0) < 0) return r;
      } else if (((Atomics.load(this.boards[r].words, word) - k) | 0) < 0) return r;
    }
    return -1;
  }

  // ---- waiting: the one waiting loop, sleeping on the word of the rank we wait for

  /** What the current wait waits for: every peer's `word` at `k` or beyond. */
  private waitWord = ARRIVE;
  private waitK = 0;
  /** The call of the latest board step, and the sequence number of its first step (for timeout texts). */
  private callOf: BoardCall | undefined;
  private callFirstK = 0;
  private readonly plan: WaitPlan & { call: BoardCall | undefined };
  private readonly isReady = (): boolean => this.behind(this.waitWord, this.waitK) < 0;

  /** Between sleeps: dead peers and ABORT messages surface, the deadline is checked. */
  private readonly probe = (): void => {
    const call = this.plan.call as BoardCall;
    this.device.probe();
    // Every rank's part is here: the call completes even when another rank aborted the job
    // meanwhile (it passed this call, then failed a later one); this rank learns of it at its
    // next call, as on the message paths. Failing here instead made the outcome of a finished
    // barrier depend on whether an ABORT overtook its last poll. (The waiting loop then ends
    // the wait without checking the deadline either: host/wait.ts probe.)
    if (this.isReady()) return;
    if (this.device.failure) throw new WeftError(this.device.failure.code, `${call.what}: ${this.device.failure.message.replace(/^rank \d+: /, '')}`, { cause: this.device.failure });
    // A pair fails without aborting the job when nothing of the transport was in flight on
    // it, which is the case for a board call: look, or wait out the timeout for a dead rank.
    const dead = this.device.failedPeer();
    if (dead) {
      const e = dead.error as WeftError;
      throw this.abort(new WeftError(e.code, `${call.what}: rank ${dead.peer} is gone (intra-host board): ${e.message}`, { cause: e }));
    }
    const { deadline } = call;
    if (deadline.signal?.aborted || deadline.remaining() <= 0) {
      const i = this.behind(this.waitWord, this.waitK);
      const r = this.members[i] ?? -1;
      const why = deadline.signal?.aborted ? "aborted by the caller's AbortSignal" : `timed out after ${Math.round(deadline.timeoutMs)} ms`;
      const stopped = this.device.stoppedText();
      throw this.abort(new WeftError(deadline.signal?.aborted ? 'EABORTED' : 'ETIMEDOUT', `${call.what}: ${why} waiting for rank ${r} (intra-host board)${stopped || this.laggard(i)}`));
    }
  };

  /** Notes the sequence number of a call's first board step (every call has a BoardCall of its own). */
  private begin(call: BoardCall, k: number): void {
    if (call === this.callOf) return;
    this.callOf = call;
    this.callFirstK = k;
  }

  /**
   * What a timeout says of member i, the first one behind. One that made an earlier board step
   * of this call is in it and has not come back from its work since: on a host board, usually
   * a leader's step across hosts, held up by another host. (A leader that stalled there used to
   * be reported as if it might not be making the call at all.)
   */
  private laggard(i: number): string {
    const w = i >= 0 ? this.boards[i]?.words : undefined;
    if (w && this.waitWord === ARRIVE && ((Atomics.load(w, ARRIVE) - this.callFirstK) | 0) >= 0) {
      const across = this.members.length < this.device.size ? ' (when it leads this host, its step across hosts: another host may be late or gone)' : '';
      return `; that rank is in this call (it made an earlier board step of it) and has not finished its work since${across}`;
    }
    return '; is that rank alive and making the same call?';
  }

  /** Sleeps on the word of the first rank behind; it wakes us when it moves (SLEEPERS > 0). */
  private readonly bell: Doorbell = {
    sleepSync: (ms) => {
      const r = this.behind(this.waitWord, this.waitK);
      if (r < 0) return;
      const w = this.boards[r].words;
      const v = this.sleepValue(w);
      if (v === undefined) return;
      native.futexWait(w, this.waitWord, v, ms);
      Atomics.sub(w, SLEEPERS, 1);
    },
    sleepAsync: async (ms) => {
      const r = this.behind(this.waitWord, this.waitK);
      if (r < 0) return;
      const w = this.boards[r].words;
      const v = this.sleepValue(w);
      if (v === undefined) return;
      try {
        await native.futexWaitAsync(w, this.waitWord, v, ms);
      } finally {
        Atomics.sub(w, SLEEPERS, 1);
      }
    },
  };

  /** Registers as a sleeper on a peer's word: the value to sleep on, or undefined if it moved. */
  private sleepValue(w: Int32Array): number | undefined {
    Atomics.add(w, SLEEPERS, 1);
    const v = Atomics.load(w, this.waitWord);
    if (((v - this.waitK) | 0) < 0) return v;
    Atomics.sub(w, SLEEPERS, 1);
    return undefined;
  }

  private waitSync(word: number, k: number, call: BoardCall): void {
    if (this.behind(word, k) < 0) return;
    this.waitWord = word;
    this.waitK = k;
    this.plan.call = call;
    waitSync(this.isReady, this.bell, this.plan);
  }

  private waitAsync(word: number, k: number, call: BoardCall): Promise<void> {
    if (this.behind(word, k) < 0) return Promise.resolve();
    this.waitWord = word;
    this.waitK = k;
    this.plan.call = call;
    return waitAsync(this.isReady, this.bell, this.plan);
  }
}
