/**
 * The transport Device (Gloo's transport::Device): one per process, over the process's one
 * NIC device. It owns the inbox (one ring per peer) and the pairs; the NIC's completion
 * router hands it the completions of its QPs (in O(1) by QP number), and every wait goes
 * through the router's one waiting loop: `waitSync` blocks the calling thread, `waitAsync`
 * joins the process's shared progress loop, so concurrent waiters never starve each other.
 */
import { codedText, fromCodedText, WeftError } from '../errors.js';
import { spin, type WaitCall } from '../host/wait.js';
import { isPeerStopped } from '../host/identity.js';
import type { Deadline } from '../util/deadline.js';
import { debugLog } from '../util/debug-log.js';
import { Opcode, Status, statusName, type CompletionBatch, type Device as NicDevice, type MemoryRegion, type QueuePair } from '../nic/types.js';
import type { CompletionRouter, CompletionSink } from '../nic/completion-router.js';
import { BOARD_BYTES, ringGeometry, type RingGeometry } from './layout.js';
import { Board } from './board.js';
import { CountOp, RecvOp, type TransportOp } from './ops.js';
import { Pair, ZERO_COPY_WR, type PairHost } from './pair.js';
import { SharedArrays } from './shared-arrays.js';
import { BytePool } from './byte-pool.js';
import { labelText, type CollectiveTransport, type WaitLabel } from './group-view.js';

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

const NO_OPS: readonly TransportOp[] = [];
/** A peer on another host silent this long on the fabric is named in timeouts (ms). */
const SILENT_MS = 1000;

/** The start of an abort's reason as a rank passes it on: names the rank that aborted. */
const ABORTED_BY = /^the job was aborted by rank \d+: /;

export class Device implements PairHost, CompletionSink, CollectiveTransport {
  /** The job's own calls use slots from 0 (subgroups: GroupView). */
  readonly slotBase = 0;
  /** The next subgroup id this process would propose (see proposeGroupId). */
  private nextGroupId = 1;
  /** The last subgroup creation of this process: the next one starts after it (job/communicator.ts). */
  groupCreation: Promise<unknown> = Promise.resolve();
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
  /**
   * A job that spans hosts: the board of this rank's host (its ranks only), which the
   * hierarchy's host group uses (GroupView's hostBoard option); undefined otherwise.
   */
  hostBoard: Board | undefined;
  /** Typed arrays in registered memory (`alloc`), and peers' ones read in place. */
  readonly shared: SharedArrays;
  readonly pool = new BytePool();
  /** The error that aborted the job, if any: every later operation fails with it. */
  failure: WeftError | undefined;
  /** Calls made so far per slot (collective and tag): every rank counts the same (layout H.CALL). */
  private readonly calls = new Map<number, number>();
  /** Slots with a message-based call in flight: a second one on the same slot would mix their messages. */
  private readonly busySlots = new Set<number>();
  /** The last call ended per slot (Pair checks arrivals against it). */
  private readonly finished = new Map<number, number>();
  readonly nic: NicDevice;
  private readonly byQpn: (Pair | undefined)[] = [];
  /** Failed completions of the batch being dispatched: handled after its messages. */
  private readonly failedPairs: Pair[] = [];
  private readonly failedErrors: (WeftError | undefined)[] = [];
  private readonly failedStatus: number[] = [];
  /**
   * Peers whose pair failed (the peer died or its connection broke), counted even when nothing
   * was in flight toward them: a close fence stops waiting for the job then.
   */
  lostPeers = 0;
  closed = false;

  constructor(
    readonly router: CompletionRouter,
    readonly rank: number,
    readonly size: number,
    options: TransportOptions = {},
  ) {
    const nic = router.device;
    this.nic = nic;
    const ring = nic.provider === 'shm' ? DEFAULT_RING.shm : DEFAULT_RING.ofi;
    const chunk = options.chunkBytes ?? ring.chunk;
    const slots = options.slots ?? ring.slots;
    if (!Number.isInteger(chunk) || chunk < 64 || chunk % 64 !== 0 || chunk > 2 ** 26) throw new WeftError('EINVAL', `transport: chunkBytes must be a multiple of 64 between 64 and 64 MiB, got ${chunk}`);
    if (!Number.isInteger(slots) || slots < 1 || slots > 1024) throw new WeftError('EINVAL', `transport: slots must be an integer in [1, 1024], got ${slots}`);
    this.geometry = ringGeometry(chunk, slots);
    this.label = nic.label;
    // On shm the inbox also holds this rank's board, which peers read directly (on a mixed
    // device, the peers of this rank's host: the host board).
    this.boardOffset = size * this.geometry.ringBytes;
    this.inbox = nic.allocate(this.boardOffset + (nic.provider === 'shm' || nic.provider === 'mixed' ? BOARD_BYTES : 64));
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
      this.router.attach(qp.qpn, this);
    });
    this.board = Board.open(this);
    if (!this.board) this.hostBoard = Board.openHost(this);
  }

  /** The job's transport numbers ranks as the job does. */
  worldRank(r: number): number {
    return r;
  }
  groupRank(w: number): number {
    return w;
  }
  get device(): Device {
    return this;
  }

  /**
   * Subgroup ids: every rank of the parent proposes its next id, the largest proposal wins
   * and every member moves past it (adoptGroupId). A process never reuses an id and makes its
   * groups one at a time (groupCreation), so two groups that share a rank never share an id;
   * disjoint groups may, harmlessly (their messages travel on different pairs).
   */
  proposeGroupId(): number {
    return this.nextGroupId;
  }
  adoptGroupId(id: number): void {
    if (id >= this.nextGroupId) this.nextGroupId = id + 1;
  }

  pair(p: number): Pair {
    const pair = this.pairs[p];
    if (!pair) throw new WeftError('EINVAL', `${this.label}: no pair toward rank ${p} (world size ${this.size}${p === this.rank ? '; that is this rank' : ''})`);
    return pair;
  }

  /** Polls the process's CQ (every owner's completions go to their owner); returns how many. */
  progress(): number {
    return this.router.poll();
  }

  /**
   * Hands the operations posted so far to the fabric now (ofi batches them until the next
   * poll): a plan that posts a step and then works on its own memory before waiting lets the
   * step's bytes move meanwhile.
   */
  flush(): void {
    this.nic.flush?.();
  }

  /**
   * For slow paths (a waiter about to yield or sleep): lets the NIC check its peers'
   * liveness (rate-limited there; polls do it only now and then), then polls.
   */
  probe(): void {
    this.nic.cq.ready();
    this.router.poll();
  }

  /**
   * ' rank 3 (pid 123) is stopped (SIGSTOP or a debugger): ...' when a peer on this host is
   * stopped, else ''. Appended to timeouts: in a ring every rank waits for its neighbour,
   * and only this names the rank that all of them wait for.
   */
  stoppedText(): string {
    // (Also names peers on other hosts that went silent.)
    const stopped: string[] = [];
    for (const p of this.pairs) {
      const id = p?.qp.peerIdentity;
      if (p && id && isPeerStopped(id)) stopped.push(`rank ${p.peer} (pid ${id.pid})`);
    }
    let text = '';
    if (stopped.length > 0) text = `; ${stopped.join(' and ')} ${stopped.length > 1 ? 'are' : 'is'} stopped (SIGSTOP, Ctrl-Z or a debugger): every other rank waits for ${stopped.length > 1 ? 'them' : 'it'}; resume it with SIGCONT or end the job`;
    // A pair that failed with nothing in flight aborted nobody (a peer that finished and exited
    // stops no one), but a call now stuck is most likely waiting, through others, on that rank.
    const gone = this.failedPeers();
    if (gone.length > 0) text += `; ${gone.map((p) => `rank ${p.peer}`).join(' and ')} ${gone.length > 1 ? 'are' : 'is'} gone (${gone[0].error!.code}: ${unlabel(gone[0].error!.message, this.label)}), which probably holds up this call`;
    // Peers on other hosts cannot be looked up; the fabric says which stopped answering.
    const silent: string[] = [];
    for (const p of this.pairs) {
      const ms = p?.qp.unansweredMs ?? 0;
      if (p && !p.error && ms >= SILENT_MS) silent.push(`rank ${p.peer}${p.qp.peerAddress ? ` (${p.qp.peerAddress})` : ''}`);
    }
    if (silent.length === 1) text += `; ${silent[0]} has not answered the fabric for over ${SILENT_MS / 1000} s: its process or host is probably gone`;
    // A dead peer can also hold up the fabric's queue toward live ones: say so.
    else if (silent.length > 1) text += `; ${silent.join(' and ')} have not answered the fabric for over ${SILENT_MS / 1000} s: one of them (or its host) is probably gone, and may be holding up the fabric toward the others`;
    return text;
  }

  /** The first peer whose pair failed (a dead rank, a broken connection), if any. */
  failedPeer(): Pair | undefined {
    return this.failedPeers()[0];
  }

  /** The pairs that failed on their own (a dead rank, a broken connection), not with the job's abort. */
  private failedPeers(): Pair[] {
    return this.pairs.filter((p): p is Pair => p?.error !== undefined && p.error !== this.failure);
  }

  /** CompletionSink: a completion of one of our QPs. */
  take(b: CompletionBatch, i: number): void {
    const pair = this.byQpn[b.qpn[i]];
    if (pair === undefined) return;
    if (b.status[i] !== Status.SUCCESS) {
      this.failedPairs.push(pair);
      this.failedErrors.push(b.errors[i]);
      this.failedStatus.push(b.status[i]);
    } else if (b.opcode[i] === Opcode.RECV_WRITE_IMM) {
      pair.onImm(b.imm[i]);
    } else if (b.opcode[i] === Opcode.WRITE_IMM && b.wrId[i] === ZERO_COPY_WR) {
      // A failure of this pair earlier in the batch waits for endBatch (after ABORT messages):
      // it may be the write of the oldest zero-copy send, which must not pass for done.
      if (!this.failedPairs.includes(pair)) pair.onZeroCopyWritten();
    }
  }

  /**
   * Errors after the messages: an ABORT that explains them (a peer that gave up and closed)
   * must win over the error its closing caused.
   */
  endBatch(): void {
    const n = this.failedPairs.length;
    if (n === 0) return;
    for (let i = 0; i < n; i++) this.pairFailed(this.failedPairs[i], this.failedErrors[i], this.failedStatus[i]);
    this.failedPairs.length = 0;
    this.failedErrors.length = 0;
    this.failedStatus.length = 0;
  }

  private pairFailed(pair: Pair, err: WeftError | undefined, status: number): void {
    if (pair.error) return;
    this.lostPeers++;
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
    debugLog('%s: aborting the job: %s', this.label, err.message);
    this.failJob(err);
  }

  /**
   * Fails every operation with `err` and tells every peer (an ABORT, once per pair). The code
   * travels first, so a peer's calls fail with the same kind of error (a rank whose mismatched
   * call a peer noticed first still gets EINVAL, not a bare ECLOSED).
   */
  private failJob(err: WeftError): void {
    this.failure = err;
    const reason = this.abortText(err);
    for (const p of this.pairs) p?.sendAbort(reason);
    for (const p of this.pairs) p?.fail(err);
    this.router.kick();
  }

  /** What an ABORT carries: the code, then the message without this rank's label. */
  private abortText(err: WeftError): string {
    return codedText(err.code, unlabel(err.message, this.label));
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
    if (!this.failure) {
      const { code, message } = fromCodedText(text, 'ECLOSED');
      // A passed-on ABORT already names the rank that aborted: keep it, unnested.
      const why = ABORTED_BY.test(message) ? message : `the job was aborted by rank ${peer}: ${message}`;
      const err = new WeftError(code, `${this.label}: ${why}`);
      debugLog('%s', err.message);
      // Passed on to every peer (once per pair), not only answered: a rank that heard first
      // over shared memory would otherwise close, and a rank on another host, whose ABORT from
      // the aborting rank was still on the wire, failed with the closed connection (EPEERDEAD
      // or ETRANSPORT) instead of the job's error. Sent before any close on the same pairs,
      // the ABORT arrives first, and this rank's close lingers until each has heard.
      this.failJob(err);
    }
    // The answer (once per pair), when this rank had failed already: the aborting rank's close
    // lingers until each rank it told has heard, instead of a fixed time.
    this.pairs[peer]?.sendAbort(this.abortText(this.failure!));
  }

  /** The number of the next collective call on `slot` (from 1; wraps at 2^32). */
  nextCall(slot: number): number {
    const n = ((this.calls.get(slot) ?? 0) + 1) >>> 0 || 1;
    this.calls.set(slot, n);
    return n;
  }

  /**
   * Marks `slot` busy for a message-based call; EINVAL when a call of the same collective and
   * tag is still in flight on this rank (their messages would mix: concurrent calls need
   * distinct tags).
   */
  claimSlot(slot: number, what: WaitLabel): void {
    if (this.busySlots.has(slot)) throw new WeftError('EINVAL', `${labelText(what)}: a call of the same collective and tag is still in flight on this rank; await it first, or give concurrent calls distinct tags`);
    this.busySlots.add(slot);
  }

  releaseSlot(slot: number): void {
    this.busySlots.delete(slot);
  }

  /** A message of call `call` of `slot` arriving now belongs to a call this rank has ended. */
  isStale(slot: number, call: number): boolean {
    const done = this.finished.get(slot);
    return done !== undefined && ((call - done) | 0) <= 0;
  }

  /**
   * Call `call` of `slot` ended on a path without messages (the board, the shared allreduce):
   * the stale check compares with it, so that board calls between two message-based calls on
   * one tag never let the last finished number fall 2^31 behind and wrap.
   */
  markFinished(slot: number, call: number): void {
    this.finished.set(slot, call);
  }

  /**
   * This rank finished call `call` of `slot`: a message of it still queued from some peer was
   * never asked for, so the ranks disagree and this call's result may be wrong; that aborts
   * the job (EINVAL) and throws it here.
   */
  finishCall(slot: number, call: number): void {
    this.finished.set(slot, call);
    for (const p of this.pairs) {
      const stale = p?.checkStale(slot, call);
      if (stale) throw stale;
    }
    // A job aborted meanwhile by a later call of another rank: this call's result is right (all
    // its messages matched); the next call reports the abort.
  }

  /** Throws the job's failure, if any, before an operation starts. */
  /** Neither closed nor aborted (what checkUsable checks). */
  get usable(): boolean {
    return !this.closed && !this.failure;
  }

  checkUsable(what: string): void {
    if (this.closed) throw new WeftError('ECLOSED', `${this.label}: ${what}: the context is closed`);
    if (this.failure) throw new WeftError(this.failure.code, `${this.label}: ${what}: the job was aborted earlier: ${this.failure.message}`, { cause: this.failure });
  }

  // ------------------------------------------------------------------ waits

  /** Blocks until every op settled (the one waiting loop); throws the first failure or the timeout. */
  waitSync(ops: readonly TransportOp[], deadline: Deadline, what: WaitLabel): void {
    // One wait object serves every blocking wait (no allocation per wait); a wait started
    // from inside another (an op's callback) gets its own.
    const w = this.syncWait.ops === NO_OPS ? this.syncWait : new OpsWait(this);
    w.arm(ops, deadline, what);
    try {
      this.router.waitSync(w.ready, w, undefined, this.nearOnly(ops));
    } finally {
      w.ops = NO_OPS;
    }
  }

  private readonly syncWait = new OpsWait(this);

  /**
   * Polls for up to `ms` without yielding to the event loop; true when every op is done.
   * Async collectives try this before awaiting: a step whose data is already streaming in
   * finishes without an event-loop round trip per chunk, and the event loop is held for at
   * most `ms` per step. With more ranks than cores, the core is yielded between polls.
   */
  pollFor(ops: readonly TransportOp[], ms: number): boolean {
    this.pollOps = ops;
    this.pollNear = this.nearOnly(ops);
    this.pollFailed = false;
    try {
      // A failed op ends the spin too; the caller's wait then reports it.
      return spin(this.pollReady, ms * 1000, this.oversubscribed) && !this.pollFailed;
    } finally {
      this.pollOps = NO_OPS;
    }
  }

  private pollFailed = false;

  private pollOps: readonly TransportOp[] = NO_OPS;
  private pollNear = false;
  private readonly pollReady = (): boolean => {
    this.router.poll(this.pollNear);
    const ops = this.pollOps;
    let all = true;
    for (let j = 0; j < ops.length; j++) {
      const op = ops[j];
      if (op.error) return (this.pollFailed = true);
      if (!op.done) all = false;
    }
    return all;
  };

  /** Resolves when every op settled; rejects with the first failure or the timeout. */
  waitAsync(ops: readonly TransportOp[], deadline: Deadline, what: WaitLabel): Promise<void> {
    const w = new OpsWait(this);
    w.arm(ops, deadline, what);
    return this.router.waitAsync(w.ready, w, this.nearOnly(ops));
  }

  /**
   * Every op travels on a `nearby` pair (shared memory, in a job that spans hosts): its wait
   * then reads the fabric only now and then (CompletionRouter.poll with near). In a hierarchical
   * collective the ranks that are not host leaders never touch the fabric, yet read it on
   * every poll: about 25 reads per 8-byte allreduce, 6-7 of them an epoll_wait (measured).
   */
  private nearOnly(ops: readonly TransportOp[]): boolean {
    const pairs = this.pairs;
    for (let i = 0; i < ops.length; i++) {
      const op = ops[i];
      const srcs = op instanceof RecvOp ? op.srcs : op instanceof CountOp ? op.sink.srcs : undefined;
      if (srcs === undefined) {
        if (pairs[op.peer]?.qp.nearby !== true) return false;
        continue;
      }
      for (let j = 0; j < srcs.length; j++) if (pairs[srcs[j]]?.qp.nearby !== true) return false;
    }
    return true;
  }

  /** True when every op is done; throws the first failure (an error naming the call). */
  opsDone(ops: readonly TransportOp[], call: WaitCall): boolean {
    let all = true;
    for (let i = 0; i < ops.length; i++) {
      const op = ops[i];
      if (op.error) throw new WeftError(op.error.code, `${call.what}: ${unlabel(op.error.message, this.label)}`, { cause: op.error });
      if (!op.done) all = false;
    }
    return all;
  }

  /** The error of a wait for `ops` whose deadline passed or whose signal aborted: what is still pending, and a stopped peer. */
  opsExpired(ops: readonly TransportOp[], deadline: Deadline, what: string): WeftError {
    if (deadline.signal?.aborted) return new WeftError('EABORTED', `${what}: aborted by the caller's AbortSignal while waiting for ${this.pendingText(ops)}`, { cause: deadline.signal.reason });
    const stopped = this.stoppedText();
    return new WeftError('ETIMEDOUT', `${what}: timed out after ${Math.round(deadline.timeoutMs)} ms waiting for ${this.pendingText(ops)}${stopped || '; is that rank alive and making the same call? Raise timeoutMs (or WEFT_TIMEOUT_MS) if it is just slow'}`);
  }

  private pendingText(ops: readonly TransportOp[]): string {
    const pending = ops.filter((o) => !o.settled).map((o) => o.describe());
    return pending.length > 3 ? `${pending.slice(0, 3).join('; ')} and ${pending.length - 3} more` : pending.join('; ');
  }

  /**
   * After an abort, keeps progressing before the rings go away, until every peer this rank sent
   * an ABORT has answered (or is gone), at most `ms`: peers still sending to this rank then
   * learn why from the ABORT message, not from a refused write. (A fixed 300 ms here made every
   * close after an error take that long.)
   */
  async linger(ms = 300): Promise<void> {
    if (!this.failure || this.closed) return;
    const until = performance.now() + ms;
    for (;;) {
      this.progress();
      if (this.pairs.every((p) => p === undefined || p.abortHeard) || performance.now() >= until) return;
      await new Promise((r) => setTimeout(r, 1));
    }
  }

  /** Fails pending waits and releases the rings (the NIC device is closed by its owner). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    const err = new WeftError('ECLOSED', `${this.label}: the context was closed`);
    for (const p of this.pairs) p?.fail(err);
    for (const p of this.pairs) if (p) this.router.detach(p.qp.qpn, this);
    this.router.kick();
  }
}

/**
 * A wait for transport ops, as the completion router takes it: `ready` (every op done; throws
 * an op's failure) reads no clock, since the waiting loop calls it on every poll of its
 * spin; the deadline is the loop's to check, and `expired` gives the error it then throws.
 */
class OpsWait implements WaitCall {
  ops: readonly TransportOp[] = NO_OPS;
  deadline!: Deadline;
  private label: WaitLabel = '';

  constructor(private readonly device: Device) {}

  arm(ops: readonly TransportOp[], deadline: Deadline, what: WaitLabel): void {
    this.ops = ops;
    this.deadline = deadline;
    this.label = what;
  }

  /** The call's name, for errors: made from a lazy label only when an error needs it. */
  get what(): string {
    const l = this.label;
    return typeof l === 'string' ? l : (this.label = labelText(l));
  }

  readonly ready = (): boolean => this.device.opsDone(this.ops, this);
  readonly expired = (): Error => this.device.opsExpired(this.ops, this.deadline, this.what);
}
