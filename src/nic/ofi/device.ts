/**
 * The ofi provider's device: one libfabric RDM endpoint (fabric, domain, AV, one CQ), a
 * registered control region (credit grants, big-length words, the MR table peers verify
 * descriptors against; layout.ts), the staging command array and the QPs.
 *
 * Why things are the way they are (measured on libfabric 1.17, tcp;ofi_rxm and shm):
 * - A wrong key or out-of-bounds WRITE completes as a success at the initiator and is
 *   dropped at the target; a bad READ fails on tcp but stalls shm's endpoint. So nothing
 *   unverified reaches the fabric: bounds are checked here and each imported region is
 *   checked once against the owner's MR table (one fi_read) before its first use.
 * - tcp reports no length for an incoming write with data, so the length (and the target
 *   QP number, for an O(1) lookup) travel in the high 32 bits of the 64-bit CQ data; the
 *   user's immediate keeps the low 32. Providers with 4-byte CQ data (verbs, efa) instead
 *   open the endpoint with FI_SOURCE and find the QP from the source address (then at
 *   most one QP per peer device; untested here).
 * - RMA has no receiver-not-ready: credits are software (queue-pair.ts).
 */
import { randomInt } from 'node:crypto';
import { WeftError } from '../../errors.js';
import { native, type OfiEndpoint } from '../../native/binding.js';
import { localIdentity, type ProcessIdentity } from '../../host/identity.js';
import { hostCores, localPlacement } from '../../host/placement.js';
import { debugLog } from '../../util/debug-log.js';
import { LocalCompletions } from '../local-completions.js';
import { Status, type Device, type DeviceOptions, type MemoryRegion, type QueuePair, type QueuePairOptions } from '../types.js';
import { CommandBuffer } from './commands.js';
import { OfiCompletionQueue } from './completion-queue.js';
import * as L from './layout.js';
import { OfiMemoryRegion } from './memory.js';
import { OfiQueuePair, type QpHost } from './queue-pair.js';

const OUT_CAPACITY = 256;
const PEER_CHECK_MS = 100;

function random32(): number {
  return randomInt(1, 0xffffffff) >>> 0;
}

function random64(): bigint {
  return (BigInt(random32()) << 32n) | BigInt(random32());
}

export class OfiDevice implements Device, QpHost {
  readonly provider = 'ofi' as const;
  readonly providerName: string;
  readonly label: string;
  readonly cq: OfiCompletionQueue;
  readonly ep: OfiEndpoint;
  readonly identity: ProcessIdentity;
  readonly nonce: number;
  readonly local = new LocalCompletions();
  readonly opTimeoutMs: number;
  readonly autoRepost: boolean;
  readonly cmds: CommandBuffer;
  readonly ctl32: Uint32Array;
  readonly ctlHandle: number;
  readonly ctlAddr: bigint;
  readonly ctlKey: bigint;
  readonly msgOrder: number;
  readonly cqDataSize: number;
  readonly fabricAddress: Uint8Array;
  readonly outWords: Uint32Array;
  readonly outCapacity = OUT_CAPACITY;
  readonly qps: (OfiQueuePair | undefined)[] = new Array(L.MAX_QPS).fill(undefined);
  /**
   * More processes on this host than cores, as the launcher says (weft run, torchrun, Open MPI
   * set the local world size): a waiter then hands its core over instead of spinning on it.
   */
  readonly oversubscribed = localPlacement().size > hostCores();
  private nextQpn = 0;
  private nextGen = 1;
  private readonly freeSlots: number[] = [];
  private readonly regions = new Set<OfiMemoryRegion>();
  /** User operations issued and not yet reported, over all QPs (QpHost). */
  inFlightOps = 0;
  /** close() has begun. */
  private closing = false;
  private readonly waitingQps = new Set<OfiQueuePair>();
  private readonly dirtyQps: OfiQueuePair[] = [];
  private readonly dirtySet = new Set<OfiQueuePair>();
  private readonly av = new Map<string, number>();
  private readonly bySource = new Map<number, number>();
  private lastPeerCheck = 0;
  private sleeping: Promise<boolean> | undefined;
  private closed = false;

  constructor(options: DeviceOptions & { fabricProvider: string }) {
    this.label = options.label ?? `pid ${process.pid}`;
    this.opTimeoutMs = options.opTimeoutMs ?? 30_000;
    this.autoRepost = options.autoRepost ?? true;
    const ofi = native.ofi;
    if (!ofi.available || !ofi.Endpoint) throw new WeftError('ENOTSUP', `${this.label}: the ofi provider is not available: ${ofi.reason ?? 'built without libfabric'}`);
    const prov = options.fabricProvider;
    // shm addresses are names, not IP addresses; everything else binds the given interface.
    const node = prov === 'shm' ? null : (options.node ?? '127.0.0.1');
    let ep: OfiEndpoint;
    try {
      ep = new ofi.Endpoint(prov, node);
      if (ep.attrs.cqDataSize < 8) {
        ep.close();
        ep = new ofi.Endpoint(prov, node, { source: true });
      }
    } catch (err) {
      throw new WeftError('ETRANSPORT', `${this.label}: cannot open libfabric provider ${prov}: ${(err as Error).message}; run \`fi_info -p ${prov.split(';')[0]}\` to see what this machine offers`, { cause: err });
    }
    this.ep = ep;
    this.providerName = `ofi:${ep.attrs.provider}`;
    this.msgOrder = ep.attrs.msgOrder;
    this.cqDataSize = ep.attrs.cqDataSize;
    this.fabricAddress = new Uint8Array(ep.address);
    this.identity = localIdentity();
    this.nonce = random32();
    const ctl = new ArrayBuffer(L.CTL_BYTES);
    this.ctl32 = new Uint32Array(ctl);
    const reg = ep.regMr(ctl, random64());
    this.ctlHandle = reg.handle;
    this.ctlKey = reg.key;
    this.ctlAddr = reg.base;
    this.cmds = new CommandBuffer(ep, 256, () => {
      if (this.flushQueued) return;
      this.flushQueued = true;
      queueMicrotask(this.flushTask);
    });
    this.outWords = new Uint32Array(OUT_CAPACITY * L.OUT_WORDS);
    ep.bindCompletions(this.outWords);
    for (let s = L.MAX_MRS - 1; s >= 0; s--) this.freeSlots.push(s);
    this.cq = new OfiCompletionQueue(this);
  }

  allocate(byteLength: number): MemoryRegion {
    this.checkOpen('allocate');
    if (!Number.isInteger(byteLength) || byteLength < 1 || byteLength > 0xffffffff) {
      throw new WeftError('EINVAL', `${this.label}: allocate(byteLength) needs an integer in [1, 4 GiB), got ${byteLength}`);
    }
    return this.register(new Uint8Array(byteLength));
  }

  register(view: ArrayBufferView): MemoryRegion {
    this.checkOpen('register');
    if (!ArrayBuffer.isView(view) || view.byteLength < 1 || view.byteLength > 0xffffffff) {
      throw new WeftError('EINVAL', `${this.label}: register() needs a non-empty ArrayBufferView of at most 4 GiB`);
    }
    // The registration holds the memory's address: a buffer that can move (resizable, growable)
    // would leave peers writing where it was.
    const backing = view.buffer as ArrayBufferLike & { resizable?: boolean; growable?: boolean };
    if (backing.resizable === true || backing.growable === true) {
      throw new WeftError('EINVAL', `${this.label}: register() of a view of a ${backing.growable === true ? 'growable SharedArrayBuffer' : 'resizable ArrayBuffer'}: its memory may move when it grows, under peers' writes; register a fixed-length buffer (device.allocate(), or new ArrayBuffer(n))`);
    }
    const bytes = new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
    const slot = this.freeSlots.pop();
    if (slot === undefined) throw new WeftError('EINVAL', `${this.label}: more than ${L.MAX_MRS} registered memory regions; deregister some`);
    let reg: { handle: number; key: bigint; base: bigint };
    try {
      reg = this.ep.regMr(bytes, random64());
    } catch (err) {
      this.freeSlots.push(slot);
      throw new WeftError('ETRANSPORT', `${this.label}: registering ${bytes.byteLength} bytes failed: ${(err as Error).message}`, { cause: err });
    }
    const mr = new OfiMemoryRegion(this, bytes, reg.handle, slot, random32(), reg.base, reg.key);
    this.regions.add(mr);
    return mr;
  }

  release(region: OfiMemoryRegion): void {
    this.regions.delete(region);
    this.freeSlots.push(region.slot);
    if (this.closed) return; // ep.close() releases every registration after the endpoint
    if (region.inFlight > 0) region.releasePending = true;
    else this.ep.deregMr(region.handle, region.pinned);
  }

  /**
   * The last in-flight operation on a deregistered region ended (QpHost). Runs inside
   * completion handling and QP failure: it must not throw there. When `fi_close(mr)` fails,
   * the native side keeps the memory until the endpoint closes, which is all that is left to do.
   */
  releaseSettled(region: OfiMemoryRegion): void {
    region.releasePending = false;
    if (this.closed || this.closing) return; // ep.close() releases every registration
    try {
      this.ep.deregMr(region.handle, region.pinned);
    } catch (err) {
      debugLog(`${this.label}: ofi: releasing a deregistered region after its last operation: ${(err as Error).message}`);
    }
  }

  createQueuePair(options: QueuePairOptions = {}): QueuePair {
    this.checkOpen('createQueuePair');
    const credits = options.recvCredits ?? 256;
    if (!Number.isInteger(credits) || credits < 0) throw new WeftError('EINVAL', `${this.label}: recvCredits must be a non-negative integer, got ${credits}`);
    // Round-robin numbers: a late completion for a closed QP rarely meets a new one.
    let qpn = -1;
    for (let k = 0; k < L.MAX_QPS; k++) {
      const c = (this.nextQpn + k) % L.MAX_QPS;
      if (this.qps[c] === undefined) {
        qpn = c;
        break;
      }
    }
    if (qpn < 0) throw new WeftError('EINVAL', `${this.label}: more than ${L.MAX_QPS} queue pairs on one device`);
    this.nextQpn = (qpn + 1) % L.MAX_QPS;
    const qp = new OfiQueuePair(this, qpn, this.nextGen++ & 0xfffff || this.nextGen++, options.peerLabel ?? `peer of QP ${qpn}`, credits, options.autoRepost ?? this.autoRepost);
    this.qps[qpn] = qp;
    return qp;
  }

  avInsert(address: Uint8Array): number {
    const key = Buffer.from(address).toString('hex');
    let a = this.av.get(key);
    if (a === undefined) {
      a = this.ep.avInsert(address);
      this.av.set(key, a);
    }
    return a;
  }

  mapSource(fiAddr: number, qpn: number): void {
    if (this.ep.attrs.source) this.bySource.set(fiAddr, qpn);
  }

  /** QP number for a completion's source address (FI_SOURCE mode only). */
  qpnOfSource(src: number): number {
    return this.bySource.get(src) ?? L.MAX_QPS;
  }

  queued(qp: OfiQueuePair): void {
    this.waitingQps.add(qp);
  }

  dirty(qp: OfiQueuePair): void {
    if (this.dirtySet.has(qp)) return;
    this.dirtySet.add(qp);
    this.dirtyQps.push(qp);
  }

  detach(qp: OfiQueuePair): void {
    this.waitingQps.delete(qp);
    this.dirtySet.delete(qp);
    if (this.qps[qp.qpn] === qp) this.qps[qp.qpn] = undefined;
  }

  private flushQueued = false;
  private readonly flushTask = (): void => {
    this.flushQueued = false;
    if (!this.closed) this.submit();
  };

  /** Hands staged commands to libfabric (one native call). */
  submit(): void {
    if (this.cmds.pending > 0) this.cmds.flush(this.onPostFailed);
  }

  /**
   * Device.flush: issues what QPs hold back (operations waiting for credits or order), then
   * hands everything staged to libfabric, so it moves while the caller works before its poll.
   */
  flush(): void {
    if (!this.closed) this.progress(performance.now());
  }

  private readonly onPostFailed = (ctxLo: number, ctxHi: number, errno: number): void => {
    const qp = this.qps[ctxHi & 0x3ff];
    if (!qp || (qp.gen & 0xfffff) !== ctxHi >>> 12) return;
    const text = this.ep.strerror(errno);
    if (((ctxHi >>> 10) & 3) === L.CTX_USER) qp.onComplete(ctxLo | 0, false, `post failed: ${text}`, errno < 0 ? -errno : errno);
    else qp.fail(Status.TRANSPORT, `posting an internal operation failed: ${text}`);
  };

  /** Issues queued operations, publishes credits, checks peers and timeouts; then flushes. */
  progress(now: number): void {
    if (this.waitingQps.size > 0) {
      for (const qp of this.waitingQps) {
        qp.drain(now);
        if (!qp.waiting || qp.state !== 'ready') this.waitingQps.delete(qp);
      }
    }
    if (this.dirtyQps.length > 0) {
      for (const qp of this.dirtyQps) qp.publishGrant();
      this.dirtyQps.length = 0;
      this.dirtySet.clear();
    }
    if (now - this.lastPeerCheck >= PEER_CHECK_MS) {
      this.lastPeerCheck = now;
      for (const qp of this.qps) {
        if (!qp || qp.state !== 'ready') continue;
        qp.checkPeer(now);
        qp.checkTimeout(now);
      }
    }
    this.submit();
  }

  /** Operations under way, commands or credits not handed over, completions unread (Device). */
  hasWorkInFlight(): boolean {
    return this.inFlightOps > 0 || this.cmds.pending > 0 || this.waitingQps.size > 0 || this.dirtyQps.length > 0 || this.local.size > 0 || this.cq.holding;
  }

  /** Publishes every gathered credit (before sleeping: the peer may wait for them). */
  publishAll(): void {
    for (const qp of this.qps) if (qp?.hasUnpublished) this.dirty(qp);
    this.progress(performance.now());
  }

  /**
   * Until the CQ's wait fd next turns readable (a completion, or fabric work to progress): then
   * a helper thread adds 1 to `words[index]`, a futex in shared memory, and wakes its waiters.
   * For a device that sleeps on another provider's futex. Call after `ep.mayBlock()` said true.
   * False when the provider has no wait fd.
   */
  ringOnActivity(words: Int32Array, index: number): boolean {
    return this.ep.ringOnActivity(words, index);
  }

  /**
   * Sleeps until the CQ may have something or `ms` pass (one native wait shared by callers);
   * with work already pending, until the next event-loop iteration.
   */
  sleepAsync(ms: number): Promise<boolean> {
    if (!this.ep.attrs.waitFd) return new Promise((r) => setTimeout(() => r(true), Math.min(ms, 1)));
    if (!this.sleeping) {
      this.sleeping = this.ep.waitAsync(ms).finally(() => {
        this.sleeping = undefined;
      });
    }
    return this.sleeping;
  }

  close(): void {
    if (this.closed) return;
    // The QPs' abandoned operations settle their regions as they close: ep.close() releases them.
    this.closing = true;
    for (const qp of this.qps) qp?.close();
    // Closed first: the regions' registrations then go with the endpoint (ep.close() gives
    // their memory back after the fabric endpoint is closed), so nothing still in the provider
    // writes into memory already released.
    this.closed = true;
    for (const r of [...this.regions]) r.deregister();
    this.ep.close();
  }

  private checkOpen(what: string): void {
    if (this.closed) throw new WeftError('ECLOSED', `${this.label}: ${what} on a closed device`);
  }
}

/** Creates an ofi device on libfabric provider `fabricProvider` (e.g. 'tcp;ofi_rxm', 'shm'). */
export function createOfiDevice(options: DeviceOptions & { fabricProvider: string }): Device {
  return new OfiDevice(options);
}
