/**
 * The transfer engine (seeds/transfer-engine-api.zh.md): a rank registers buffers, they are
 * published in the job's store as its segment (SegmentDesc JSON), and any rank moves data to
 * and from them in batches of one-sided READs and WRITEs, with no call by the target's code.
 *
 * How a request moves: submitTransfer checks it (source inside registered memory, target
 * inside a buffer of the target's descriptor, re-read from the store once when the cached copy
 * lacks it) and cuts it into slices of `sliceBytes`. Slices wait in a queue per target rank
 * and are posted round-robin over the `qpsPerPeer` paths toward it, at most `pathDepth` on a
 * path at once; each slice is one NIC READ or WRITE whose work-request id is the slice. Its
 * completion comes back through the process's completion router (the engine owns its QPs
 * there, beside the collectives' and copyrpc's). A slice that fails on a path is posted again
 * on another live path; when none is left, its request is FAILED, naming the error.
 *
 * Progress, as libfabric's manual progress: getTransferStatus and waitBatch drive it, and
 * while requests are open one waiter in the router's shared loop drives it when the event loop
 * is idle (the one waiting loop: spin, yield, sleep on the CQ). submitTransfer itself only
 * checks and queues, so it returns at once even for gigabytes on shared memory, where the
 * initiator's CPU does the copies.
 */
import { hostname } from 'node:os';
import { WeftError } from '../errors.js';
import { copyInto } from '../host/copy.js';
import type { CompletionSink } from '../nic/completion-router.js';
import { Opcode, Status, type CompletionBatch, type MemoryRegion, type QueuePair, type RemoteRegion } from '../nic/types.js';
import { Deadline, defaultTimeoutMs, type WaitOptions } from '../util/deadline.js';
import { describeValue } from '../util/describe.js';
import { Batch, O_LOCAL, O_REMOTE, O_SEGMENT, O_SELF, OP_READ, OP_WRITE, R_DEADLINE, R_FLYING, R_LEFT, R_LENGTH, R_LOCAL_OFF, R_OP, R_RELEASED, R_REMOTE_OFF, R_STATUS, R_TARGET_ADDR, R_TRANSFERRED, RO, RS } from './batch.js';
import { LocalMemory, type LocalBuffer } from './local-memory.js';
import { CLOSING, CONTROL_CREDITS, CONTROL_WR_ID, FOUND, KeyRevocation, LOST } from './key-revocation.js';
import { PassiveProgress } from './passive-progress.js';
import { closePath, connectPaths, type TransferGroup } from './paths.js';
import { RemoteSegment, type RemoteBuffer } from './remote-segment.js';
import { decodeSegmentDesc, encodeSegmentDesc, rkeyHex, SEGMENT_PROTOCOL, segmentKey, setOwn, type PriorityMatrix, type SegmentDesc } from './segment-desc.js';
import { S_FLYING, S_GEN, S_IDX, S_LEN, S_OFF, S_PATH, S_RANK, S_TRIES, SliceQueue, SliceTable, SS, STAGED_MAX, StagedCopies } from './slices.js';
import { Task, TASK_STATUS, type BatchID, type SegmentID, type TransferRequest, type TransferStatus } from './types.js';

/** Options of `TransferEngine.open` (every rank passes the same qpsPerPeer). */
export interface TransferEngineOptions extends WaitOptions {
  /** This rank's segment name, unique in the job (default `<hostname>:<rank>`; the note recommends the host name, one engine per host). */
  name?: string;
  /** Where this rank's memory is, the priority matrix's key (default 'cpu:0'). */
  location?: string;
  /**
   * The note's nic_priority_matrix: location -> [preferred devices, other devices]. weft has
   * one device per process, called 'nic0'; by default every location prefers it.
   */
  priorityMatrix?: PriorityMatrix;
  /** Queue pairs (paths) toward each other rank (default 2). */
  qpsPerPeer?: number;
  /**
   * Requests longer than this are cut into slices of it. Default: 64 KiB (the note's), and 1 MiB
   * toward a peer reached through libfabric's tcp provider, whose cost per operation makes 64 KiB
   * slices run at half its streaming rate (docs/transfer.md#measured).
   */
  sliceBytes?: number;
  /** Slices posted and not completed on one path at most (default 16). */
  pathDepth?: number;
  /** Default of a batch's request timeout, ms (default WEFT_TIMEOUT_MS or 30 s). */
  requestTimeoutMs?: number;
}

/** Options of `allocateBatchID`. */
export interface BatchOptions {
  /** A request not done this many ms after its submit is TIMEOUT (default: the engine's requestTimeoutMs). */
  timeoutMs?: number;
}

/** Counters since open. */
export interface TransferStats {
  submitted: number;
  completed: number;
  failed: number;
  invalid: number;
  timedOut: number;
  /** Slices posted again on another path after one failed. */
  retries: number;
  slices: number;
  bytes: number;
  /** The most slices in flight on one path at once (never above pathDepth). */
  peakPathInflight: number;
}

/** The one device of a process, as the descriptor names it. */
const DEVICE_NAME = 'nic0';
const MAX_SLICE = 64 << 20;
/** Rounds of post + poll per progress call, so the event loop turns. */
const PUMP_ROUNDS = 64;
/** StagedCopies.done values. */
const NOT_COPIED = 0;
const COPIED = 1;
const DROPPED = 2;
/** While slices fly, paths are checked for a QP closed under the engine this often (ms). */
const PATH_CHECK_MS = 20;
/** Pause before reading a descriptor again that was older than a retirement record said. */
const STALE_RETRY_MS = 5;
/** Batches of one capacity kept for reuse. */
const POOL_PER_CAPACITY = 8;

/** Per target rank: its paths and the queue of slices waiting for one. */
class Peer {
  readonly inflight: Int32Array;
  /** Slices staged on each path for runStaged (they count against pathDepth until they run). */
  readonly staged: Int32Array;
  /** Same host, shared memory: the paths run copies at once (QueuePair.copyNow), staged. */
  readonly copies: boolean;
  readonly dead: Uint8Array;
  readonly queue = new SliceQueue();
  next = 0;
  listed = false;
  /** The last key-retirement record of this rank we took (key-revocation.ts). */
  seenSeq = 0;
  /** A record to acknowledge once no slice to a dropped buffer of the rank flies (0: none). */
  ackDue = 0;
  /** The last record we acknowledged, and the path the ack went on (sent again if it fails). */
  ackedSeq = 0;
  ackPath = -1;
  /** Descriptors of the rank older than this list retired keys (applied when its segment opens). */
  minVersion = 0;
  /** The rank closed its engine (it sent CLOSING): requests toward it are FAILED. */
  closedEngine = false;
  constructor(
    readonly rank: number,
    readonly qps: QueuePair[],
    /** Slice size of requests toward this rank. */
    readonly sliceBytes: number,
    /** Reached through the fabric (its keys are retired with key-revocation.ts). */
    readonly fabric: boolean,
  ) {
    this.inflight = new Int32Array(qps.length);
    this.staged = new Int32Array(qps.length);
    this.dead = new Uint8Array(qps.length);
    this.copies = !fabric && qps.length > 0 && qps.every((q) => q.copyNow !== undefined);
  }
  alive(): boolean {
    for (let k = 0; k < this.dead.length; k++) if (this.dead[k] === 0) return true;
    return false;
  }
}

/** Open counts per group: open is collective, so each open's store keys are the same on every rank. */
const opens = new WeakMap<TransferGroup, number>();

/**
 * A rank's transfer engine: its segment (registered buffers, published in the store) and
 * batched one-sided READ / WRITE to any rank's segment. Open it on every rank of the job.
 *
 * @example
 * import { TransferEngine } from 'weftjs/transfer';
 * const engine = await TransferEngine.open(ctx);            // collective; or ctx.transfer()
 * const mine = ctx.alloc(Uint8Array, 1 << 20);
 * const addr = await engine.registerLocalMemory(mine);      // published in the store
 * await ctx.barrier();
 * const peer = await engine.openSegment(engine.segmentNames[(ctx.rank + 1) % ctx.size]);
 * const theirs = engine.getSegmentDesc(peer).buffers[0];
 * const batch = engine.allocateBatchID(1);
 * engine.submitTransfer(batch, [{ opcode: 'READ', source: mine, targetId: peer, targetOffset: theirs.addr, length: 4096 }]);
 * await engine.waitBatch(batch, { timeoutMs: 5000 });
 * console.log(engine.getTransferStatus(batch)[0].status);  // 'COMPLETED'
 * engine.freeBatchID(batch);
 */
export class TransferEngine implements CompletionSink {
  /** The slice size of requests toward rank `r` (sliceBytes, or its default for that path). */
  sliceBytesFor(r: number): number | undefined {
    return this.peers[r]?.sliceBytes;
  }

  /** segmentNames[r]: the segment name of rank r's engine. */
  readonly segmentNames: readonly string[];
  readonly name: string;
  readonly stats: TransferStats = { submitted: 0, completed: 0, failed: 0, invalid: 0, timedOut: 0, retries: 0, slices: 0, bytes: 0, peakPathInflight: 0 };
  private readonly label: string;
  private readonly local: LocalMemory;
  private readonly peers: (Peer | undefined)[] = [];
  /** qpn -> target rank and path index, for completions. */
  private readonly pathRank = new Int32Array(1024).fill(-1);
  private readonly pathIndex = new Int16Array(1024);
  private readonly slices = new SliceTable();
  private readonly copies = new StagedCopies(STAGED_MAX);
  /** Requests settled so far (runStaged: did any settle while copies were staged?). */
  private settles = 0;
  /** Peers with queued slices. */
  private readonly active: Peer[] = [];
  /** Requests to this rank's own segment, copied by progress: (batch, index, generation) from selfHead on. */
  private selfQueue: [Batch, number, number][] = [];
  private selfHead = 0;
  private readonly batches = new Map<number, Batch>();
  private readonly pool = new Map<number, Batch[]>();
  /** Batches with open requests (deadline checks). */
  private readonly openBatches = new Set<Batch>();
  private nextBatchId = 1;
  private readonly segments = new Map<number, RemoteSegment>();
  private readonly segmentIds = new Map<string, number>();
  private nextSegmentId = 1;
  /** Open requests waiting for a segment's refreshed descriptor (batch, index, generation). */
  private readonly waitingDesc = new Map<RemoteSegment, [Batch, number, number][]>();
  /**
   * Slices refused by the target (a stale key: the owner unregistered and registered again)
   * waiting for the re-read descriptor: (batch, index, generation, slice, the buffer it used).
   */
  private readonly accessRetry = new Map<RemoteSegment, [Batch, number, number, number, RemoteBuffer][]>();
  private readonly priority: PriorityMatrix;
  private version = 0;
  private publishing: Promise<void> = Promise.resolve();
  private readonly passive: PassiveProgress | undefined;
  private background = false;
  /** performance.now() at which the armed background waiter's deadline falls. */
  private armedAt = Infinity;
  private readonly location: string;
  /** Tells this engine's descriptors from those of an earlier engine under the same name. */
  private readonly instance = `${process.pid}-${Date.now().toString(36)}-${Math.floor(Math.random() * 1e9).toString(36)}`;
  private pumping = false;
  private nextPathCheck = 0;
  /** The earliest deadline of an open request (Infinity when none). */
  private earliestDeadline = Infinity;
  private isClosed = false;
  private readonly pathDepth: number;
  private readonly requestTimeoutMs: number;
  /** Fabric peers' key retirement (undefined when every peer is on shared memory). */
  private readonly revocation: KeyRevocation | undefined;
  /** Regions unregistered whose retirement some peer did not confirm: closed with the engine. */
  private readonly unconfirmed: LocalBuffer[] = [];

  private constructor(
    private readonly group: TransferGroup,
    options: Required<Pick<TransferEngineOptions, 'name' | 'location' | 'pathDepth' | 'requestTimeoutMs'>> & { priorityMatrix: PriorityMatrix; sliceBytes: number | undefined },
    names: string[],
    qps: QueuePair[][],
    passive: PassiveProgress | undefined,
    revocation: KeyRevocation | undefined,
  ) {
    this.label = `rank ${group.rank}`;
    this.name = options.name;
    this.segmentNames = Object.freeze([...names]);
    this.pathDepth = options.pathDepth;
    this.requestTimeoutMs = options.requestTimeoutMs;
    this.priority = options.priorityMatrix;
    this.location = options.location;
    this.local = new LocalMemory(group.router.device, this.label);
    this.passive = passive;
    this.revocation = revocation;
    for (let p = 0; p < group.size; p++) {
      const list = qps[p];
      if (!list || list.length === 0) {
        this.peers.push(undefined);
        continue;
      }
      this.peers.push(new Peer(p, list, options.sliceBytes ?? defaultSlice(group, p), revocation?.hasPeer(p) === true));
      list.forEach((q, k) => {
        this.pathRank[q.qpn] = p;
        this.pathIndex[q.qpn] = k;
      });
    }
  }

  /**
   * Opens this rank's engine: paths toward every other rank, and its (empty) segment
   * published under `transfer/segment/<name>` in the job's store. Collective: every rank of
   * `group` calls it, with the same `qpsPerPeer`.
   */
  static async open(group: TransferGroup, options: TransferEngineOptions = {}): Promise<TransferEngine> {
    const where = `rank ${group.rank}: TransferEngine.open`;
    // Counted before anything can fail here, so that every rank's next open uses the same keys.
    const epoch = (opens.get(group) ?? 0) + 1;
    opens.set(group, epoch);
    const o = checkOptions(where, group, options);
    const device = group.router.device;
    // The sink exists before the engine does: completions may route as soon as QPs are attached.
    let engine: TransferEngine | undefined;
    const passive = device.provider === 'shm' ? undefined : new PassiveProgress(group.router, `${where}: serving peers' one-sided access`, () => engine?.checkRevocations());
    const early: CompletionSink = { take: (b, i) => engine?.take(b, i) };
    const fabricPeers = [...Array(group.size).keys()].some((p) => p !== group.rank && reachedByFabric(group, p));
    let revocation: KeyRevocation | undefined;
    let paths;
    try {
      revocation = fabricPeers ? new KeyRevocation(device, group.rank, group.size) : undefined;
      // Fabric paths take key-revocation messages (WRITE_IMM, so that they wake a sleeping peer).
      const credits = (p: number) => (revocation && reachedByFabric(group, p) ? CONTROL_CREDITS : 0);
      paths = await connectPaths(group, early, `transfer/open/${epoch}`, o.qpsPerPeer, o.name, revocation?.mr.descriptor() ?? new Uint8Array(0), credits, options);
    } catch (err) {
      passive?.stop();
      throw err;
    }
    const dup = paths.names.findIndex((n, r) => paths.names.indexOf(n) !== r);
    if (dup >= 0) {
      for (const list of paths.qps) for (const q of list) closePath(group.router, early, q);
      passive?.stop();
      throw new WeftError('EINVAL', `${where}: ranks ${paths.names.indexOf(paths.names[dup])} and ${dup} both named their segment '${paths.names[dup]}'; segment names must be unique in the job (the default is <hostname>:<rank>)`);
    }
    if (revocation) paths.controls.forEach((c, p) => (reachedByFabric(group, p) && p !== group.rank ? revocation.setPeer(p, c) : undefined));
    engine = new TransferEngine(group, o, paths.names, paths.qps, passive, revocation);
    // Completions route to `early`, which forwards to the engine: detach and re-attach the engine itself (no indirection per completion).
    for (const list of paths.qps) {
      for (const q of list) {
        group.router.detach(q.qpn, early);
        group.router.attach(q.qpn, engine);
      }
    }
    try {
      await engine.publish();
    } catch (err) {
      await engine.close().catch(() => {});
      throw err;
    }
    return engine;
  }

  // ---------------------------------------------------------------- memory

  /**
   * Registers `view` (a `ctx.alloc` array or a view of one; on the fabric any array) as a
   * buffer of this rank's segment and publishes the updated descriptor. Resolves to the
   * buffer's address in the segment (`addr`). Peers that cached the descriptor see the new
   * buffer when a request misses their copy.
   */
  async registerLocalMemory(view: ArrayBufferView, location = this.location): Promise<number> {
    this.checkOpen('registerLocalMemory');
    const buf = this.local.register(view, location);
    if (!Object.hasOwn(this.priority, location)) setOwn(this.priority, location, [[DEVICE_NAME], []]);
    try {
      await this.publish();
    } catch (err) {
      this.local.unregister(buf);
      throw err;
    }
    return buf.addr;
  }

  /**
   * Removes the registered buffer that `view` starts and publishes the descriptor without it;
   * refused (EINVAL) while requests of this engine use it as their source. Peers' later
   * requests to it are INVALID or FAILED. Toward peers on the fabric it first waits until each
   * confirmed that it will not use the buffer's key again (a stale key breaks libfabric tcp's
   * connection between the two processes; key-revocation.ts): within `timeoutMs` (default the
   * engine's requestTimeoutMs), else ETIMEDOUT naming the silent ranks, with the buffer gone
   * from the descriptor but its key valid until the engine closes.
   *
   * @example
   * await engine.unregisterLocalMemory(buf, { timeoutMs: 5000 });
   */
  async unregisterLocalMemory(view: ArrayBufferView, options: WaitOptions = {}): Promise<void> {
    this.checkOpen('unregisterLocalMemory');
    const buf = this.local.registered(view);
    if (!buf) throw new WeftError('EINVAL', `${this.label}: unregisterLocalMemory: no registered buffer starts where this ${describeValue(view)} starts; pass the view you registered`);
    if (buf.inflight > 0) throw new WeftError('EINVAL', `${this.label}: unregisterLocalMemory: ${buf.inflight} request(s) in flight use the buffer at addr ${buf.addr} as their source; wait for their batches first`);
    const deadline = new Deadline(options.timeoutMs ?? this.requestTimeoutMs, options.signal);
    // Out of the table (this rank's own requests no longer find it), but its key stays valid
    // until every fabric peer confirmed it will not use it (key-revocation.ts).
    this.local.remove(buf);
    // The version of the descriptor without it (a registration meanwhile publishes a later one).
    const version = this.version + 1;
    try {
      await this.publish();
      await this.retireKeys(version, buf.addr, deadline, `unregisterLocalMemory(addr ${buf.addr})`);
    } catch (err) {
      this.unconfirmed.push(buf);
      throw err;
    }
    buf.mr.deregister();
  }

  /**
   * Tells every fabric peer that the buffer at `addr` is retired as of descriptor `version`
   * (CLOSING: the whole segment), and waits until each acknowledged. Only a peer whose process
   * is dead needs no ack: a path that timed out says nothing of the peer's own paths to us.
   * ETIMEDOUT names the ranks that did not confirm; the caller then keeps the key valid.
   */
  private async retireKeys(version: number, addr: number, deadline: Deadline, what: string): Promise<void> {
    const rev = this.revocation;
    if (!rev) return;
    const peers = this.peers.filter((p): p is Peer => p !== undefined && p.fabric && !p.closedEngine && !processGone(p));
    const told: [Peer, number][] = [];
    const unreachable: Peer[] = [];
    // A peer that closed its engine meanwhile uses no key of ours any more, and its control
    // region may be gone: nothing more is sent to it.
    const done = (p: Peer) => p.closedEngine || processGone(p);
    // For an unregister that is enough. Our own close waits for the ack itself: a peer that
    // took our CLOSING acks it even while it closes (its record came first), and that ack must
    // not land in a control region we already closed.
    const confirmed = ([p, seq]: [Peer, number]) => rev.ackFrom(p.rank) >= seq || processGone(p) || (version !== CLOSING && p.closedEngine);
    const wait = (ready: () => boolean, doing: string) =>
      this.group.router.waitAsync(
        () => {
          if (this.isClosed) throw new WeftError('ECLOSED', `${this.label}: ${what}: the engine was closed meanwhile; the key stays registered until the device closes`);
          this.pump();
          return ready();
        },
        { deadline, what: `${this.label}: ${what}: ${doing}` },
      );
    let pending = peers;
    try {
      // At most RING records unacknowledged per peer (key-revocation.ts): room is checked
      // again at the send, since several waits may see one freed slot.
      while (pending.length > 0) {
        await wait(() => pending.some((p) => rev.hasRoom(p.rank) || done(p)), 'waiting for peers to take earlier retired keys');
        const later: Peer[] = [];
        for (const peer of pending) {
          if (done(peer)) continue;
          if (!rev.hasRoom(peer.rank)) {
            later.push(peer);
            continue;
          }
          const k = livePath(peer);
          if (k < 0) {
            unreachable.push(peer);
            continue;
          }
          try {
            told.push([peer, rev.sendRevoke(peer.rank, k, peer.qps[k], version, addr)]);
          } catch {
            unreachable.push(peer);
          }
        }
        pending = later;
      }
      await wait(() => told.every(confirmed), `waiting for rank(s) ${told.map(([p]) => p.rank).join(', ')} to stop using the retired key`);
    } catch (err) {
      const silent = [...pending.filter((p) => !done(p)), ...told.filter((t) => !confirmed(t)).map(([p]) => p)].map((p) => p.rank);
      // (close: a silent peer leaves every region registered until the device closes.)
      if ((err as WeftError).code !== 'ETIMEDOUT' || silent.length === 0) throw err;
      throw new WeftError('ETIMEDOUT', `${this.label}: ${what}: rank(s) ${silent.join(', ')} did not confirm within ${Math.round(deadline.timeoutMs)} ms that they stopped using the key (their process is stopped, or never polls); it stays registered until the device closes, since a stale key would break the fabric connection between the two processes`, { cause: err });
    }
    if (unreachable.length > 0) {
      throw new WeftError('ETRANSPORT', `${this.label}: ${what}: no live path toward rank(s) ${unreachable.map((p) => p.rank).join(', ')} to tell them, and their process is not known dead; the key stays registered until the device closes`);
    }
  }

  /**
   * Both sides of key retirement (key-revocation.ts). As a peer: takes owners' records, each
   * dropping a buffer from the cached descriptor (queued requests to it fail as they come
   * up), and acknowledges once no slice to a dropped buffer is in the fabric. As an owner and
   * as a peer: sends records or an ack again when the path they went on failed. Synchronous (no
   * store read), so sync waits answer too. Called by every progress call, by the passive
   * progress waiter, when a record arrives, and when the last slice to a dropped buffer lands.
   */
  checkRevocations(): void {
    const rev = this.revocation;
    if (!rev || this.isClosed) return;
    for (const peer of this.peers) {
      if (!peer?.fabric) continue;
      for (;;) {
        const state = rev.next(peer.rank, peer.seenSeq + 1);
        if (state === FOUND) {
          peer.seenSeq++;
          this.retireFrom(peer, rev.version, rev.addr, false);
        } else if (state === LOST) {
          // More records than the ring holds came in since we looked: drop everything of it.
          // Unless no whole record is newer than what we have: the slot that said LOST is torn
          // (a record still landing) or forged. Look again at the next call; taking its seq as
          // the newest would move seenSeq back, or loop here for ever.
          const newest = rev.newest(peer.rank);
          if (newest <= peer.seenSeq) break;
          peer.seenSeq = newest;
          this.retireFrom(peer, rev.version, 0, true);
        } else break;
        peer.ackDue = peer.seenSeq;
      }
      if (peer.ackDue !== 0 && (this.segmentOf(peer.rank)?.drained() ?? true)) this.acknowledge(peer, peer.ackDue);
      // (Not to a closed engine: its control region may be gone.)
      else if (peer.ackPath >= 0 && !pathLive(peer, peer.ackPath) && !peer.closedEngine) this.acknowledge(peer, peer.ackedSeq);
      const k = rev.pathOf[peer.rank];
      if (k >= 0 && rev.unacked(peer.rank) > 0 && !pathLive(peer, k) && !peer.closedEngine) {
        const to = livePath(peer);
        if (to >= 0) {
          try {
            rev.resend(peer.rank, to, peer.qps[to]);
          } catch {
            // The next call tries again (the QP will show as failed).
          }
        }
      }
    }
  }

  private retireFrom(peer: Peer, version: number, addr: number, all: boolean): void {
    peer.minVersion = Math.max(peer.minVersion, version);
    const seg = this.segmentOf(peer.rank);
    if (version === CLOSING) {
      peer.closedEngine = true;
      this.failQueued(peer, seg, `rank ${peer.rank} closed its transfer engine`);
      all = true;
    }
    if (seg === undefined) return;
    if (all) seg.retireAll(version);
    else seg.retire(addr, version);
  }

  /** Fails every queued request toward `peer`, and those waiting for its descriptor (its engine is closing). */
  private failQueued(peer: Peer, seg: RemoteSegment | undefined, why: string): void {
    const q = peer.queue;
    const sl = this.slices;
    while (q.size > 0) {
      const s = q.shift();
      const b = sl.batch[s] as Batch;
      const i = sl.f[s * SS + S_IDX];
      sl.release(s);
      if (b.live(i, sl.f[s * SS + S_GEN])) this.settle(b, i, Task.FAILED, why);
    }
    if (seg === undefined) return;
    for (const [b, i, gen] of this.waitingDesc.get(seg) ?? []) if (b.live(i, gen)) this.settle(b, i, Task.FAILED, why);
    this.waitingDesc.delete(seg);
    for (const [b, i, gen, s] of this.accessRetry.get(seg) ?? []) {
      sl.release(s);
      if (b.live(i, gen)) this.settle(b, i, Task.FAILED, why);
    }
    this.accessRetry.delete(seg);
  }

  private acknowledge(peer: Peer, seq: number): void {
    const rev = this.revocation as KeyRevocation;
    const k = livePath(peer);
    if (k < 0) return;
    try {
      rev.sendAck(peer.rank, k, peer.qps[k], seq);
      peer.ackDue = 0;
      peer.ackedSeq = seq;
      peer.ackPath = k;
    } catch {
      // The next call tries again.
    }
  }

  /** The open segment of rank r, if any (a rank has one segment). */
  private segmentOf(r: number): RemoteSegment | undefined {
    for (const seg of this.segments.values()) if (seg.rank === r) return seg;
    return undefined;
  }

  /** This rank's segment descriptor as published. */
  get descriptor(): SegmentDesc {
    const dev = this.group.router.device;
    return {
      protocol: SEGMENT_PROTOCOL,
      instance: this.instance,
      name: this.name,
      rank: this.group.rank,
      host: this.group.hosts.ranks[this.group.rank]?.hostName ?? hostname(),
      version: this.version,
      devices: [{ name: DEVICE_NAME, provider: dev.providerName, lid: 0, gid: this.group.hosts.ranks[this.group.rank]?.hostId ?? '' }],
      priority_matrix: structuredClone(this.priority),
      buffers: this.local.all.map((b) => ({ name: b.location, addr: b.addr, length: b.bytes.byteLength, rkey: [rkeyHex(b.mr.descriptor())], offset: 0 })),
    };
  }

  /** Writes the descriptor to the store (updates go out in order; the last one wins). */
  private publish(): Promise<void> {
    this.version++;
    const key = segmentKey(this.name);
    const bytes = encodeSegmentDesc(this.descriptor);
    const store = this.group.store;
    const next = this.publishing.then(() => store.set(key, bytes));
    this.publishing = next.catch(() => {});
    return next;
  }

  // ---------------------------------------------------------------- segments

  /**
   * Opens the segment called `name` (a rank's engine name; `segmentNames` lists them) and
   * resolves to its id; the same id every time until closeSegment. Reads its descriptor from
   * the store (waiting for it up to the timeout).
   */
  async openSegment(name: string, options: WaitOptions = {}): Promise<SegmentID> {
    this.checkOpen('openSegment');
    const where = `${this.label}: openSegment('${name}')`;
    if (typeof name !== 'string') throw new WeftError('EINVAL', `${where}: name must be a string, got ${describeValue(name)}`);
    const known = this.segmentIds.get(name);
    if (known !== undefined) return known;
    const rank = this.segmentNames.indexOf(name);
    if (rank < 0) throw new WeftError('EINVAL', `${where}: no rank of this job opened a segment by that name (they are: ${this.segmentNames.join(', ')})`);
    const id = this.nextSegmentId++;
    if (rank === this.group.rank) {
      this.segmentIds.set(name, id);
      this.segments.set(id, new RemoteSegment(id, name, rank, this.descriptor));
      return id;
    }
    const peer = this.peers[rank];
    if (peer?.closedEngine) throw new WeftError('ECLOSED', `${where}: rank ${rank} closed its transfer engine`);
    let desc = await this.readDesc(name, rank, options);
    // Retirement records that came before the segment was open: a copy older than they say
    // may list a retired key (the owner publishes before it sends them, so a read now is new enough).
    const until = new Deadline(options.timeoutMs, options.signal);
    while (peer !== undefined && desc.version < peer.minVersion && !peer.closedEngine) {
      until.check(`${where}: waiting for rank ${rank}'s descriptor of version ${peer.minVersion} or later (its retired keys)`);
      await new Promise((r) => setTimeout(r, STALE_RETRY_MS));
      desc = await this.readDesc(name, rank, options);
    }
    if (peer?.closedEngine) throw new WeftError('ECLOSED', `${where}: rank ${rank} closed its transfer engine`);
    const again = this.segmentIds.get(name);
    if (again !== undefined) return again;
    this.segmentIds.set(name, id);
    const seg = new RemoteSegment(id, name, rank, desc);
    seg.minVersion = peer?.minVersion ?? 0;
    seg.tracksDropped = peer?.fabric === true;
    this.segments.set(id, seg);
    return id;
  }

  /** The segment's descriptor as this engine last read it (this rank's own: as published). */
  getSegmentDesc(id: SegmentID): SegmentDesc {
    this.checkOpen('getSegmentDesc');
    const seg = this.segments.get(id);
    if (!seg) throw new WeftError('EINVAL', `${this.label}: getSegmentDesc: segment id ${id} is not open`);
    return seg.rank === this.group.rank ? this.descriptor : structuredClone(seg.desc);
  }

  /** Forgets an open segment; refused while open requests target it. */
  closeSegment(id: SegmentID): void {
    this.checkOpen('closeSegment');
    const seg = this.segments.get(id);
    if (!seg) throw new WeftError('EINVAL', `${this.label}: closeSegment: segment id ${id} is not open`);
    for (const b of this.openBatches) {
      for (let i = 0; i < b.count; i++) {
        if (b.open(i) && b.segment(i) === seg) throw new WeftError('EINVAL', `${this.label}: closeSegment: batch ${b.id} still has requests to segment '${seg.name}' in flight; wait for it first`);
      }
    }
    // Requests that timed out or failed may leave slices in the fabric. Closed now, the segment
    // would no longer hold back the owner's key retirement (its acknowledgement looks at open
    // segments only), and a slice landing after the owner deregistered resets the tcp connection
    // every layer between the two processes shares.
    if (seg.buffers.some((b) => b.flying > 0) || !seg.drained()) throw new WeftError('EINVAL', `${this.label}: closeSegment: slices of earlier requests to segment '${seg.name}' are still in the fabric (requests that timed out or failed); waitBatch on their batch, which waits for them to land, then close it`);
    this.segments.delete(id);
    this.segmentIds.delete(seg.name);
  }

  private async readDesc(name: string, rank: number, options: WaitOptions): Promise<SegmentDesc> {
    const key = segmentKey(name);
    let bytes: Uint8Array;
    try {
      bytes = await this.group.store.get(key, options);
    } catch (err) {
      if ((err as WeftError).code === 'ETIMEDOUT') throw new WeftError('ETIMEDOUT', `${this.label}: openSegment('${name}'): rank ${rank} has not published its segment descriptor under '${key}' (closed its engine?)`, { cause: err });
      throw err;
    }
    const desc = decodeSegmentDesc(bytes, key);
    if (desc.rank !== rank || desc.name !== name) throw new WeftError('EPROTO', `${this.label}: the descriptor under '${key}' says segment '${desc.name}' of rank ${desc.rank}, but rank ${rank} opened it; is another job using this store prefix?`);
    return desc;
  }

  /**
   * Re-reads a segment's descriptor for the requests that missed the cached copy and for slices
   * the target refused. Requests that join while a read is under way wait for the next one: a
   * read issued before they were submitted may predate the buffer they want.
   */
  private refresh(seg: RemoteSegment): void {
    if (seg.refreshing) return;
    const owner = this.peers[seg.rank];
    if (owner?.closedEngine) return this.failQueued(owner, seg, `rank ${seg.rank} closed its transfer engine`);
    const waiting = this.waitingDesc.get(seg) ?? [];
    this.waitingDesc.delete(seg);
    const refused = this.accessRetry.get(seg) ?? [];
    this.accessRetry.delete(seg);
    seg.refreshing = (async () => {
      let err: unknown;
      let stale = false;
      try {
        stale = !seg.update(await this.readDesc(seg.name, seg.rank, { timeoutMs: Math.min(this.requestTimeoutMs, 10_000) }));
      } catch (e) {
        err = e;
      }
      seg.refreshing = undefined;
      if (this.isClosed) return;
      if (stale) {
        // Read before the owner retired a key we were told about: it may list that buffer.
        // Read again (the owner publishes before it tells us) after a pause, while requests
        // wait for it: they time out on their own deadlines if the store never catches up.
        listIn(this.waitingDesc, seg).push(...waiting);
        listIn(this.accessRetry, seg).push(...refused);
        setTimeout(() => {
          if (!this.isClosed && (this.waitingDesc.has(seg) || this.accessRetry.has(seg))) this.refresh(seg);
        }, STALE_RETRY_MS).unref();
        return;
      }
      const now = performance.now();
      for (const [b, i, gen] of waiting) {
        if (!b.live(i, gen) || b.status(i) !== Task.PENDING) continue;
        if (now >= b.f[i * RS + R_DEADLINE]) {
          this.settle(b, i, Task.TIMEOUT, this.timeoutReason(b, i));
          continue;
        }
        const addr = b.f[i * RS + R_TARGET_ADDR];
        const len = b.f[i * RS + R_LENGTH];
        const buf = seg.find(addr, len);
        if (buf) this.start(b, i, seg, buf);
        else this.settle(b, i, Task.INVALID, err ? `segment '${seg.name}': its descriptor could not be re-read: ${(err as Error).message}` : this.notInSegment(seg, addr, len));
      }
      for (const [b, i, gen, sl, used] of refused) {
        if (!b.live(i, gen)) {
          this.dropSlice(sl, b, i);
          continue;
        }
        const addr = b.f[i * RS + R_TARGET_ADDR];
        const fresh = seg.find(addr, b.f[i * RS + R_LENGTH]);
        if (fresh !== undefined && fresh !== used) {
          // Registered again under a new key: the request goes on with it.
          b.refs[i * RO + O_REMOTE] = fresh;
          b.f[i * RS + R_REMOTE_OFF] = fresh.offset + (addr - fresh.addr);
          this.requeue(this.peers[seg.rank] as Peer, sl);
        } else {
          this.slices.release(sl);
          this.settle(b, i, Task.FAILED, `rank ${seg.rank} refused the access: the target buffer is no longer registered there${fresh ? ' (its descriptor still lists it; the owner may have changed it without publishing)' : ''}${err ? `, and its descriptor could not be re-read: ${(err as Error).message}` : ''}`);
        }
      }
      // Requests that arrived during the read want a read of their own.
      if (this.waitingDesc.has(seg) || this.accessRetry.has(seg)) this.refresh(seg);
      // Waiters whose batches just settled here must be looked at again.
      this.group.router.kick();
      this.kickProgress();
    })();
  }

  private notInSegment(seg: RemoteSegment, addr: number, len: number): string {
    const list = seg.buffers.slice(0, 4).map((b) => `[${b.addr}, ${b.addr + b.length})`).join(', ');
    return `target [${addr}, ${addr + len}) is not inside one buffer of segment '${seg.name}' (rank ${seg.rank}, ${seg.buffers.length} buffer(s)${list ? `: ${list}${seg.buffers.length > 4 ? ', ...' : ''}` : ''})`;
  }

  // ---------------------------------------------------------------- batches

  /** A batch that holds up to `batchSize` requests. */
  allocateBatchID(batchSize: number, options: BatchOptions = {}): BatchID {
    this.checkOpen('allocateBatchID');
    if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > 1 << 20) throw new WeftError('EINVAL', `${this.label}: allocateBatchID: batchSize must be an integer in [1, 2^20], got ${batchSize}`);
    const timeoutMs = options.timeoutMs ?? this.requestTimeoutMs;
    if (typeof timeoutMs !== 'number' || !(timeoutMs > 0)) throw new WeftError('EINVAL', `${this.label}: allocateBatchID: timeoutMs must be a positive number, got ${String(timeoutMs)}`);
    const b = this.pool.get(batchSize)?.pop() ?? new Batch(batchSize);
    const id = this.nextBatchId++;
    b.reset(id, timeoutMs);
    this.batches.set(id, b);
    return id;
  }

  /**
   * Frees a batch; refused (EINVAL) while any of its requests is PENDING or WAITING. After it,
   * the id is unknown to every call.
   */
  freeBatchID(batch: BatchID): void {
    const b = this.batchOf(batch, 'freeBatchID');
    if (b.unsettled > 0) throw new WeftError('EINVAL', `${this.label}: freeBatchID: batch ${batch} has ${b.unsettled} request(s) not done (WAITING or PENDING); wait for it (waitBatch) first`);
    this.batches.delete(batch);
    b.freed = true;
    // A batch whose TIMEOUT or FAILED requests still have slices in the NIC is dropped, not reused.
    if (b.flyingTotal > 0) return;
    let list = this.pool.get(b.capacity);
    if (!list) this.pool.set(b.capacity, (list = []));
    if (list.length < POOL_PER_CAPACITY) list.push(b);
  }

  /**
   * Adds requests to a batch and returns at once: they are checked and queued here, and move
   * as progress runs (getTransferStatus, waitBatch, or the event loop when idle). A request
   * that fails its checks is INVALID with the reason; the call throws only for a bad batch or
   * more requests than the batch holds.
   */
  submitTransfer(batch: BatchID, entries: readonly TransferRequest[]): void {
    const b = this.batchOf(batch, 'submitTransfer');
    if (!Array.isArray(entries)) throw new WeftError('EINVAL', `${this.label}: submitTransfer: entries must be an array of requests, got ${describeValue(entries)}`);
    // A request's getter that submits to this batch again would take the slots counted below.
    if (b.submitting) throw new WeftError('EINVAL', `${this.label}: submitTransfer: batch ${batch} is being submitted to (a request's getter called submitTransfer on it again)`);
    // Read once: a request's getter may grow the array while it is read (past the capacity check).
    const n = entries.length;
    if (b.count + n > b.capacity) throw new WeftError('EINVAL', `${this.label}: submitTransfer: batch ${batch} holds ${b.capacity} request(s), ${b.count} submitted already, ${n} more given`);
    const now = performance.now();
    const deadline = now + b.timeoutMs;
    b.submitting = true;
    try {
      for (let k = 0; k < n; k++) {
        const i = b.count++;
        const o = i * RS;
        b.f[o + R_STATUS] = Task.PENDING;
        b.unsettled++;
        b.f[o + R_TRANSFERRED] = 0;
        b.f[o + R_DEADLINE] = deadline;
        b.f[o + R_LEFT] = 0;
        b.f[o + R_FLYING] = 0;
        b.f[o + R_RELEASED] = 1;
        this.stats.submitted++;
        try {
          this.accept(b, i, entries[k]);
        } catch (err) {
          // A request whose fields throw when read (a getter, a detached buffer's view).
          this.settle(b, i, Task.INVALID, `the request could not be read: ${(err as Error).message}`);
        }
      }
    } finally {
      b.submitting = false;
      if (b.unsettled > 0) {
        this.openBatches.add(b);
        if (deadline < this.earliestDeadline) this.earliestDeadline = deadline;
      }
      // The armed progress waiter sleeps until an older deadline: let it re-arm.
      if (this.background && this.earliestDeadline < this.armedAt) this.group.router.kick();
      this.kickProgress();
    }
  }

  /** Checks request `r` as entry i of b; queues it, or settles it INVALID. */
  private accept(b: Batch, i: number, r: TransferRequest): void {
    if (typeof r !== 'object' || r === null) return this.settle(b, i, Task.INVALID, `the request is ${describeValue(r)}, not { opcode, source, targetId, targetOffset, length }`);
    const op = r.opcode === 'READ' ? OP_READ : r.opcode === 'WRITE' ? OP_WRITE : -1;
    if (op < 0) return this.settle(b, i, Task.INVALID, `opcode must be 'READ' or 'WRITE', got ${typeof r.opcode === 'string' ? JSON.stringify(r.opcode) : describeValue(r.opcode)}`);
    const src = r.source;
    if (!ArrayBuffer.isView(src)) return this.settle(b, i, Task.INVALID, `source must be a typed array or DataView inside registered memory, got ${describeValue(src)}`);
    // byteLength, byteOffset and buffer are builtin calls in Node 20 (~15 ns each; a typed
    // array's length is inlined): each is read once per request.
    const srcBytes = src.byteLength;
    const len = r.length ?? srcBytes;
    if (!Number.isSafeInteger(len) || len < 0 || len > srcBytes) return this.settle(b, i, Task.INVALID, `length must be an integer in [0, ${srcBytes}] (the source view's byteLength), got ${String(len)}`);
    const seg = this.segments.get(r.targetId);
    if (seg === undefined) return this.settle(b, i, Task.INVALID, `targetId ${String(r.targetId)} is not an open segment (openSegment gives the ids)`);
    const addr = r.targetOffset;
    if (!Number.isSafeInteger(addr) || addr < 0) return this.settle(b, i, Task.INVALID, `targetOffset must be a non-negative safe integer (a buffer's addr plus an offset), got ${String(addr)}`);
    const srcOff = src.byteOffset;
    const lbuf = this.local.find(src.buffer, srcOff, len);
    if (lbuf === undefined) return this.settle(b, i, Task.INVALID, `source bytes [${srcOff}, ${srcOff + len}) of this ${describeValue(src)}'s memory are not inside one buffer registered with registerLocalMemory`);
    b.f[i * RS + R_OP] = op;
    b.f[i * RS + R_LENGTH] = len;
    b.f[i * RS + R_LOCAL_OFF] = srcOff - lbuf.start;
    b.f[i * RS + R_TARGET_ADDR] = addr;
    b.refs[i * RO + O_LOCAL] = lbuf;
    b.refs[i * RO + O_SEGMENT] = seg;
    b.f[i * RS + R_RELEASED] = 0;
    lbuf.inflight++;
    if (seg.rank === this.group.rank) {
      // A 0-byte request is checked like a 1-byte one: its address must be inside a buffer.
      const t = this.local.findAddress(addr, Math.max(1, len));
      if (t === undefined) return this.settle(b, i, Task.INVALID, this.notInSegment(new RemoteSegment(0, this.name, seg.rank, this.descriptor), addr, len));
      if (len === 0) return this.settle(b, i, Task.COMPLETED, undefined);
      b.refs[i * RO + O_SELF] = t;
      this.selfQueue.push([b, i, b.gen]);
      return;
    }
    if (this.peers[seg.rank]?.closedEngine) return this.settle(b, i, Task.FAILED, `rank ${seg.rank} closed its transfer engine`);
    const rbuf = seg.find(addr, Math.max(1, len));
    if (rbuf !== undefined) return this.start(b, i, seg, rbuf);
    // Not in the cached copy: the owner may have registered it since. Re-read it.
    listIn(this.waitingDesc, seg).push([b, i, b.gen]);
    this.refresh(seg);
  }

  /** Cuts request i into slices and queues them toward its segment's rank. */
  private start(b: Batch, i: number, seg: RemoteSegment, rbuf: RemoteBuffer): void {
    const peer = this.peers[seg.rank];
    if (peer === undefined) return this.settle(b, i, Task.INVALID, `segment '${seg.name}' belongs to rank ${seg.rank}, toward which this engine has no path`);
    if (peer.closedEngine) return this.settle(b, i, Task.FAILED, `rank ${seg.rank} closed its transfer engine`);
    const len = b.f[i * RS + R_LENGTH];
    if (len === 0) return this.settle(b, i, Task.COMPLETED, undefined);
    const remoteOff = rbuf.offset + (b.f[i * RS + R_TARGET_ADDR] - rbuf.addr);
    // The NIC addresses regions with 32-bit offsets (regions are at most 4 GiB).
    if (remoteOff + len > 2 ** 32 || b.f[i * RS + R_LOCAL_OFF] + len > 2 ** 32) return this.settle(b, i, Task.INVALID, `the request reaches past 4 GiB into a registered region (target offset ${remoteOff}, source offset ${b.f[i * RS + R_LOCAL_OFF]}, length ${len}); split it`);
    b.refs[i * RO + O_REMOTE] = rbuf;
    b.f[i * RS + R_REMOTE_OFF] = remoteOff;
    const sb = peer.sliceBytes;
    const n = Math.ceil(len / sb);
    b.f[i * RS + R_LEFT] = n;
    for (let off = 0; off < len; off += sb) peer.queue.push(this.slices.alloc(b, i, seg.rank, off, Math.min(sb, len - off)));
    if (!peer.listed) {
      peer.listed = true;
      this.active.push(peer);
    }
  }

  /** Settles request i (not WAITING/PENDING afterwards); lets go of its source once no slice flies. */
  private settle(b: Batch, i: number, status: number, reason: string | undefined): void {
    if (!b.open(i)) return;
    this.settles++;
    b.f[i * RS + R_STATUS] = status;
    b.reason[i] = reason;
    b.unsettled--;
    const st = this.stats;
    if (status === Task.COMPLETED) {
      st.completed++;
      b.f[i * RS + R_TRANSFERRED] = b.f[i * RS + R_LENGTH];
    } else if (status === Task.FAILED) st.failed++;
    else if (status === Task.INVALID) st.invalid++;
    else if (status === Task.TIMEOUT) st.timedOut++;
    if (b.f[i * RS + R_FLYING] === 0) this.release(b, i);
    if (b.unsettled === 0) this.openBatches.delete(b);
  }

  private release(b: Batch, i: number): void {
    if (b.f[i * RS + R_RELEASED] === 1) return;
    b.f[i * RS + R_RELEASED] = 1;
    const l = b.local(i);
    if (l) l.inflight--;
  }

  /**
   * The state of every request of the batch, in submit order (the note's getTransferStatus).
   * Drives progress first. Pass `out` to reuse its objects (no allocation once it is long enough).
   * Works after close(), to read why requests failed.
   */
  getTransferStatus(batch: BatchID, out: TransferStatus[] = []): TransferStatus[] {
    const b = this.batchOf(batch, 'getTransferStatus', true);
    this.pump();
    out.length = b.count;
    for (let i = 0; i < b.count; i++) {
      const e = (out[i] ??= { status: 'PENDING', transferred: 0, reason: undefined });
      e.status = TASK_STATUS[b.f[i * RS + R_STATUS]];
      e.transferred = b.f[i * RS + R_TRANSFERRED];
      // Assigned even when undefined: a delete would turn the reused object into a slow one.
      e.reason = b.reason[i];
    }
    return out;
  }

  /**
   * Resolves once no request of the batch is PENDING or WAITING and none of its slices is still
   * in the NIC (so no byte of it lands after this), to how many requests did not complete (0:
   * all COMPLETED; getTransferStatus says why the others did not). Rejects with ETIMEDOUT /
   * EABORTED (the requests keep their own timeout), ECLOSED, or EINVAL when the batch is freed
   * meanwhile.
   */
  waitBatch(batch: BatchID, options: WaitOptions = {}): Promise<number> {
    let b: Batch;
    let deadline: Deadline;
    try {
      b = this.batchOf(batch, 'waitBatch');
      deadline = new Deadline(options.timeoutMs, options.signal);
    } catch (err) {
      return Promise.reject(err);
    }
    const ready = () => this.batchDone(b, batch, 'waitBatch');
    return this.group.router.waitAsync(ready, { deadline, what: `${this.label}: waitBatch(${batch})`, expired: () => this.waitExpired(b, batch, 'waitBatch', deadline) }).then(() => this.notCompleted(b));
  }

  /**
   * The error of a wait for batch `id` that ran out: what is still open and toward which ranks
   * (a one-sided transfer has no matching call to blame), or EABORTED.
   */
  private waitExpired(b: Batch, id: number, what: string, deadline: Deadline): WeftError {
    if (deadline.signal?.aborted) return new WeftError('EABORTED', `${this.label}: ${what}(${id}): aborted by the caller's AbortSignal`, { cause: deadline.signal.reason });
    const ranks = new Set<number>();
    for (let i = 0; i < b.count; i++) {
      const seg = b.open(i) ? b.segment(i) : undefined;
      if (seg) ranks.add(seg.desc.rank);
    }
    const toward = ranks.size > 0 ? ` toward rank${ranks.size > 1 ? 's' : ''} ${[...ranks].sort((x, y) => x - y).join(', ')}` : '';
    const hint = b.unsettled > 0 ? "the requests keep their own timeout (allocateBatchID's timeoutMs): wait again, or raise timeoutMs; a gone target rank fails them once the fabric reports it" : 'its requests are settled (getTransferStatus); their slices land, or fail with their path: wait again';
    return new WeftError('ETIMEDOUT', `${this.label}: ${what}(${id}): timed out after ${Math.round(deadline.timeoutMs)} ms with ${b.unsettled} request(s) not done${toward} and ${b.flyingTotal} slice(s) still in the NIC; ${hint}`);
  }

  /** waitBatch that blocks the thread (busy-polls, then sleeps through the one waiting loop); lowest latency. */
  waitBatchSync(batch: BatchID, options: WaitOptions = {}): number {
    const b = this.batchOf(batch, 'waitBatchSync');
    const deadline = new Deadline(options.timeoutMs, options.signal);
    this.group.router.waitSync(() => this.batchDone(b, batch, 'waitBatchSync'), { deadline, what: `${this.label}: waitBatchSync(${batch})`, expired: () => this.waitExpired(b, batch, 'waitBatchSync', deadline) });
    return this.notCompleted(b);
  }

  /** A wait's condition: progress, then whether batch `id` (still b) is settled and quiet. */
  private batchDone(b: Batch, id: number, what: string): boolean {
    if (this.isClosed) throw new WeftError('ECLOSED', `${this.label}: ${what}(${id}): the engine was closed`);
    if (b.id !== id || b.freed) throw new WeftError('EINVAL', `${this.label}: ${what}(${id}): the batch was freed while waited for`);
    this.pump();
    return b.unsettled === 0 && b.flyingTotal === 0;
  }

  private notCompleted(b: Batch): number {
    let n = 0;
    for (let i = 0; i < b.count; i++) if (b.f[i * RS + R_STATUS] !== Task.COMPLETED) n++;
    return n;
  }

  private batchOf(batch: BatchID, what: string, afterClose = false): Batch {
    if (!afterClose) this.checkOpen(what);
    const b = this.batches.get(batch);
    if (b === undefined) throw new WeftError('EINVAL', `${this.label}: ${what}: batch ${String(batch)} is not allocated (freed already, or not from allocateBatchID of this engine)`);
    return b;
  }

  // ---------------------------------------------------------------- progress

  /** Posts queued slices, runs own-segment copies and polls, until nothing moves (bounded). */
  private pump(): void {
    if (this.pumping || this.isClosed) return;
    this.pumping = true;
    try {
      const router = this.group.router;
      if (this.revocation) this.checkRevocations();
      // A request past its deadline times out before anything more of it runs.
      if (this.earliestDeadline !== Infinity) {
        const now = performance.now();
        if (now >= this.earliestDeadline) this.checkDeadlines(now);
      }
      for (let round = 0; round < PUMP_ROUNDS; round++) {
        let moved = this.active.length > 0 ? this.postQueued() : 0;
        if (this.selfHead < this.selfQueue.length) moved += this.copySelf();
        moved += router.poll();
        if (moved === 0) break;
      }
      if (this.earliestDeadline !== Infinity || this.slices.live > 0) {
        const now = performance.now();
        if (now >= this.earliestDeadline) this.checkDeadlines(now);
        if (now >= this.nextPathCheck) {
          this.nextPathCheck = now + PATH_CHECK_MS;
          this.checkPaths();
        }
      }
      // Out of rounds with work left: the shared loop must come back at once, not sleep.
      if (this.selfHead < this.selfQueue.length || this.postable()) router.kick();
    } finally {
      this.pumping = false;
    }
  }

  /** True when some queued slice has a path with room. */
  private postable(): boolean {
    for (const peer of this.active) {
      for (let k = 0; k < peer.qps.length; k++) if (peer.dead[k] === 0 && peer.inflight[k] < this.pathDepth) return true;
    }
    return false;
  }

  /** Posts from each active peer's queue while its paths have room; returns how many. */
  private postQueued(): number {
    const act = this.active;
    const sl = this.slices;
    const f = sl.f;
    const depth = this.pathDepth;
    let posted = 0;
    for (let a = 0; a < act.length; a++) {
      const peer = act[a];
      const q = peer.queue;
      const nPaths = peer.qps.length;
      while (q.size > 0) {
        const s = q.peek();
        const b = sl.batch[s] as Batch;
        const i = f[s * SS + S_IDX];
        if (!b.live(i, f[s * SS + S_GEN])) {
          // Its request settled (TIMEOUT, FAILED), or its batch was freed since: dropped.
          q.shift();
          sl.release(s);
          continue;
        }
        const rb = b.remote(i) as RemoteBuffer;
        if (rb.retired) {
          // Its owner unregistered the buffer meanwhile (key-revocation.ts): the key is dead.
          q.shift();
          sl.release(s);
          this.settle(b, i, Task.FAILED, `rank ${peer.rank} unregistered the target buffer [${rb.addr}, ${rb.addr + rb.length}) while this request was in flight`);
          continue;
        }
        let k = -1;
        for (let t = 0; t < nPaths; t++) {
          const c = (peer.next + t) % nPaths;
          if (peer.dead[c] === 0 && peer.inflight[c] + peer.staged[c] < depth) {
            k = c;
            break;
          }
        }
        if (k < 0) {
          if (!peer.alive()) {
            q.shift();
            sl.release(s);
            this.settle(b, i, Task.FAILED, this.deadReason(peer));
            continue;
          }
          break;
        }
        q.shift();
        peer.next = k + 1 === nPaths ? 0 : k + 1;
        this.post(peer, k, s, b, i);
        posted++;
      }
      this.runStaged(peer);
      if (q.size === 0) {
        peer.listed = false;
        act.splice(a--, 1);
      }
    }
    return posted;
  }

  /**
   * Runs the copies post() staged toward `peer` (shm), back to back, then lands them. Apart,
   * each copy of a large block evicted what the bookkeeping of the next one needed (64 KiB
   * blocks ran at 0.8-0.88x the NIC stream). A copy that cannot run now (a bad key, operations
   * queued ahead) is posted as any other, and its completion says what became of it.
   */
  private runStaged(peer: Peer): void {
    const c = this.copies;
    const n = c.n;
    if (n === 0) return;
    c.n = 0;
    peer.staged.fill(0);
    const sl = this.slices;
    // A request settled since its slice was staged (FAILED by a later slice's import, say) has
    // its copies dropped. Rare: checked only when some request settled meanwhile.
    const recheck = this.settles !== c.settles;
    for (let j = 0; j < n; j++) {
      if (recheck) {
        const s = c.slice[j];
        if (!(sl.batch[s] as Batch).live(sl.f[s * SS + S_IDX], sl.f[s * SS + S_GEN])) {
          c.done[j] = DROPPED;
          continue;
        }
      }
      const qp = peer.qps[c.path[j]];
      try {
        c.done[j] = (qp.copyNow as NonNullable<QueuePair['copyNow']>)(c.read[j] === 1, c.mr[j] as MemoryRegion, c.localOff[j], c.region[j] as RemoteRegion, c.remoteOff[j], c.len[j]) ? COPIED : NOT_COPIED;
      } catch {
        // Posted instead: the post throws or completes with the error, and says why.
        c.done[j] = NOT_COPIED;
      }
    }
    for (let j = 0; j < n; j++) {
      const s = c.slice[j];
      const b = sl.batch[s] as Batch;
      const i = sl.f[s * SS + S_IDX];
      c.mr[j] = undefined;
      c.region[j] = undefined;
      if (c.done[j] === COPIED) {
        this.stats.slices++;
        sl.release(s);
        if (b.f[i * RS + R_STATUS] === Task.PENDING) b.f[i * RS + R_STATUS] = Task.WAITING;
        this.landed(b, i, c.len[j]);
      } else if (c.done[j] === DROPPED || !b.live(i, sl.f[s * SS + S_GEN])) {
        // Also a refused copy whose request settled in this loop (another slice's post failed).
        this.dropSlice(s, b, i);
      } else this.post(peer, c.path[j], s, b, i, true);
    }
  }

  /** Posts slice s (request i of b) on path k; `retry`: not staged (runStaged could not copy it). */
  private post(peer: Peer, k: number, s: number, b: Batch, i: number, retry = false): void {
    const sl = this.slices;
    const qp = peer.qps[k];
    let region;
    try {
      region = (b.remote(i) as RemoteBuffer).region(k, qp);
    } catch (err) {
      sl.release(s);
      this.settle(b, i, Task.FAILED, `rank ${peer.rank}'s key for the target buffer does not import: ${(err as Error).message}`);
      return;
    }
    const o = s * SS;
    const off = sl.f[o + S_OFF];
    const len = sl.f[o + S_LEN];
    const mr = (b.local(i) as LocalBuffer).mr;
    if (peer.copies && !retry) {
      // Same host: staged, and copied with the others of this turn by runStaged.
      peer.staged[k]++;
      const c = this.copies;
      if (c.n === 0) c.settles = this.settles;
      const n = c.n++;
      c.slice[n] = s;
      c.path[n] = k;
      c.read[n] = b.f[i * RS + R_OP] === OP_READ ? 1 : 0;
      c.localOff[n] = b.f[i * RS + R_LOCAL_OFF] + off;
      c.remoteOff[n] = b.f[i * RS + R_REMOTE_OFF] + off;
      c.len[n] = len;
      c.mr[n] = mr;
      c.region[n] = region;
      if (c.n === STAGED_MAX) this.runStaged(peer);
      return;
    }
    sl.f[o + S_PATH] = k;
    sl.f[o + S_TRIES]++;
    sl.flying(s, b.remote(i) as RemoteBuffer);
    if (++peer.inflight[k] > this.stats.peakPathInflight) this.stats.peakPathInflight = peer.inflight[k];
    b.f[i * RS + R_FLYING]++;
    b.flyingTotal++;
    if (b.f[i * RS + R_STATUS] === Task.PENDING) b.f[i * RS + R_STATUS] = Task.WAITING;
    this.stats.slices++;
    try {
      if (b.f[i * RS + R_OP] === OP_READ) qp.postRead(mr, b.f[i * RS + R_LOCAL_OFF] + off, region, b.f[i * RS + R_REMOTE_OFF] + off, len, s, true);
      else qp.postWrite(mr, b.f[i * RS + R_LOCAL_OFF] + off, region, b.f[i * RS + R_REMOTE_OFF] + off, len, s, true);
    } catch (err) {
      // A post that throws completes nothing: undo. A QP that is gone is a dead path (the slice
      // goes to another); a live QP refusing the arguments is this request's fault alone.
      sl.landed(s);
      peer.inflight[k]--;
      b.f[i * RS + R_FLYING]--;
      b.flyingTotal--;
      if (qp.state !== 'ready') {
        this.pathDied(peer, k);
        this.retryOrFail(peer, s, b, i, (err as Error).message);
      } else {
        sl.release(s);
        this.settle(b, i, Task.FAILED, `the NIC refused the slice: ${(err as Error).message}`);
      }
    }
  }

  /** Own-segment requests: one copy each, here (there is no QP to this rank). */
  private copySelf(): number {
    const q = this.selfQueue;
    let n = 0;
    while (this.selfHead < q.length && n < 64) {
      const [b, i, gen] = q[this.selfHead++];
      n++;
      if (!b.live(i, gen)) continue;
      const l = b.local(i) as LocalBuffer;
      const t = b.selfTarget(i) as LocalBuffer;
      if (!this.local.all.includes(t)) {
        this.settle(b, i, Task.FAILED, 'the target buffer of this rank was unregistered before the copy ran');
        continue;
      }
      const toff = b.f[i * RS + R_TARGET_ADDR] - t.addr;
      const loff = b.f[i * RS + R_LOCAL_OFF];
      const len = b.f[i * RS + R_LENGTH];
      try {
        // Within one buffer the ranges may overlap: copyWithin moves as memmove does.
        if (l === t) l.bytes.copyWithin(b.f[i * RS + R_OP] === OP_READ ? loff : toff, b.f[i * RS + R_OP] === OP_READ ? toff : loff, (b.f[i * RS + R_OP] === OP_READ ? toff : loff) + len);
        else if (b.f[i * RS + R_OP] === OP_READ) copyInto(l.bytes, loff, t.bytes, toff, len);
        else copyInto(t.bytes, toff, l.bytes, loff, len);
      } catch (err) {
        this.settle(b, i, Task.FAILED, `the copy within this rank failed: ${(err as Error).message}`);
        continue;
      }
      this.stats.bytes += len;
      this.settle(b, i, Task.COMPLETED, undefined);
    }
    if (this.selfHead === q.length) {
      this.selfQueue = [];
      this.selfHead = 0;
    }
    return n;
  }

  /** A completion of one of the engine's QPs (CompletionSink). */
  take(cb: CompletionBatch, e: number): void {
    const qpn = cb.qpn[e];
    const rank = this.pathRank[qpn];
    if (rank < 0) return;
    const peer = this.peers[rank] as Peer;
    const k = this.pathIndex[qpn];
    if (cb.opcode[e] === Opcode.QP_EVENT) {
      this.pathDied(peer, k);
      return;
    }
    if (cb.opcode[e] === Opcode.RECV_WRITE_IMM) {
      // A peer's key-revocation word landed (key-revocation.ts).
      this.checkRevocations();
      return;
    }
    const sl = this.slices;
    const s = cb.wrId[e];
    // A key-revocation write that failed: its path's failure shows as a QP event.
    if (s === CONTROL_WR_ID) return;
    const o = s * SS;
    const b = sl.batch[s];
    // A completion of a slice given up on this path already (the path died and it moved on).
    if (b === undefined || sl.f[o + S_FLYING] === 0 || sl.f[o + S_PATH] !== k || sl.f[o + S_RANK] !== rank) return;
    const i = sl.f[o + S_IDX];
    const target = sl.target[s] as RemoteBuffer;
    sl.landed(s);
    peer.inflight[k]--;
    // The last slice to a buffer its owner retired: the retirement may be acknowledged now.
    if (target.retired && target.flying === 0 && this.revocation) this.checkRevocations();
    if (b.gen !== sl.f[o + S_GEN]) {
      // Of a batch freed and reused since (it was not pooled while this flew: see freeBatchID).
      sl.release(s);
      return;
    }
    b.f[i * RS + R_FLYING]--;
    b.flyingTotal--;
    if (cb.status[e] === Status.SUCCESS) {
      const len = sl.f[o + S_LEN];
      sl.release(s);
      this.landed(b, i, len);
      return;
    }
    const err = cb.errors[e];
    if (!b.open(i)) {
      this.dropSlice(s, b, i);
      return;
    }
    if (cb.status[e] === Status.REMOTE_ACCESS) {
      const seg = b.segment(i) as RemoteSegment;
      const used = b.remote(i) as RemoteBuffer;
      if (seg.buffers.includes(used)) {
        // The cached key may be stale (the owner registered the bytes again): re-read the
        // descriptor, then go on with the new key or fail (refresh).
        listIn(this.accessRetry, seg).push([b, i, b.gen, s, used]);
        this.refresh(seg);
        return;
      }
      sl.release(s);
      this.settle(b, i, Task.FAILED, `rank ${rank} refused the access (the target buffer is no longer registered there): ${err?.message ?? 'remote access error'}`);
      return;
    }
    if (peer.qps[k].state !== 'ready') this.pathDied(peer, k);
    this.retryOrFail(peer, s, b, i, err?.message ?? `status ${cb.status[e]}`);
  }

  /** A slice of `len` bytes of request i of b landed (its slice entry released already). */
  private landed(b: Batch, i: number, len: number): void {
    if (b.open(i)) {
      b.f[i * RS + R_TRANSFERRED] += len;
      this.stats.bytes += len;
      if (--b.f[i * RS + R_LEFT] === 0) this.settle(b, i, Task.COMPLETED, undefined);
    } else if (b.f[i * RS + R_FLYING] === 0) this.release(b, i);
  }

  /** Drops a slice whose request settled meanwhile; the request lets go of its source when none flies. */
  private dropSlice(s: number, b: Batch, i: number): void {
    this.slices.release(s);
    if (b.gen === this.slices.f[s * SS + S_GEN] && b.f[i * RS + R_FLYING] === 0) this.release(b, i);
  }

  /**
   * Path k toward `peer` is gone (its QP failed or closed): the slices still flying on it may
   * never complete (a closed QP reports nothing of what the fabric had), so each goes to
   * another path now; a late completion of one is recognised by its path and dropped. Limit: on
   * a QP closed under the engine, a fabric operation already issued may still run, so a slice
   * can land twice (the same bytes).
   */
  private pathDied(peer: Peer, k: number): void {
    if (peer.dead[k] === 1) return;
    peer.dead[k] = 1;
    const sl = this.slices;
    const f = sl.f;
    const why = peer.qps[k].error?.message ?? `path ${k} toward rank ${peer.rank} closed`;
    if (peer.inflight[k] > 0) {
      for (let s = 0; s < sl.capacity; s++) {
        const o = s * SS;
        if (f[o + S_FLYING] === 0 || f[o + S_RANK] !== peer.rank || f[o + S_PATH] !== k) continue;
        const b = sl.batch[s] as Batch;
        const i = f[o + S_IDX];
        sl.landed(s);
        peer.inflight[k]--;
        if (b.gen !== f[o + S_GEN]) {
          sl.release(s);
          continue;
        }
        b.f[i * RS + R_FLYING]--;
        b.flyingTotal--;
        if (b.open(i)) this.retryOrFail(peer, s, b, i, why);
        else this.dropSlice(s, b, i);
      }
    }
    this.group.router.kick();
    this.kickProgress();
  }

  /** Paths whose QP left 'ready' without telling (closed under the engine): see pathDied. */
  private checkPaths(): void {
    for (const peer of this.peers) {
      if (!peer) continue;
      for (let k = 0; k < peer.qps.length; k++) if (peer.dead[k] === 0 && peer.qps[k].state !== 'ready') this.pathDied(peer, k);
    }
  }

  /** Queues slice s again, first, toward `peer`. */
  private requeue(peer: Peer, s: number): void {
    peer.queue.unshift(s);
    if (!peer.listed) {
      peer.listed = true;
      this.active.push(peer);
    }
    this.kickProgress();
  }

  /** Queues slice s again on another path toward `peer`, or fails its request when none is left. */
  private retryOrFail(peer: Peer, s: number, b: Batch, i: number, why: string): void {
    const sl = this.slices;
    if (peer.alive() && sl.f[s * SS + S_TRIES] < peer.qps.length) {
      this.stats.retries++;
      this.requeue(peer, s);
      return;
    }
    const tries = sl.f[s * SS + S_TRIES];
    const len = sl.f[s * SS + S_LEN];
    const off = sl.f[s * SS + S_OFF];
    sl.release(s);
    this.settle(b, i, Task.FAILED, `slice of ${len} bytes at +${off} failed on ${tries} path(s) toward rank ${peer.rank}: ${why}`);
  }

  private deadReason(peer: Peer): string {
    const err = peer.qps.find((q) => q.error)?.error;
    return `every path toward rank ${peer.rank} failed${err ? `: ${err.message}` : ''}`;
  }

  private timeoutReason(b: Batch, i: number): string {
    const seg = b.segment(i);
    return `not done within ${b.timeoutMs} ms (${b.f[i * RS + R_TRANSFERRED]} of ${b.f[i * RS + R_LENGTH]} bytes moved) toward ${seg ? `segment '${seg.name}' of rank ${seg.rank}` : 'its target'}; raise the batch's timeoutMs if the target is just slow, else check that it is alive`;
  }

  /** Requests past their deadline become TIMEOUT; finds the next deadline. */
  private checkDeadlines(now: number): void {
    let earliest = Infinity;
    let expired = false;
    for (const b of this.openBatches) {
      for (let i = 0; i < b.count; i++) {
        if (!b.open(i)) continue;
        const d = b.f[i * RS + R_DEADLINE];
        if (now < d) {
          if (d < earliest) earliest = d;
          continue;
        }
        this.settle(b, i, Task.TIMEOUT, this.timeoutReason(b, i));
        expired = true;
      }
    }
    this.earliestDeadline = earliest;
    // Their queued slices go now, not when a blocked path would have reached them.
    if (expired) for (const peer of this.active) this.purge(peer);
  }

  /** Drops queued slices of settled requests from `peer`'s queue. */
  private purge(peer: Peer): void {
    const q = peer.queue;
    const sl = this.slices;
    for (let n = q.size; n > 0; n--) {
      const s = q.shift();
      const b = sl.batch[s] as Batch;
      if (b.live(sl.f[s * SS + S_IDX], sl.f[s * SS + S_GEN])) q.push(s);
      else sl.release(s);
    }
  }

  /** Makes sure progress runs while requests are open: one waiter in the router's shared loop. */
  private kickProgress(): void {
    if (this.background || this.isClosed) return;
    if (this.openBatches.size === 0 && this.slices.live === 0) return;
    this.background = true;
    // Deferred: submitTransfer returns before any copy runs.
    queueMicrotask(() => {
      if (this.isClosed) {
        this.background = false;
        return;
      }
      // Until the earliest request deadline at most (the loop then wakes to time it out), and
      // while slices fly every PATH_CHECK_MS too (a QP closed under the engine reports nothing).
      const now = performance.now();
      const ms = Math.min(60_000, this.slices.live > 0 ? PATH_CHECK_MS : Infinity, Math.max(1, this.earliestDeadline - now + 1));
      this.armedAt = now + ms;
      this.group.router.waitAsync(this.idle, { deadline: new Deadline(ms), what: `${this.label}: transfer progress` }).then(
        () => {
          this.background = false;
          this.armedAt = Infinity;
          this.kickProgress();
        },
        (err: unknown) => {
          this.armedAt = Infinity;
          if ((err as WeftError).code === 'ETIMEDOUT') {
            this.background = false;
            this.kickProgress();
            return;
          }
          // Not a timeout (the device is going away): try again later, not in a microtask loop.
          setTimeout(() => {
            this.background = false;
            this.kickProgress();
          }, 10).unref();
        },
      );
    });
  }

  /** The background waiter's condition: done when nothing is open, or to re-arm for an earlier deadline. */
  private readonly idle = (): boolean => {
    this.pump();
    return this.isClosed || (this.openBatches.size === 0 && this.slices.live === 0) || this.earliestDeadline + 1 < this.armedAt;
  };

  // ---------------------------------------------------------------- close

  /** True after close(). */
  get closed(): boolean {
    return this.isClosed;
  }

  private checkOpen(what: string): void {
    if (this.isClosed) throw new WeftError('ECLOSED', `${this.label}: ${what}: the transfer engine is closed`);
  }

  /**
   * Closes the engine: open requests are FAILED (getTransferStatus still reads them), waits
   * rejected, its paths closed, its buffers unregistered and its descriptor removed from the
   * store. Not collective; peers' requests to this segment fail from then on. Peers on the
   * fabric are told first and confirm (up to `timeoutMs`, default the smaller of
   * requestTimeoutMs and 10 s; a silent one does not hold the close up longer).
   */
  async close(options: WaitOptions = {}): Promise<void> {
    if (this.isClosed) return;
    // Fabric peers stop using this segment's keys first (key-revocation.ts); one that does not
    // answer in time does not hold the close up longer.
    let retired = true;
    await this.retireKeys(CLOSING, 0, new Deadline(options.timeoutMs ?? Math.min(this.requestTimeoutMs, 10_000), options.signal), 'close').catch(() => {
      retired = false;
    });
    if (this.isClosed) return;
    // Our own acks of peers' records (their CLOSING, when they close too) must leave before the
    // paths close: closing a QP drops what it has not handed to the fabric yet.
    await this.group.router
      .waitAsync(() => this.peers.every((p) => p === undefined || p.qps.every((q) => q.state !== 'ready' || q.pendingOps === 0)), { deadline: new Deadline(1000), what: `${this.label}: close: sending the last acks` })
      .catch(() => {});
    if (this.isClosed) return;
    this.closeNow(retired);
    await this.publishing;
    await this.group.store.delete(segmentKey(this.name)).catch(() => false);
  }

  /**
   * close() without the store: for a context that closes its device now. `keysRetired` false
   * (a fabric peer did not confirm the close): every region stays registered until the device
   * closes, since that peer may still use their keys.
   */
  closeNow(keysRetired = true): void {
    if (this.isClosed) return;
    for (const b of this.openBatches) for (let i = 0; i < b.count; i++) this.settle(b, i, Task.FAILED, 'the transfer engine was closed');
    this.isClosed = true;
    const router = this.group.router;
    router.kick();
    for (const peer of this.peers) if (peer) for (const q of peer.qps) closePath(router, this, q);
    this.passive?.stop();
    if (keysRetired) {
      this.local.clear();
      for (const b of this.unconfirmed) b.mr.deregister();
      // No fabric peer writes into it any more: each confirmed the close.
      this.revocation?.mr.deregister();
    } else this.local.forget();
    this.unconfirmed.length = 0;
  }
}

/** A path of `peer` that can take a post, or -1. */
function livePath(peer: Peer): number {
  for (let k = 0; k < peer.qps.length; k++) if (pathLive(peer, k)) return k;
  return -1;
}

function pathLive(peer: Peer, k: number): boolean {
  return peer.dead[k] === 0 && peer.qps[k].state === 'ready';
}

/** The peer's process is known dead (not merely silent: a timeout is local to our paths). */
function processGone(peer: Peer): boolean {
  return peer.qps.every((q) => q.state !== 'ready') && peer.qps.some((q) => q.error?.code === 'EPEERDEAD');
}

/** The list under `key`, made empty when there is none. */
function listIn<K, V>(map: Map<K, V[]>, key: K): V[] {
  let list = map.get(key);
  if (!list) map.set(key, (list = []));
  return list;
}

/** True when rank `peer` is reached through the fabric (its stale keys must never be used). */
function reachedByFabric(group: TransferGroup, peer: number): boolean {
  const dev = group.router.device;
  return dev.provider === 'ofi' || (dev.provider === 'mixed' && !group.hosts.sameHost(group.rank, peer));
}

/**
 * The default slice toward rank `peer`: 64 KiB (the note's), or 1 MiB when the path is
 * libfabric's tcp provider (a software fabric whose cost per operation dominates below that).
 */
function defaultSlice(group: TransferGroup, peer: number): number {
  return reachedByFabric(group, peer) && /tcp/.test(group.router.device.providerName) ? 1 << 20 : 64 << 10;
}

function checkOptions(where: string, group: TransferGroup, o: TransferEngineOptions) {
  const bad = (what: string): never => {
    throw new WeftError('EINVAL', `${where}: ${what}`);
  };
  const name = o.name ?? `${group.hosts.ranks[group.rank]?.hostName ?? hostname()}:${group.rank}`;
  if (typeof name !== 'string' || name.length === 0 || name.length > 200 || /[\s/]/.test(name)) bad(`name must be 1 to 200 characters without spaces or '/', got ${JSON.stringify(name)}`);
  const location = o.location ?? 'cpu:0';
  if (typeof location !== 'string' || location.length === 0 || location.length > 64) bad(`location must be a short string such as 'cpu:0', got ${describeValue(location)}`);
  const int = (v: unknown, def: number, min: number, max: number, what: string): number => {
    const n = v ?? def;
    return Number.isInteger(n) && (n as number) >= min && (n as number) <= max ? (n as number) : bad(`${what} must be an integer in [${min}, ${max}], got ${String(v)}`);
  };
  const qpsPerPeer = int(o.qpsPerPeer, 2, 1, 16, 'qpsPerPeer');
  const sliceBytes = o.sliceBytes === undefined ? undefined : int(o.sliceBytes, 0, 1024, MAX_SLICE, 'sliceBytes');
  const pathDepth = int(o.pathDepth, 16, 1, 1024, 'pathDepth');
  const requestTimeoutMs = o.requestTimeoutMs ?? defaultTimeoutMs();
  if (typeof requestTimeoutMs !== 'number' || !(requestTimeoutMs > 0)) bad(`requestTimeoutMs must be a positive number, got ${String(o.requestTimeoutMs)}`);
  let priorityMatrix: PriorityMatrix = { [location]: [[DEVICE_NAME], []] };
  if (o.priorityMatrix !== undefined) {
    const pm = o.priorityMatrix;
    if (typeof pm !== 'object' || pm === null) bad('priorityMatrix must be an object: location -> [preferred devices, other devices]');
    for (const [loc, e] of Object.entries(pm)) {
      if (!Array.isArray(e) || e.length !== 2 || !e.every((l) => Array.isArray(l) && l.every((n) => n === DEVICE_NAME))) bad(`priorityMatrix['${loc}'] must be [preferred, other] lists of device names; this process has one device, '${DEVICE_NAME}'`);
    }
    priorityMatrix = {};
    for (const [loc, e] of Object.entries(pm)) setOwn(priorityMatrix, loc, [[...e[0]], [...e[1]]]);
    if (!Object.hasOwn(priorityMatrix, location)) setOwn(priorityMatrix, location, [[DEVICE_NAME], []]);
  }
  return { name, location, qpsPerPeer, sliceBytes, pathDepth, requestTimeoutMs, priorityMatrix };
}
