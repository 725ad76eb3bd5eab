/**
 * The transport Device (Gloo's transport::Device): one per process, over one NIC device. It
 * owns the inbox (one ring per peer), the pairs, and progress: polling the completion queue
 * and dispatching each completion to its pair in O(1) by QP number. Waits come in two kinds:
 * `waitSync` busy-polls (then sleeps) the calling thread; `waitAsync` shares one progress loop
 * among every pending promise, so concurrent waiters never starve each other.
 */
import { WeftError } from '../errors.js';
import { native } from '../native/binding.js';
import { Deadline } from '../util/deadline.js';
import { CompletionBatch, Opcode, Status, statusName, type Device as NicDevice, type MemoryRegion, type QueuePair } from '../nic/types.js';
import { BOARD_BYTES, ringGeometry, type RingGeometry } from './layout.js';
import { Board } from './board.js';
import type { TransportOp } from './ops.js';
import { Pair, type PairHost } from './pair.js';
import { SharedArrays } from './shared-arrays.js';
import { BytePool } from './byte-pool.js';

/** Ring shape; every rank of a job must use the same. */
export interface TransportOptions {
  /** Payload bytes per ring slot (a multiple of 64; default 256 KiB on shm, 1 MiB on ofi). */
  chunkBytes?: number;
  /** Slots per peer ring (default 8 on shm, 4 on ofi). */
  slots?: number;
}

/**
 * Ring shapes. On shm a chunk is a memcpy into the peer's ring, and small slots keep the ring
 * in cache. On ofi every chunk costs fabric operations and system calls (two for a zero-copy
 * chunk) and a slot is a TCP transfer: 1 MiB chunks took a 2 MiB allreduce at 2 ranks from
 * 954 to 635-675 us here; 4 slots keep a 16-rank inbox at 80 MiB.
 */
const DEFAULT_RING = { shm: { chunk: 256 * 1024, slots: 8 }, ofi: { chunk: 1024 * 1024, slots: 4 } };


/** Drops a leading "rank N: " so wrapped messages name the rank once. */
function unlabel(message: string, label: string): string {
  return message.startsWith(`${label}: `) ? message.slice(label.length + 2) : message;
}

/** Async progress: poll this long for completions before waiting on the CQ. */
const SPIN_MS = 0.2;
/** ...and let the event loop run at least this often while completions flow. */
const YIELD_EVERY_MS = 1;

/** One event-loop turn: pending microtasks and I/O callbacks run. */
function turn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

interface Waiter {
  ops: readonly TransportOp[];
  deadline: Deadline;
  what: string;
  resolve(): void;
  reject(err: unknown): void;
}

export class Device implements PairHost {
  readonly geometry: RingGeometry;
  readonly inbox: MemoryRegion;
  readonly staging: MemoryRegion;
  readonly stagedRings: boolean;
  readonly label: string;
  readonly pairs: (Pair | undefined)[];
  /** Where the board starts in the inbox (every rank's is at the same offset). */
  readonly boardOffset: number;
  /** Small intra-host collectives without messages (shm only; see board.ts). */
  board: Board | undefined;
  /** Typed arrays in registered memory (`alloc`), and peers' ones read in place. */
  readonly shared: SharedArrays;
  readonly pool = new BytePool();
  /** The error that aborted the job, if any: every later operation fails with it. */
  failure: WeftError | undefined;
  private readonly byQpn: (Pair | undefined)[] = [];
  private readonly batch = new CompletionBatch(256);
  private readonly waiters: Waiter[] = [];
  private looping = false;
  closed = false;

  constructor(
    readonly nic: NicDevice,
    readonly rank: number,
    readonly size: number,
    options: TransportOptions = {},
  ) {
    const ring = nic.provider === 'shm' ? DEFAULT_RING.shm : DEFAULT_RING.ofi;
    const chunk = options.chunkBytes ?? ring.chunk;
    const slots = options.slots ?? ring.slots;
    if (!Number.isInteger(chunk) || chunk < 64 || chunk % 64 !== 0 || chunk > 2 ** 26) throw new WeftError('EINVAL', `transport: chunkBytes must be a multiple of 64 between 64 and 64 MiB, got ${chunk}`);
    if (!Number.isInteger(slots) || slots < 1 || slots > 1024) throw new WeftError('EINVAL', `transport: slots must be an integer in [1, 1024], got ${slots}`);
    this.geometry = ringGeometry(chunk, slots);
    this.label = nic.label;
    // On shm the inbox also holds this rank's board, which peers read directly.
    this.boardOffset = size * this.geometry.ringBytes;
    this.inbox = nic.allocate(this.boardOffset + (nic.provider === 'shm' ? BOARD_BYTES : 64));
    // shm writes straight into the peer's ring: the staging region only serves as the local
    // side of 0-byte doorbells. ofi copies into a staging ring that mirrors the peer's.
    this.stagedRings = nic.provider !== 'shm';
    this.staging = nic.allocate(this.stagedRings ? Math.max(64, size * this.geometry.ringBytes) : 64);
    this.pairs = new Array(size).fill(undefined);
    this.shared = new SharedArrays({ label: nic.label, nic, queuePair: (r) => this.pairs[r]?.qp });
  }

  /** The inbox descriptor every peer needs (published with the QP addresses). */
  descriptor(): Uint8Array {
    return this.inbox.descriptor();
  }

  /** Wraps connected QPs (qps[p] toward rank p) into pairs, given each peer's inbox descriptor. */
  connect(qps: readonly (QueuePair | undefined)[], inboxes: readonly Uint8Array[]): void {
    qps.forEach((qp, p) => {
      if (!qp || p === this.rank) return;
      const pair = new Pair(this, p, qp);
      pair.attach(inboxes[p]);
      this.pairs[p] = pair;
      this.byQpn[qp.qpn] = pair;
    });
    this.board = Board.open(this);
  }

  pair(p: number): Pair {
    const pair = this.pairs[p];
    if (!pair) throw new WeftError('EINVAL', `${this.label}: no pair toward rank ${p} (world size ${this.size}${p === this.rank ? '; that is this rank' : ''})`);
    return pair;
  }

  /** Polls completions and dispatches them; returns how many were handled. */
  progress(): number {
    let total = 0;
    for (;;) {
      const b = this.batch;
      const n = this.nic.cq.poll(b);
      let failures = 0;
      for (let i = 0; i < n; i++) {
        const pair = this.byQpn[b.qpn[i]];
        if (!pair) continue;
        if (b.status[i] !== Status.SUCCESS) failures++;
        else if (b.opcode[i] === Opcode.RECV_WRITE_IMM) pair.onImm(b.imm[i]);
      }
      // Errors after the messages: an ABORT that explains them (a peer that gave up and closed)
      // must win over the error its closing caused.
      for (let i = 0; failures > 0 && i < n; i++) {
        const pair = this.byQpn[b.qpn[i]];
        if (pair && b.status[i] !== Status.SUCCESS) {
          failures--;
          this.pairFailed(pair, b.errors[i], b.status[i]);
        }
      }
      total += n;
      if (n < b.capacity) return total;
    }
  }

  private pairFailed(pair: Pair, err: WeftError | undefined, status: number): void {
    if (pair.error) return;
    const dead = status === Status.PEER_DEAD;
    const detail = err ? unlabel(err.message, this.label) : statusName(status);
    const e = new WeftError(dead ? 'EPEERDEAD' : (err?.code ?? 'ETRANSPORT'), `${this.label}: rank ${pair.peer} ${dead ? 'died' : `failed (${statusName(status)})`}: ${detail}`, { cause: err });
    const busy = pair.busy;
    pair.fail(e);
    // The others may be waiting on ranks that wait on this one: tell everybody. A peer that
    // left with nothing in flight toward it (it finished and exited) stops nobody.
    if (busy) this.abort(e);
  }

  /**
   * Aborts the job: fails every operation here and tells every live peer, whose operations then
   * fail with this reason too. The context cannot be used afterwards.
   */
  abort(err: WeftError): void {
    if (this.failure) return;
    this.failure = err;
    // The code travels first, so a peer's calls fail with the same kind of error (a rank whose
    // mismatched call a peer noticed first still gets EINVAL, not a bare ECLOSED).
    for (const p of this.pairs) p?.sendAbort(`${err.code} ${unlabel(err.message, this.label)}`);
    for (const p of this.pairs) p?.fail(err);
    this.settleWaiters();
  }

  /** More ranks on this host than cores (the NIC knows): spinning waits yield the core. */
  get oversubscribed(): boolean {
    return this.nic.oversubscribed;
  }

  /** The registered region `view` lies in (ofi sends write from there instead of staging a copy). */
  regionOf(view: Uint8Array): MemoryRegion | undefined {
    return this.stagedRings ? this.shared.regionOf(view) : undefined;
  }

  peerAborted(peer: number, text: string): void {
    if (this.failure) return;
    const m = /^(EINVAL|ETIMEDOUT|EABORTED|EPEERDEAD|EPROTO|ETRANSPORT|EREMOTEACCESS) ([^]*)$/.exec(text);
    const code = (m?.[1] ?? 'ECLOSED') as WeftError['code'];
    const err = new WeftError(code, `${this.label}: the job was aborted by rank ${peer}: ${m ? m[2] : text}`);
    this.failure = err;
    for (const p of this.pairs) p?.fail(err);
    this.settleWaiters();
  }

  /** Throws the job's failure, if any, before an operation starts. */
  checkUsable(what: string): void {
    if (this.closed) throw new WeftError('ECLOSED', `${this.label}: ${what}: the context is closed`);
    if (this.failure) throw new WeftError(this.failure.code, `${this.label}: ${what}: the job was aborted earlier: ${this.failure.message}`, { cause: this.failure });
  }

  // ------------------------------------------------------------------ waits

  /** Busy-polls until every op settled; throws the first failure or the timeout. */
  waitSync(ops: readonly TransportOp[], deadline: Deadline, what: string): void {
    for (;;) {
      this.progress();
      const r = this.check(ops, deadline, what);
      if (r === true) return;
      if (r) throw r;
      try {
        this.nic.cq.waitSync({ timeoutMs: Math.max(0, Math.min(deadline.remaining(), 20)) });
      } catch (err) {
        if ((err as WeftError).code !== 'ETIMEDOUT') throw err;
      }
    }
  }

  /**
   * Polls for up to `ms` without yielding; true when every op is done. Async collectives try
   * this before awaiting: a step whose data is already streaming in finishes without an
   * event-loop round trip per chunk, and the event loop is held for at most `ms` per step.
   */
  pollFor(ops: readonly TransportOp[], ms: number): boolean {
    const until = performance.now() + ms;
    for (let i = 0; ; i++) {
      // More ranks than cores: the peer we wait for may need this core.
      if (i > 0 && this.oversubscribed) native.yieldThread();
      this.progress();
      let all = true;
      for (let j = 0; j < ops.length; j++) {
        const op = ops[j];
        if (op.error) return false;
        if (!op.done) all = false;
      }
      if (all) return true;
      if ((i & 15) === 15 && performance.now() > until) return false;
    }
  }

  /** Resolves when every op settled; rejects with the first failure or the timeout. */
  waitAsync(ops: readonly TransportOp[], deadline: Deadline, what: string): Promise<void> {
    this.progress();
    const r = this.check(ops, deadline, what);
    if (r === true) return Promise.resolve();
    if (r) return Promise.reject(r);
    return new Promise<void>((resolve, reject) => {
      const w: Waiter = { ops, deadline, what, resolve, reject };
      this.waiters.push(w);
      const signal = deadline.signal;
      if (signal) {
        const onAbort = () => this.settleWaiters();
        signal.addEventListener('abort', onAbort, { once: true });
        const done = () => signal.removeEventListener('abort', onAbort);
        w.resolve = () => (done(), resolve());
        w.reject = (e) => (done(), reject(e));
      }
      if (!this.looping) void this.loop();
    });
  }

  /**
   * The shared progress loop of async waiters. While completions flow it polls in bursts (up to
   * SPIN_MS without finding any), giving the event loop a turn at least every YIELD_EVERY_MS
   * and whenever a waiter was settled (its algorithm then posts its next operations); when
   * nothing comes, it waits on the completion queue (spin, yield, then sleep).
   */
  private async loop(): Promise<void> {
    this.looping = true;
    try {
      let lastTurn = performance.now();
      while (this.waiters.length > 0) {
        let n = this.progress();
        const before = this.waiters.length;
        this.settleWaiters();
        if (this.waiters.length === 0) break;
        let now = performance.now();
        if (this.waiters.length < before || now - lastTurn > YIELD_EVERY_MS) {
          await turn();
          lastTurn = performance.now();
          continue;
        }
        const until = now + SPIN_MS;
        while (n === 0 && (now = performance.now()) < until) {
          if (this.oversubscribed) native.yieldThread();
          n = this.progress();
        }
        if (n > 0) continue;
        let slice = 20;
        for (const w of this.waiters) slice = Math.min(slice, w.deadline.remaining());
        try {
          await this.nic.cq.wait({ timeoutMs: Math.max(0, slice) });
        } catch (err) {
          if ((err as WeftError).code !== 'ETIMEDOUT') {
            for (const w of this.waiters.splice(0)) w.reject(err);
          }
        }
        lastTurn = performance.now();
      }
    } finally {
      this.looping = false;
    }
  }

  private settleWaiters(): void {
    for (let i = 0; i < this.waiters.length; i++) {
      const w = this.waiters[i];
      const r = this.check(w.ops, w.deadline, w.what);
      if (r === false) continue;
      this.waiters.splice(i--, 1);
      if (r === true) w.resolve();
      else w.reject(r);
    }
  }

  /** true: all done; an error: stop with it; false: keep waiting. */
  private check(ops: readonly TransportOp[], deadline: Deadline, what: string): true | false | WeftError {
    let all = true;
    for (let i = 0; i < ops.length; i++) {
      const op = ops[i];
      if (op.error) return new WeftError(op.error.code, `${what}: ${unlabel(op.error.message, this.label)}`, { cause: op.error });
      if (!op.done) all = false;
    }
    if (all) return true;
    if (deadline.signal?.aborted) return new WeftError('EABORTED', `${what}: aborted by the caller's AbortSignal while waiting for ${this.pendingText(ops)}`, { cause: deadline.signal.reason });
    if (deadline.remaining() <= 0) {
      return new WeftError('ETIMEDOUT', `${what}: timed out after ${Math.round(deadline.timeoutMs)} ms waiting for ${this.pendingText(ops)}; is that rank alive and making the same call? Raise timeoutMs (or WEFT_TIMEOUT_MS) if it is just slow`);
    }
    return false;
  }

  private pendingText(ops: readonly TransportOp[]): string {
    const pending = ops.filter((o) => !o.settled).map((o) => o.describe());
    return pending.length > 3 ? `${pending.slice(0, 3).join('; ')} and ${pending.length - 3} more` : pending.join('; ');
  }

  /**
   * After an abort, keeps progressing for a moment before the rings go away: peers still
   * sending to this rank then learn why from the ABORT message, not from a refused write.
   */
  async linger(ms = 300): Promise<void> {
    if (!this.failure || this.closed) return;
    const until = performance.now() + ms;
    while (performance.now() < until) {
      this.progress();
      await new Promise((r) => setTimeout(r, 5));
    }
  }

  /** Fails pending waits and releases the rings (the NIC device is closed by its owner). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    const err = new WeftError('ECLOSED', `${this.label}: the context was closed`);
    for (const p of this.pairs) p?.fail(err);
    for (const w of this.waiters.splice(0)) w.reject(err);
  }
}
