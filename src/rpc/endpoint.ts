/**
 * A copyrpc endpoint: one queue pair to one peer endpoint, a send ring and a recv ring.
 *
 * Send side (deferred send): `call` and `reply` only write header + payload into the send
 * ring; the open batch starts with a 32-byte flow-metadata placeholder. `flushBatch` (from
 * Context.poll/flush) fills the metadata (our consumer position, a credit grant, the message
 * count) and posts ONE WRITE_IMM for the whole batch, imm = bytes / 32, to the same virtual
 * position in the peer's recv ring. A batch never reaches the end of a ring cycle (strict
 * `<`): when the next message would, the batch is sent and a wrap marker (count 0xFFFFFFFF)
 * tells the peer to skip to the next cycle.
 *
 * Flow control (notes: in_flight + 2R <= C): in_flight is what we wrote minus the peer's
 * consumer position (piggybacked on its batches, or READ from its consumer word when stale);
 * R is the response space we promised the peer by credit grants; C the ring cycle. `call`
 * checks the ring and the credit the peer granted us; `reply` checks nothing, because the
 * caller's credit reserved its space.
 *
 * Receive side: each RECV_WRITE_IMM is one batch at our parse position; it is decoded in
 * order, every read bounds-checked against the batch, and anything malformed fails this
 * endpoint with EPROTO (never the process). Responses go to the poll callback at once;
 * requests are queued as RecvHandles; their bytes are released (the consumer position moves
 * past them) at the poll after recv() took them, so a slow reply never blocks the ring.
 *
 * Positions are virtual byte counts held in doubles (exact below 2^53: about 100 days at
 * 1 GB/s per direction); physical offsets are tracked incrementally, never by `%` on the
 * hot path: `%` on a double is a C call in V8. Where low bits are needed, `x >>> 0` is x mod
 * 2^32 for these non-negative integers, and every ring size and 32 divide 2^32.
 */
import { WeftError } from '../errors.js';
import { copyInto } from '../util/copy.js';
import { describeValue as describe } from '../util/describe.js';
import type { Device, MemoryRegion, QueuePair, RemoteRegion } from '../nic/types.js';
import {
  ALIGNMENT,
  FLOW_METADATA_SIZE as META,
  HEADER_SIZE,
  INSUFFICIENT_CREDIT,
  RESPONSE_FLAG,
  RING_FULL,
  SIGNAL_INTERVAL,
  WRAP_MESSAGE_COUNT,
  effectiveRing,
  maxResponseReservation,
  responsePayloadLimit,
  validRingSize,
  DEFAULT_RING_SIZE,
  type CallResult,
} from './constants.js';
import { ReleaseQueue } from './release-queue.js';
import { MISSING, Slab } from './slab.js';
import { decodeEndpointInfo, encodeEndpointInfo } from './wire.js';
import type { RecvHandle } from './recv-handle.js';
import { driverFor, type RequestOptions } from './driver.js';
import type { Context } from './context.js';

/** Work-request ids on the endpoint's QP. */
export const WR_BATCH = 0;
export const WR_READ = 1;
export const WR_RAW = 2;

const TWO32 = 0x100000000;
/** Control area after the rings: consumer position (u64) at 0, READ landing buffer at 32. */
const CTL_BYTES = 64;

/** Options of `Context.createEndpoint`. */
export interface EndpointOptions {
  /** Send ring bytes (power of two, default 1 MiB). */
  sendRingSize?: number;
  /** Recv ring bytes (power of two, default 1 MiB). */
  recvRingSize?: number;
  /** Ceiling of the response reservation R (default: ring / 4, also the most it can be). */
  maxRespReservation?: number;
  /** How the peer is called in errors, e.g. "rank 3". */
  peerLabel?: string;
  /** This endpoint's share of the context's receive credits (default 64). */
  recvCredits?: number;
}

/** Counters an endpoint keeps (cheap increments; read them for benchmarks and tests). */
export interface EndpointStats {
  calls: number;
  responses: number;
  requests: number;
  replies: number;
  batchesSent: number;
  batchesReceived: number;
  emptyBatchesSent: number;
  wrapsSent: number;
  wrapsReceived: number;
  ringFull: number;
  insufficientCredit: number;
  reads: number;
  invariantChecks: number;
}

/** What an endpoint needs from its context. */
export interface RpcHost<U> {
  readonly label: string;
  readonly device: Device;
  readonly debug: boolean;
  markDirty(ep: Endpoint<U>): void;
  deliverResponse(userData: U, buffer: Uint8Array, offset: number, length: number, ep: Endpoint<U>): void;
  pushRequest(ep: Endpoint<U>, callId: number, offset: number, length: number, internalAllowance: number, holdSeq: number): void;
  releaseHandle(h: RecvHandle<U>): void;
  endpointFailed(ep: Endpoint<U>): void;
  endpointClosed(ep: Endpoint<U>): void;
  rawPosted(): void;
}

export class Endpoint<U = unknown> {
  readonly id: number;
  readonly peerLabel: string;
  readonly qp: QueuePair;
  readonly sendRingSize: number;
  readonly recvRingSize: number;
  /** This endpoint's receive-credit share (the SRQ emulation, see Context). */
  readonly recvCredits: number;
  /** Credits consumed since the last repost. */
  consumedCredits = 0;
  state: 'init' | 'ready' | 'failed' | 'closed' = 'init';
  /** Why the endpoint failed (state 'failed'). */
  error: WeftError | undefined;
  readonly stats: EndpointStats = {
    calls: 0, responses: 0, requests: 0, replies: 0, batchesSent: 0, batchesReceived: 0, emptyBatchesSent: 0,
    wrapsSent: 0, wrapsReceived: 0, ringFull: 0, insufficientCredit: 0, reads: 0, invariantChecks: 0,
  };
  /** @internal set while queued on the context's dirty list */
  dirty = false;
  /** @internal set while queued on the context's taken list */
  tookSincePoll = false;

  private readonly host: RpcHost<U>;
  private readonly mr: MemoryRegion;
  private readonly recvMr: MemoryRegion;
  private readonly ctlMr: MemoryRegion;
  /**
   * The send ring; on shm, once connected, the peer's recv ring itself (see `inPlace`). The
   * views and mask change once, in connect().
   */
  private s8: Uint8Array;
  private s32: Uint32Array;
  /** The send ring as int32 words, the destination of word-wise payload copies. */
  private si32: Int32Array;
  /**
   * shm: calls and replies are written straight into the peer's recv ring (its mapping is
   * ours too) and each batch is posted as a WRITE_IMM in place: no copy at flush, and the
   * stores' cache-line transfers overlap the rest of the work instead of stalling the post.
   * Only space the peer has released is written, as a copy at flush would.
   */
  private inPlace = false;
  /** The recv ring (handles and response callbacks read payloads from it). */
  readonly recvRing: Uint8Array;
  private readonly r32: Uint32Array;
  private readonly ctl32: Uint32Array;
  private readonly ctlBase: number;
  private readonly cfgMaxResp: number;
  private readonly slab = new Slab<U>();
  private readonly holds = new ReleaseQueue();
  private remoteRecv: RemoteRegion | undefined;
  private remoteCtl: RemoteRegion | undefined;
  private remoteRecvSize = 0;

  // Send side. C: the ring cycle of this direction (min of our send ring and the peer's recv ring).
  private C = 0;
  private cMask = 0;
  private sMask: number;
  /** Producer: virtual position of the next byte written to the send ring. */
  private P = 0;
  /** P's offset in the send ring. */
  private sOff = 0;
  /** Everything before this has been posted. */
  private flushStart = 0;
  /** Virtual position of the open batch's metadata, -1 when no batch is open. */
  private metaPos = -1;
  private metaOff = 0;
  private batchCount = 0;
  /** Where the write in progress will end (grants computed mid-write must leave it room). */
  private writeEnd = 0;
  /** The peer's consumer position of our bytes (piggybacked or READ). */
  private remoteConsumer = 0;
  /** R: response bytes we promised the peer and have not written yet. */
  private R = 0;
  private maxResp = 0;
  /** Credit the peer granted us for calls. */
  private peerCredit = 0;
  /** The peer's R ceiling: our credit can never exceed it. */
  private peerCap = 0;
  /** Credit we granted that the peer has not used for a request yet (as far as we know). */
  private creditOut = 0;
  private maxMessage = 0;
  private unsignaled = 0;
  private readWanted = false;
  private readInFlight = false;
  private reportWanted = false;

  // Receive side. recvC: the peer's ring cycle toward us.
  private recvC = 0;
  private readonly rMask: number;
  /** Virtual position of the next batch (= the recv producer once a batch is decoded). */
  private parsePos = 0;
  private parseOff = 0;
  /** Consumer position we publish: nothing before it is needed any more. */
  private releasePos = 0;
  private lastNotified = 0;

  constructor(host: RpcHost<U>, id: number, options: EndpointOptions = {}) {
    this.host = host;
    this.id = id;
    this.peerLabel = options.peerLabel ?? `endpoint ${id}'s peer`;
    const where = `${host.label}: createEndpoint toward ${this.peerLabel}`;
    const send = options.sendRingSize ?? DEFAULT_RING_SIZE;
    const recv = options.recvRingSize ?? DEFAULT_RING_SIZE;
    if (!validRingSize(send) || !validRingSize(recv)) throw new WeftError('EINVAL', `${where}: ring sizes must be powers of two in [1 KiB, 1 GiB], got send ${send}, recv ${recv}`);
    const maxResp = options.maxRespReservation ?? send / 4;
    if (!Number.isInteger(maxResp) || maxResp < 64 || maxResp % ALIGNMENT !== 0) throw new WeftError('EINVAL', `${where}: maxRespReservation must be a multiple of 32 of at least 64, got ${maxResp}`);
    const credits = options.recvCredits ?? 64;
    if (!Number.isInteger(credits) || credits < 4) throw new WeftError('EINVAL', `${where}: recvCredits must be an integer >= 4, got ${credits}`);
    this.sendRingSize = send;
    this.recvRingSize = recv;
    this.sMask = send - 1;
    this.rMask = recv - 1;
    this.cfgMaxResp = maxResp;
    this.recvCredits = credits;
    const dev = host.device;
    // One allocation (one shm segment) per endpoint: [send ring][recv ring][control].
    this.mr = dev.allocate(send + recv + CTL_BYTES);
    const bytes = this.mr.bytes;
    if (bytes.byteOffset % 8 !== 0) throw new WeftError('EINVAL', `${where}: the device returned memory that is not 8-byte aligned`);
    this.recvMr = dev.register(bytes.subarray(send, send + recv));
    this.ctlBase = send + recv;
    this.ctlMr = dev.register(bytes.subarray(this.ctlBase, this.ctlBase + CTL_BYTES));
    this.s8 = bytes.subarray(0, send);
    this.s32 = new Uint32Array(bytes.buffer, bytes.byteOffset, send >>> 2);
    this.si32 = new Int32Array(bytes.buffer, bytes.byteOffset, send >>> 2);
    this.recvRing = bytes.subarray(send, send + recv);
    this.r32 = new Uint32Array(bytes.buffer, bytes.byteOffset + send, recv >>> 2);
    this.ctl32 = new Uint32Array(bytes.buffer, bytes.byteOffset + this.ctlBase, CTL_BYTES >>> 2);
    this.qp = dev.createQueuePair({ peerLabel: this.peerLabel, recvCredits: credits });
  }

  /** `rank 0: endpoint 2 (toward rank 3)`, for messages. */
  get name(): string {
    return `${this.host.label}: endpoint ${this.id} (toward ${this.peerLabel})`;
  }

  /** Calls issued and not yet answered. */
  get pendingCalls(): number {
    return this.slab.size;
  }

  /** Largest payload `call` accepts (a message must fit in a quarter ring with its metadata). */
  get maxPayload(): number {
    return this.maxMessage - HEADER_SIZE;
  }

  /** Largest `responseAllowance` a call may ask for (bounded by the peer's reservation ceiling). */
  get maxResponseAllowance(): number {
    return responsePayloadLimit(this.peerCap);
  }

  /**
   * The bytes the peer passes to its `connect`: QP address, recv ring and consumer-position
   * descriptors, ring sizes and the response-reservation ceiling (docs/wire-format.md).
   */
  localInfo(): Uint8Array {
    return encodeEndpointInfo({
      recvRingSize: this.recvRingSize,
      sendRingSize: this.sendRingSize,
      maxRespReservation: this.cfgMaxResp,
      qpAddress: this.qp.address(),
      recvRing: this.recvMr.descriptor(),
      consumer: this.ctlMr.descriptor(),
    });
  }

  /**
   * Connects to the peer endpoint whose `localInfo()` these bytes are. Credit is mutual from
   * here on, with no handshake: both sides derive the initial credit from the two infos.
   *
   * @example
   * ep.connect(peerInfo); // peerInfo: the peer's ep.localInfo(), exchanged out of band
   */
  connect(remoteInfo: Uint8Array): void {
    const where = `${this.name}: connect`;
    if (this.state !== 'init') throw new WeftError('EINVAL', `${where}: the endpoint is ${this.state}; create a new endpoint to reconnect`);
    const info = decodeEndpointInfo(remoteInfo, where);
    this.qp.connect(info.qpAddress);
    const recv = this.qp.importRegion(info.recvRing);
    const ctl = this.qp.importRegion(info.consumer);
    if (recv.byteLength !== info.recvRingSize || ctl.byteLength < 16) throw new WeftError('EPROTO', `${where}: the peer's region descriptors do not match its ring sizes`);
    this.remoteRecv = recv;
    this.remoteCtl = ctl;
    this.remoteRecvSize = info.recvRingSize;
    const direct = recv.direct;
    if (direct && this.qp.postWriteImmInPlace) {
      // Offsets in the send ring become offsets in the peer's ring (sOff = P mod its size).
      this.inPlace = true;
      this.s8 = direct;
      this.s32 = new Uint32Array(direct.buffer, direct.byteOffset, direct.length >>> 2);
      this.si32 = new Int32Array(direct.buffer, direct.byteOffset, direct.length >>> 2);
      this.sMask = info.recvRingSize - 1;
    }
    this.C = effectiveRing(this.sendRingSize, info.recvRingSize);
    this.cMask = this.C - 1;
    this.recvC = effectiveRing(info.sendRingSize, this.recvRingSize);
    this.maxResp = maxResponseReservation(this.cfgMaxResp, this.C);
    this.R = this.maxResp;
    this.creditOut = this.maxResp;
    this.peerCap = maxResponseReservation(info.maxRespReservation, this.recvC);
    this.peerCredit = this.peerCap;
    // With R at most C/4, a message of C/4 (metadata and wrap included) always fits eventually.
    this.maxMessage = this.C / 4 - META;
    this.state = 'ready';
    const early = this.early;
    this.early = undefined;
    if (early) for (const imm of early) this.ingest(imm);
  }

  /**
   * Writes a call into the send ring (sent at the next poll/flush). Returns the call id, or
   * RING_FULL / INSUFFICIENT_CREDIT (retry after a poll). `responseAllowance` is the largest
   * response payload the callee may send; its padded size plus 32 bytes of credit is taken
   * from what the peer granted. Throws EINVAL for sizes that could never fit, and the
   * endpoint's error once it failed.
   *
   * @example
   * const id = ep.call(payload, token, 64);
   * if (id < 0) ctx.poll(onResponse); // RING_FULL or INSUFFICIENT_CREDIT: retry later
   */
  call(payload: Uint8Array, userData: U, responseAllowance: number): CallResult {
    if (this.state !== 'ready') throw this.unusable('call');
    // length, not byteLength: V8 inlines the first and calls a builtin for the second.
    if (!(payload instanceof Uint8Array) || (responseAllowance >>> 0) !== responseAllowance) this.badCall(payload, responseAllowance);
    const len = payload.length;
    const ia = ((HEADER_SIZE + responseAllowance + 31) & ~31) + META;
    const m = (HEADER_SIZE + len + 31) & ~31;
    if (ia > this.peerCap || m > this.maxMessage) this.badCall(payload, responseAllowance);
    if (ia > this.peerCredit) {
      this.stats.insufficientCredit++;
      this.reportWanted = true;
      this.host.markDirty(this);
      return INSUFFICIENT_CREDIT;
    }
    const end = this.P + this.delta(m);
    if (end - this.remoteConsumer + 2 * this.R > this.C) {
      this.stats.ringFull++;
      this.readWanted = true;
      this.host.markDirty(this);
      return RING_FULL;
    }
    const id = this.slab.alloc(userData);
    this.peerCredit -= ia;
    this.writeEnd = end;
    const at = this.reserve(m);
    this.writeEnd = 0;
    const w = at >>> 2;
    const s32 = this.s32;
    s32[w] = id;
    s32[w + 1] = ia >>> 5;
    s32[w + 2] = len;
    this.copyIn(payload, at + HEADER_SIZE, len, at + m);
    this.stats.calls++;
    if (this.host.debug) this.checkInvariant('call');
    return id;
  }

  /**
   * Sends `bytes` and resolves with a copy of the response (the convenience layer: the
   * context's driver polls while requests are outstanding). Rejects with ETIMEDOUT after
   * `timeoutMs`, EABORTED on `signal`, and the endpoint's error (EPEERDEAD, EPROTO, ...)
   * when it fails.
   *
   * @example
   * const reply = await ep.request(new TextEncoder().encode('ping'), { timeoutMs: 2000 });
   */
  request(bytes: Uint8Array, options?: RequestOptions): Promise<Uint8Array> {
    return driverFor(this.host as unknown as Context<unknown>).request(this as unknown as Endpoint<unknown>, bytes, options);
  }

  /** @internal RecvHandle.reply: no ring-full check, the caller's credit reserved the space. */
  reply(h: RecvHandle<U>, bytes: Uint8Array): void {
    if (!(bytes instanceof Uint8Array)) throw new WeftError('EINVAL', `${this.name}: reply(bytes) to call ${h.callId} needs a Uint8Array, got ${describe(bytes)}`);
    const len = bytes.length;
    const m = (HEADER_SIZE + len + 31) & ~31;
    if (m + META > h.internalAllowance) {
      throw new WeftError('EINVAL', `${this.name}: reply of ${len} bytes to call ${h.callId} exceeds the caller's response allowance of ${responsePayloadLimit(h.internalAllowance)} bytes; send less, or have the caller pass a larger responseAllowance`);
    }
    const callId = h.callId;
    const ia = h.internalAllowance;
    h.live = false;
    this.host.releaseHandle(h);
    if (this.state !== 'ready') return;
    // Give the reservation back first: grants computed while this write wraps then see it.
    this.R -= ia;
    this.writeEnd = this.P + this.delta(m);
    const at = this.reserve(m);
    this.writeEnd = 0;
    const w = at >>> 2;
    const s32 = this.s32;
    s32[w] = (callId | RESPONSE_FLAG) >>> 0;
    s32[w + 1] = ia >>> 5;
    s32[w + 2] = len;
    this.copyIn(bytes, at + HEADER_SIZE, len, at + m);
    this.stats.replies++;
    if (this.host.debug) this.checkInvariant('reply');
  }

  /**
   * Posts a one-sided RDMA WRITE of `len` bytes from `local` to the peer's `remote`
   * (imported with `importRegion`); counted in `ctx.rawPending` until it completes.
   *
   * @example
   * ep.rdmaWrite(mr, 0, peerRegion, 0, 4096);
   */
  rdmaWrite(local: MemoryRegion, localOffset: number, remote: RemoteRegion, remoteOffset: number, len: number): void {
    if (this.state !== 'ready') throw this.unusable('rdmaWrite');
    this.qp.postWrite(local, localOffset, remote, remoteOffset, len, WR_RAW, true);
    this.host.rawPosted();
  }

  /**
   * Posts a one-sided RDMA READ of `len` bytes of the peer's `remote` into `local`.
   *
   * @example
   * ep.rdmaRead(mr, 0, peerRegion, 0, 4096);
   * while (ctx.rawPending > 0) ctx.poll();
   */
  rdmaRead(local: MemoryRegion, localOffset: number, remote: RemoteRegion, remoteOffset: number, len: number): void {
    if (this.state !== 'ready') throw this.unusable('rdmaRead');
    this.qp.postRead(local, localOffset, remote, remoteOffset, len, WR_RAW, true);
    this.host.rawPosted();
  }

  /** Decodes a peer's memory-region descriptor for rdmaRead/rdmaWrite. */
  importRegion(descriptor: Uint8Array): RemoteRegion {
    return this.qp.importRegion(descriptor);
  }

  // ---- send ring ------------------------------------------------------------------------

  /** Bytes the producer advances to write a message of padded size m (metadata, wrap included). */
  private delta(m: number): number {
    const C = this.C;
    const c = this.sOff & this.cMask;
    if (this.metaPos < 0) return c + META + m >= C ? C - c + META + m : META + m;
    if ((this.metaOff & this.cMask) + (this.P - this.metaPos) + m >= C) return C - c + META + m;
    return m;
  }

  /** Makes room for a message of padded size m in the open batch; returns its ring offset. */
  private reserve(m: number): number {
    if (this.metaPos < 0) {
      if ((this.sOff & this.cMask) + META + m >= this.C) this.wrap();
      this.openBatch();
    } else if ((this.metaOff & this.cMask) + (this.P - this.metaPos) + m >= this.C) {
      this.flushBatch();
      this.wrap();
      this.openBatch();
    }
    const at = this.sOff;
    this.P += m;
    this.sOff += m;
    this.batchCount++;
    if (!this.dirty) this.host.markDirty(this);
    return at;
  }

  private openBatch(): void {
    this.metaPos = this.P;
    this.metaOff = this.sOff;
    this.P += META;
    this.sOff += META;
    this.batchCount = 0;
  }

  /**
   * Emits a wrap marker at the producer and skips to the next cycle. Only its 32 bytes are
   * transferred; the immediate covers the whole skip so the peer's producer lands on the
   * cycle start.
   */
  private wrap(): void {
    const at = this.sOff;
    const start = this.P;
    const skip = this.C - (at & this.cMask);
    this.P += skip;
    this.sOff = (at + skip) & this.sMask;
    this.fillMetadata(at, WRAP_MESSAGE_COUNT);
    this.post(at, start, META, skip);
    this.flushStart = this.P;
    this.stats.wrapsSent++;
  }

  /** Fills the open batch's metadata and posts it as one WRITE_IMM. */
  flushBatch(): void {
    if (this.metaPos < 0) return;
    this.fillMetadata(this.metaOff, this.batchCount);
    const len = this.P - this.metaPos;
    this.post(this.metaOff, this.metaPos, len, len);
    this.flushStart = this.P;
    this.metaPos = -1;
    this.batchCount = 0;
    this.stats.batchesSent++;
  }

  private post(localOff: number, pos: number, len: number, span: number): void {
    const signaled = ++this.unsignaled >= SIGNAL_INTERVAL;
    if (signaled) this.unsignaled = 0;
    const rOff = (pos >>> 0) & (this.remoteRecvSize - 1);
    if (this.inPlace) this.qp.postWriteImmInPlace!(this.remoteRecv as RemoteRegion, rOff, len, span / ALIGNMENT, WR_BATCH, signaled);
    else this.qp.postWriteImm(this.mr, localOff, this.remoteRecv as RemoteRegion, rOff, len, span / ALIGNMENT, WR_BATCH, signaled);
  }

  /** Writes consumer position, credit grant and count at send-ring offset `at`. */
  private fillMetadata(at: number, count: number): void {
    const inflight = Math.max(this.P, this.writeEnd) - this.remoteConsumer;
    const R = this.R;
    let grant = Math.min((this.C - inflight) / 2 - R, this.maxResp - R);
    grant = grant >= ALIGNMENT ? grant & ~(ALIGNMENT - 1) : 0;
    this.R = R + grant;
    this.creditOut += grant;
    const rel = this.releasePos;
    this.lastNotified = rel;
    const s32 = this.s32;
    const w = at >>> 2;
    s32[w] = rel >>> 0;
    s32[w + 1] = (rel / TWO32) >>> 0;
    s32[w + 2] = grant;
    s32[w + 3] = 0;
    s32[w + 4] = count;
    s32[w + 5] = 0;
    s32[w + 6] = 0;
    s32[w + 7] = 0;
    if (this.host.debug) this.checkInvariant('metadata');
  }

  /**
   * Copies the payload and zeroes the padding up to `end`. Stores into shared memory cost
   * about 1.5 ns per byte store here, so short payloads are assembled into 32-bit words
   * (`dst` is 4-aligned: a 32-aligned message plus the 12-byte header): 20 ns for 32 B against
   * 50 ns byte-wise or 29 ns through set(). Longer ones go through copyInto.
   */
  private copyIn(src: Uint8Array, dst: number, len: number, end: number): void {
    const s8 = this.s8;
    let p = dst + len;
    if (len <= 64) {
      const d32 = this.si32;
      const n = len & ~3;
      let i = 0;
      for (let w = dst >>> 2; i < n; i += 4, w++) d32[w] = src[i] | (src[i + 1] << 8) | (src[i + 2] << 16) | (src[i + 3] << 24);
      for (; i < len; i++) s8[dst + i] = src[i];
    } else {
      copyInto(s8, dst, src, 0, len);
    }
    while (p & 3 && p < end) s8[p++] = 0;
    const s32 = this.s32;
    for (let w = p >>> 2, e = end >>> 2; w < e; w++) s32[w] = 0;
  }

  /**
   * Context.flush step for this endpoint: sends the open batch; when none is open, sends a
   * metadata-only batch if the peer waits for our consumer position or our credit (with
   * nothing else to carry them, an idle direction would never return them); posts the
   * consumer READ when a call found the ring full.
   */
  flushWork(): void {
    if (this.state !== 'ready') {
      this.dirty = false;
      return;
    }
    if (this.metaPos >= 0) {
      this.flushBatch();
    } else {
      const unreported = this.releasePos - this.lastNotified;
      let want = unreported > 0 && (this.reportWanted || unreported * 4 >= this.recvC);
      if (!want) {
        // Grant when it is worth a WRITE: a good chunk, or everything the peer can hold.
        const g = this.grantable();
        want = g >= ALIGNMENT && (g * 8 >= this.maxResp || this.creditOut + g >= this.maxResp);
      }
      if (want && this.P + this.delta(0) - this.remoteConsumer + 2 * this.R <= this.C) {
        this.reserve(0);
        this.batchCount = 0;
        this.flushBatch();
        this.stats.emptyBatchesSent++;
      }
    }
    this.dirty = false;
    this.reportWanted = false;
    if (this.readWanted && !this.readInFlight) {
      this.readWanted = false;
      this.readInFlight = true;
      this.qp.postRead(this.mr, this.ctlBase + 32, this.remoteCtl as RemoteRegion, 0, 8, WR_READ, true);
    }
  }

  private grantable(): number {
    const g = Math.min((this.C - (this.P - this.remoteConsumer)) / 2 - this.R, this.maxResp - this.R);
    return g > 0 ? g : 0;
  }

  /** The consumer READ completed: take the value if it is plausible (a torn read is not). */
  onReadDone(ok: boolean): void {
    this.readInFlight = false;
    if (!ok || this.state !== 'ready') return;
    const lo = Atomics.load(this.ctl32, 8);
    const hi = Atomics.load(this.ctl32, 9);
    const v = lo + hi * TWO32;
    this.stats.reads++;
    if (v > this.remoteConsumer && v <= this.flushStart && v % ALIGNMENT === 0) this.remoteConsumer = v;
  }

  // ---- recv ring ------------------------------------------------------------------------

  /** Batches that arrived before connect() (a faster peer, a context already being polled). */
  private early: number[] | undefined;

  /** Decodes one batch (one RECV_WRITE_IMM with immediate `imm`) at the parse position. */
  ingest(imm: number): void {
    if (this.state !== 'ready') {
      // Not connected yet: ring sizes and credit are unknown, so keep the batch for connect().
      // Dropped, it would leave the parse position behind and skew every later batch.
      if (this.state === 'init') (this.early ??= []).push(imm);
      return;
    }
    this.stats.batchesReceived++;
    const delta = imm * ALIGNMENT;
    const C = this.recvC;
    const off = this.parseOff;
    const cyc = off & (C - 1);
    const start = this.parsePos;
    if (delta < META || cyc + delta > C) return this.malformed(`a batch of ${delta} bytes (imm ${imm}) at ring offset ${off} does not fit in the ${C}-byte ring cycle`);
    if (start + delta - this.releasePos > C) return this.malformed(`the peer wrote ${start + delta - this.releasePos} bytes past our consumer position into a ${C}-byte ring (it overran unconsumed data)`);
    const r32 = this.r32;
    const w = off >>> 2;
    const consumer = r32[w] + r32[w + 1] * TWO32;
    const grant = r32[w + 2] + r32[w + 3] * TWO32;
    const count = r32[w + 4];
    if (count === WRAP_MESSAGE_COUNT) {
      if (cyc + delta !== C) return this.malformed(`a wrap marker at cycle offset ${cyc} skips ${delta} bytes, which ends at ${cyc + delta}, not at the ${C}-byte cycle boundary`);
      if (!this.applyFlow(consumer, grant)) return;
      this.stats.wrapsReceived++;
      this.advanceParse(delta);
      return;
    }
    if (cyc + delta === C) return this.malformed(`a batch ends exactly at the ring cycle boundary (offset ${off}, ${delta} bytes); batches must leave room for a wrap marker`);
    if (!this.applyFlow(consumer, grant)) return;
    // A metadata-only batch means the peer waits for our credit or consumer position.
    if (count === 0 && !this.dirty) this.host.markDirty(this);
    const end = off + delta;
    let cur = off + META;
    for (let i = 0; i < count; i++) {
      if (cur + HEADER_SIZE > end) return this.malformed(`message count ${count} runs past the data: message ${i} would start at byte ${cur - off} of a ${delta}-byte batch`);
      const h = cur >>> 2;
      const id = r32[h];
      const pig = r32[h + 1];
      const len = r32[h + 2];
      if (len > end - cur - HEADER_SIZE) return this.malformed(`message ${i} claims ${len} payload bytes but only ${end - cur - HEADER_SIZE} remain in the ${delta}-byte batch`);
      if (id >= RESPONSE_FLAG) {
        const ud = this.slab.take(id - RESPONSE_FLAG);
        if (ud === MISSING) return this.malformed(`a response to call id ${id - RESPONSE_FLAG}, which is not pending (unknown or already answered)`);
        this.stats.responses++;
        this.host.deliverResponse(ud, this.recvRing, cur + HEADER_SIZE, len, this);
        if (this.state !== 'ready') return;
      } else {
        const ia = pig * ALIGNMENT;
        if (ia < 2 * ALIGNMENT || ia > this.creditOut) return this.malformed(`request ${id} claims a response allowance of ${ia} bytes but ${this.creditOut} bytes of credit were outstanding`);
        this.creditOut -= ia;
        this.stats.requests++;
        this.host.pushRequest(this, id, cur + HEADER_SIZE, len, ia, this.holds.push(start + (cur - off)));
      }
      cur += (HEADER_SIZE + len + 31) & ~31;
    }
    if (cur !== end) return this.malformed(`message count ${count} leaves ${end - cur} bytes of the ${delta}-byte batch undecoded`);
    this.advanceParse(delta);
  }

  /** Applies a batch's consumer position and credit grant; false if they are impossible. */
  private applyFlow(consumer: number, grant: number): boolean {
    if (consumer > this.flushStart || (consumer >>> 0) & (ALIGNMENT - 1)) {
      this.malformed(`consumer position ${consumer} is beyond the ${this.flushStart} bytes we sent (or unaligned)`);
      return false;
    }
    if (consumer > this.remoteConsumer) this.remoteConsumer = consumer;
    if (grant !== 0) {
      if (this.peerCredit + grant > this.peerCap || (grant >>> 0) & (ALIGNMENT - 1)) {
        this.malformed(`credit grant ${grant} would raise our credit to ${this.peerCredit + grant}, above the peer's ceiling of ${this.peerCap}`);
        return false;
      }
      this.peerCredit += grant;
    }
    return true;
  }

  private advanceParse(delta: number): void {
    this.parsePos += delta;
    this.parseOff = (this.parseOff + delta) & this.rMask;
    const held = this.holds.oldest();
    this.setRelease(held < 0 ? this.parsePos : held);
  }

  /**
   * @internal Context.recv handed out request `seq`. Its bytes stay readable until the next
   * poll: the consumer position moves past them only when that poll starts (refreshRelease).
   */
  taken(seq: number): void {
    this.holds.release(seq);
  }

  /** @internal At the start of a poll: publish the consumer position past taken requests. */
  refreshRelease(): void {
    this.setRelease(this.holds.oldest());
  }

  /** Publishes a new consumer position (for the peer's READ) and notes it for piggybacking. */
  private setRelease(held: number): void {
    const rel = held < 0 ? this.parsePos : held;
    if (rel === this.releasePos) return;
    this.releasePos = rel;
    // High word first: a reader that copies low then high sees a torn value only as too large,
    // which it rejects. Plain stores: only a READ looks at this word, and it checks what it
    // got, so a seq-cst store (an xchg, on every batch) buys nothing.
    const c = this.ctl32;
    c[1] = (rel / TWO32) >>> 0;
    c[0] = rel >>> 0;
    if (!this.dirty && (rel - this.lastNotified) * 4 >= this.recvC) this.host.markDirty(this);
  }

  // ---- failure --------------------------------------------------------------------------

  private malformed(what: string): void {
    this.fail(new WeftError('EPROTO', `${this.name} received a malformed batch: ${what}; the peer runs a different protocol version or is faulty. This endpoint is closed; other endpoints are unaffected. Reconnect with a new endpoint once the peer is fixed.`));
  }

  /** Moves the endpoint to 'failed': pending calls are reported to the poll's onCallFailed. */
  fail(err: WeftError): void {
    if (this.state === 'failed' || this.state === 'closed') return;
    this.state = 'failed';
    this.error = err;
    this.host.endpointFailed(this);
    this.qp.close();
    // Later writes by the peer now fail at the peer instead of landing in our rings.
    this.recvMr.deregister();
    this.ctlMr.deregister();
  }

  /** @internal Hands every pending call's user data to `fn` (after a failure). */
  drainPending(fn: (userData: U) => void): void {
    this.slab.drain(fn);
  }

  /** Closes the QP and releases the memory (and its share of receive credits); pending calls are dropped. */
  close(): void {
    if (this.state === 'closed') return;
    if (this.state !== 'failed') {
      this.host.endpointClosed(this);
      this.qp.close();
      this.recvMr.deregister();
      this.ctlMr.deregister();
    }
    this.mr.deregister();
    this.state = 'closed';
  }

  private unusable(op: string): WeftError {
    if (this.state === 'init') return new WeftError('EINVAL', `${this.name}: ${op} before connect; exchange localInfo() and call connect() first`);
    return new WeftError(this.error?.code ?? 'ECLOSED', `${this.name}: ${op} on a ${this.state} endpoint${this.error ? `: ${this.error.message}` : ''}`, { cause: this.error });
  }

  private badCall(payload: Uint8Array, allowance: number): never {
    if (!(payload instanceof Uint8Array)) throw new WeftError('EINVAL', `${this.name}: call(payload) needs a Uint8Array, got ${describe(payload)}`);
    if ((allowance >>> 0) !== allowance) throw new WeftError('EINVAL', `${this.name}: responseAllowance must be a non-negative integer, got ${allowance}`);
    if (payload.byteLength > this.maxPayload) throw new WeftError('EINVAL', `${this.name}: a ${payload.byteLength}-byte payload exceeds the ${this.maxPayload}-byte limit of a ${this.C}-byte ring (a quarter ring minus metadata); use larger rings or rdmaWrite for bulk data`);
    throw new WeftError('EINVAL', `${this.name}: responseAllowance ${allowance} exceeds ${this.maxResponseAllowance}, the most the peer's response reservation can ever grant; raise the peer's maxRespReservation or ring sizes`);
  }

  /** Debug mode: checks in_flight + 2R <= C and the signs of the credit counters. */
  private checkInvariant(where: string): void {
    this.stats.invariantChecks++;
    const inflight = this.P - this.remoteConsumer;
    if (inflight + 2 * this.R > this.C || this.R < 0 || this.peerCredit < 0 || this.creditOut < 0 || this.creditOut > this.R) {
      const err = new WeftError('EPROTO', `${this.name}: credit invariant violated after ${where}: in_flight ${inflight} + 2R (R=${this.R}) > C ${this.C}, or negative credit (peer credit ${this.peerCredit}, outstanding grant ${this.creditOut}); this is a weft bug, please report it`);
      this.fail(err);
      throw err;
    }
  }

  /** Flow-control state, for tests and debugging. */
  debugState(): Record<string, number> {
    return { P: this.P, flushStart: this.flushStart, remoteConsumer: this.remoteConsumer, R: this.R, C: this.C, peerCredit: this.peerCredit, peerCap: this.peerCap, creditOut: this.creditOut, parsePos: this.parsePos, releasePos: this.releasePos, maxResp: this.maxResp, recvC: this.recvC };
  }
}
