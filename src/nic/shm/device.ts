/**
 * The shm provider's device: owns a control segment (completion ring, credit grants,
 * memory-region table, doorbell) and data segments, and maps its peers' ones.
 */
import { hostCores } from '../../host/placement.js';
import { randomInt } from 'node:crypto';
import { isMainThread, threadId } from 'node:worker_threads';
import { WeftError } from '../../errors.js';
import { localIdentity, type ProcessIdentity } from '../../host/identity.js';
import { LocalCompletions } from '../local-completions.js';
import type { Device, DeviceOptions, MemoryRegion, QueuePair, QueuePairOptions } from '../types.js';
import { ShmCompletionQueue } from './completion-queue.js';
import { ShmMemoryRegion } from './memory.js';
import { PeerControl } from './peer.js';
import { ShmQueuePair, type QpHost } from './queue-pair.js';
import { createSegment, devicePrefix, sweepDeadSegments, unlinkSegment } from '../../host/segments.js';

/** Cores this process may run on: waiting spins less when peers outnumber them. */
const CORES = hostCores();
import * as L from './layout.js';

interface Segment {
  name: string;
  sab: SharedArrayBuffer;
  u8: Uint8Array;
  i32: Int32Array;
}

let deviceCounter = 0;
const liveDevices = new Set<ShmDevice>();
let exitHookInstalled = false;

/** Options only the shm provider reads. */
export interface ShmDeviceOptions extends DeviceOptions {
  /** Completion ring entries (power of two, default 16384); bounds all posted receive credits. */
  cqDepth?: number;
}

export class ShmDevice implements Device, QpHost {
  readonly provider = 'shm' as const;
  readonly providerName = 'shm';
  readonly label: string;
  readonly cq: ShmCompletionQueue;
  readonly ctl: Int32Array;
  readonly identity: ProcessIdentity;
  readonly nonce: number;
  readonly prefix: string;
  readonly local = new LocalCompletions();
  readonly opTimeoutMs: number;
  readonly autoRepost: boolean;
  readonly cqDepth: number;
  readonly qps: (ShmQueuePair | undefined)[] = new Array(L.MAX_QPS).fill(undefined);
  /** Receive credits posted and not yet consumed by a polled completion, over all QPs. */
  outstanding = 0;
  private readonly ctlName: string;
  private readonly segments = new Map<number, Segment>();
  private readonly segBySab = new WeakMap<SharedArrayBuffer, number>();
  private readonly freeSlots: number[] = [];
  private readonly regions = new Set<ShmMemoryRegion>();
  private nextSeg = 0;
  private readonly peers = new Map<string, PeerControl>();
  private readonly waitingQps = new Set<ShmQueuePair>();
  private lastPeerCheck = 0;
  /** When a peer was last found dead (0: never). */
  lastPeerDeath = 0;
  /** Credits consumed by polled completions and not yet published, per QP (QPs with autoRepost). */
  private readonly deferred = new Int32Array(L.MAX_QPS);
  /** Publish deferred credits once this many accumulate (or the peer waits for them). */
  private readonly grantBatch = new Int32Array(L.MAX_QPS);
  private readonly deferredQps = new Int32Array(L.MAX_QPS);
  /** QPs in deferredQps (the CQ flushes grants only when some are deferred). */
  deferredCount = 0;
  private closed = false;

  constructor(options: ShmDeviceOptions = {}) {
    this.label = options.label ?? `pid ${process.pid}`;
    this.opTimeoutMs = options.opTimeoutMs ?? 30_000;
    this.autoRepost = options.autoRepost ?? true;
    const depth = options.cqDepth ?? L.DEFAULT_CQ_DEPTH;
    if (!Number.isInteger(depth) || depth < 16 || depth > 1 << 24 || (depth & (depth - 1)) !== 0) {
      throw new WeftError('EINVAL', `${this.label}: cqDepth must be a power of two in [16, 2^24], got ${depth}`);
    }
    this.cqDepth = depth;
    this.identity = localIdentity();
    // Segments of crashed processes are removed before we add our own.
    sweepDeadSegments();
    // Each worker thread has its own module instance (its own counter): the thread id keeps
    // the names of devices made in different threads of one process apart.
    const dev = isMainThread ? `d${deviceCounter++}` : `t${threadId}d${deviceCounter++}`;
    this.prefix = devicePrefix(options.job ?? process.env.WEFT_JOB ?? 'weft', dev);
    this.ctlName = `${this.prefix}.ctl`;
    const sab = createSegment(this.ctlName, L.controlBytes(depth), true);
    this.ctl = new Int32Array(sab);
    this.nonce = randomInt(1, 0x7fffffff);
    const c = this.ctl;
    c[L.H_VERSION] = L.CTL_VERSION;
    c[L.H_PID] = process.pid;
    c[L.H_CQ_DEPTH] = depth;
    c[L.H_MAX_QPS] = L.MAX_QPS;
    c[L.H_MAX_MRS] = L.MAX_MRS;
    c[L.H_NONCE] = this.nonce;
    Atomics.store(c, L.H_MAGIC, L.CTL_MAGIC);
    for (let s = L.MAX_MRS - 1; s >= 0; s--) this.freeSlots.push(s);
    this.cq = new ShmCompletionQueue(this);
    liveDevices.add(this);
    installExitHook();
  }

  allocate(byteLength: number): MemoryRegion {
    this.checkOpen('allocate');
    if (!Number.isInteger(byteLength) || byteLength < 1 || byteLength > 0xffffffff) {
      throw new WeftError('EINVAL', `${this.label}: allocate(byteLength) needs an integer in [1, 4 GiB), got ${byteLength}`);
    }
    const segId = this.nextSeg++;
    const name = `${this.prefix}.m${segId}`;
    const size = Math.ceil(byteLength / 4096) * 4096;
    const sab = createSegment(name, size, true);
    const seg: Segment = { name, sab, u8: new Uint8Array(sab), i32: new Int32Array(sab) };
    this.segments.set(segId, seg);
    this.segBySab.set(sab, segId);
    return this.registerRange(segId, seg, 0, byteLength);
  }

  register(view: ArrayBufferView): MemoryRegion {
    this.checkOpen('register');
    const segId = ArrayBuffer.isView(view) && view.buffer instanceof SharedArrayBuffer ? this.segBySab.get(view.buffer) : undefined;
    if (segId === undefined) {
      throw new WeftError('EINVAL', `${this.label}: the shm provider can only register memory obtained from device.allocate() (other memory is not shared with peers); allocate the buffer there, or use provider 'ofi'`);
    }
    const seg = this.segments.get(segId) as Segment;
    if (view.byteLength < 1) throw new WeftError('EINVAL', `${this.label}: register() of an empty view`);
    return this.registerRange(segId, seg, view.byteOffset, view.byteLength);
  }

  private registerRange(segId: number, seg: Segment, offset: number, len: number): ShmMemoryRegion {
    const slot = this.freeSlots.pop();
    if (slot === undefined) throw new WeftError('EINVAL', `${this.label}: more than ${L.MAX_MRS} registered memory regions; deregister some`);
    const key = ((randomInt(1, 1 << 19) << 12) | slot) | 0;
    const e = L.MR_TABLE + slot * L.MR_WORDS;
    this.ctl[e + 1] = segId;
    this.ctl[e + 2] = offset;
    this.ctl[e + 3] = len;
    Atomics.store(this.ctl, e, key);
    const mr = new ShmMemoryRegion(this, slot, key, segId, seg.u8, seg.i32, offset, len);
    this.regions.add(mr);
    return mr;
  }

  releaseSlot(slot: number, mr: ShmMemoryRegion): void {
    this.freeSlots.push(slot);
    this.regions.delete(mr);
  }

  createQueuePair(options: QueuePairOptions = {}): QueuePair {
    this.checkOpen('createQueuePair');
    const qpn = this.qps.indexOf(undefined);
    if (qpn < 0) throw new WeftError('EINVAL', `${this.label}: more than ${L.MAX_QPS} queue pairs on one device`);
    const qp = new ShmQueuePair(this, qpn, options.peerLabel ?? `peer of QP ${qpn}`, options.autoRepost ?? this.autoRepost);
    Atomics.store(this.ctl, L.QP_GRANTED + qpn, 0);
    Atomics.store(this.ctl, L.QP_WAITER + qpn, 0);
    this.qps[qpn] = qp;
    Atomics.store(this.ctl, L.QP_STATE + qpn, L.QP_OPEN);
    const credits = options.recvCredits ?? 256;
    this.deferred[qpn] = 0;
    this.grantBatch[qpn] = Math.max(1, Math.min(16, credits >> 2));
    this.addCredits(qpn, credits);
    return qp;
  }

  addCredits(qpn: number, n: number): void {
    if (n === 0) return;
    if (this.outstanding + n > this.cqDepth) {
      throw new WeftError('EINVAL', `${this.label}: posting ${n} receive credits would exceed the completion ring (${this.outstanding} outstanding of cqDepth ${this.cqDepth}); create the device with a larger cqDepth`);
    }
    this.outstanding += n;
    Atomics.add(this.ctl, L.QP_GRANTED + qpn, n);
    if (Atomics.load(this.ctl, L.QP_WAITER + qpn) !== 0) {
      Atomics.store(this.ctl, L.QP_WAITER + qpn, 0);
      const qp = this.qps[qpn];
      qp?.peer?.ring();
    }
  }

  /** Records one consumed credit to repost (autoRepost); published by flushGrants. */
  deferGrant(qpn: number): void {
    if (this.deferred[qpn]++ === 0) this.deferredQps[this.deferredCount++] = qpn;
  }

  /**
   * Publishes deferred credits: all of them with `force` (before sleeping), else those of QPs
   * with a full batch or whose peer is blocked on credits. Batching keeps the grant word's
   * cache line from bouncing between the cores on every message.
   */
  flushGrants(force: boolean): void {
    const list = this.deferredQps;
    let keep = 0;
    for (let i = 0; i < this.deferredCount; i++) {
      const qpn = list[i];
      const n = this.deferred[qpn];
      if (force || n >= this.grantBatch[qpn] || Atomics.load(this.ctl, L.QP_WAITER + qpn) !== 0) {
        this.deferred[qpn] = 0;
        if (this.qps[qpn]) this.addCredits(qpn, n);
      } else {
        list[keep++] = qpn;
      }
    }
    this.deferredCount = keep;
  }

  /** More processes share this host's cores than there are cores (this one and its peers). */
  get oversubscribed(): boolean {
    return this.peers.size + 1 > CORES;
  }

  mapPeer(prefix: string, identity: ProcessIdentity, label: string): PeerControl {
    let peer = this.peers.get(prefix);
    if (!peer) {
      peer = new PeerControl(prefix, identity, label);
      this.peers.set(prefix, peer);
    }
    peer.refs++;
    return peer;
  }

  releasePeer(peer: PeerControl): void {
    if (--peer.refs <= 0) this.peers.delete(peer.prefix);
  }

  queued(qp: ShmQueuePair): void {
    this.waitingQps.add(qp);
  }

  detach(qp: ShmQueuePair): void {
    this.waitingQps.delete(qp);
    if (this.qps[qp.qpn] === qp) {
      Atomics.store(this.ctl, L.QP_STATE + qp.qpn, L.QP_CLOSED);
      this.qps[qp.qpn] = undefined;
    }
  }

  /** Runs queued operations and, every 100 ms, checks that peers are alive. */
  progress(now: number): void {
    if (this.waitingQps.size > 0) {
      for (const qp of this.waitingQps) {
        qp.drain(now);
        if (qp.pendingOps === 0) this.waitingQps.delete(qp);
      }
    }
    if (now - this.lastPeerCheck >= 100) this.checkPeers(now);
    if (this.lastPeerDeath !== 0) this.cq.skipDeadHole(now);
  }

  /** Moves QPs whose peer died to the error state and sweeps the dead peer's segments. */
  checkPeers(now = performance.now()): void {
    this.lastPeerCheck = now;
    const dead = new Set<number>();
    for (const qp of this.qps) {
      if (!qp || qp.state !== 'ready') continue;
      qp.checkPeer();
      if ((qp.state as string) === 'error' && qp.peer && !qp.peer.alive()) dead.add(qp.peer.identity.pid);
    }
    if (dead.size > 0) this.lastPeerDeath = now;
    for (const pid of dead) sweepDeadSegments(pid);
  }

  close(): void {
    if (this.closed) return;
    for (const qp of this.qps) qp?.close();
    for (const mr of [...this.regions]) mr.deregister();
    this.closed = true;
    this.release();
  }

  /** Unlinks this device's segments (mappings go away with their last JS reference). */
  release(): void {
    liveDevices.delete(this);
    for (const seg of this.segments.values()) unlinkSegment(seg.name);
    this.segments.clear();
    unlinkSegment(this.ctlName);
  }

  private checkOpen(what: string): void {
    if (this.closed) throw new WeftError('ECLOSED', `${this.label}: ${what} on a closed device`);
  }
}

/** A process that exits without closing its devices still removes its segments. */
function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const d of [...liveDevices]) d.release();
  });
}
