/**
 * A copyrpc endpoint: one queue pair to one peer endpoint, a send ring and a recv ring. This
 * file holds its life cycle (create, connect, fail, close) and its calls; the work is split
 * by job, one file each: flow control keeps in_flight + 2R <= C (flow-control.ts), the send
 * side batches messages into WRITE_IMMs (send-batcher.ts), the receive side decodes batches
 * (recv-parser.ts), and one-sided operations go beside the protocol (one-sided.ts). The
 * parts are one object (Endpoint extends RecvParser extends SendBatcher extends
 * FlowControl): separate objects cost the per-call path 15% more CPU. Wire format:
 * docs/wire-format.md.
 */
import { WeftError } from '../errors.js';
import { describeValue as describe } from '../util/describe.js';
import { Opcode, type MemoryRegion, type QueuePair, type RemoteRegion } from '../nic/types.js';
import {
  ALIGNMENT,
  FLOW_METADATA_SIZE as META,
  HEADER_SIZE,
  INSUFFICIENT_CREDIT,
  RESPONSE_FLAG,
  RING_FULL,
  effectiveRing,
  responsePayloadLimit,
  validRingSize,
  DEFAULT_RING_SIZE,
  type CallResult,
} from './constants.js';
import { postOneSided } from './one-sided.js';
import { RecvParser } from './recv-parser.js';
import { decodeEndpointInfo, encodeEndpointInfo } from './wire.js';
import type { RecvHandle } from './recv-handle.js';
import type { RequestOptions } from './driver.js';
import type { Device } from '../nic/types.js';

export { WR_BATCH } from './send-batcher.js';
export { WR_RAW } from './one-sided.js';
/** Work-request id of the consumer-position READ. */
export const WR_READ = 1;

const TWO32 = 0x100000000;
/** Control area after the rings: consumer position (u64) at 0, READ landing buffer at 32. */
const CTL_BYTES = 64;

/** Options of `RpcEngine.createEndpoint`. */
export interface EndpointOptions {
  /** Send ring bytes (power of two, default 1 MiB). */
  sendRingSize?: number;
  /** Recv ring bytes (power of two, default 1 MiB). */
  recvRingSize?: number;
  /** Ceiling of the response reservation R (default: ring / 4, also the most it can be). */
  maxRespReservation?: number;
  /** How the peer is called in errors, e.g. "rank 3". */
  peerLabel?: string;
  /** This endpoint's share of the engine's receive credits (default 64). */
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

/** What an endpoint needs from its engine. */
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
  /** Endpoint.request, through the engine's driver. */
  request(ep: Endpoint<U>, bytes: Uint8Array, options?: RequestOptions): Promise<Uint8Array>;
}

export class Endpoint<U = unknown> extends RecvParser<U> {
  readonly id: number;
  readonly peerLabel: string;
  readonly qp: QueuePair;
  readonly sendRingSize: number;
  readonly recvRingSize: number;
  /** This endpoint's receive-credit share (the SRQ emulation, see RpcEngine). */
  readonly recvCredits: number;
  /** Credits consumed since the last repost. */
  consumedCredits = 0;
  /** rdmaRead / rdmaWrite posted on this endpoint and not completed (rpc.rawPending counts them). */
  rawInFlight = 0;
  state: 'init' | 'ready' | 'failed' | 'closed' = 'init';
  /** Why the endpoint failed (state 'failed'). */
  error: WeftError | undefined;
  readonly stats: EndpointStats = {
    calls: 0, responses: 0, requests: 0, replies: 0, batchesSent: 0, batchesReceived: 0, emptyBatchesSent: 0,
    wrapsSent: 0, wrapsReceived: 0, ringFull: 0, insufficientCredit: 0, reads: 0, invariantChecks: 0,
  };
  /** @internal set while queued on the engine's dirty list */
  dirty = false;
  /** @internal set while queued on the engine's taken list */
  tookSincePoll = false;
  readonly debug: boolean;

  private readonly host: RpcHost<U>;
  private readonly recvMr: MemoryRegion;
  private readonly ctlMr: MemoryRegion;
  private readonly ctl32: Uint32Array;
  private readonly ctlBase: number;
  private readonly cfgMaxResp: number;
  private remoteCtl: RemoteRegion | undefined;
  private maxMessage = 0;
  /** Batches that arrived before connect() (a faster peer, an engine already being polled). */
  private early: number[] | undefined;

  constructor(host: RpcHost<U>, id: number, options: EndpointOptions = {}) {
    const peerLabel = options.peerLabel ?? `endpoint ${id}'s peer`;
    const where = `${host.label}: createEndpoint toward ${peerLabel}`;
    const send = options.sendRingSize ?? DEFAULT_RING_SIZE;
    const recv = options.recvRingSize ?? DEFAULT_RING_SIZE;
    if (!validRingSize(send) || !validRingSize(recv)) throw new WeftError('EINVAL', `${where}: ring sizes must be powers of two in [1 KiB, 1 GiB], got send ${send}, recv ${recv}`);
    const maxResp = options.maxRespReservation ?? send / 4;
    if (!Number.isInteger(maxResp) || maxResp < 64 || maxResp % ALIGNMENT !== 0) throw new WeftError('EINVAL', `${where}: maxRespReservation must be a multiple of 32 of at least 64, got ${maxResp}`);
    const credits = options.recvCredits ?? 64;
    if (!Number.isInteger(credits) || credits < 4) throw new WeftError('EINVAL', `${where}: recvCredits must be an integer >= 4, got ${credits}`);
    const dev = host.device;
    // One allocation (one shm segment) per endpoint: [send ring][recv ring][control].
    const mr = dev.allocate(send + recv + CTL_BYTES);
    const bytes = mr.bytes;
    if (bytes.byteOffset % 8 !== 0) throw new WeftError('EINVAL', `${where}: the device returned memory that is not 8-byte aligned`);
    const ctlBase = send + recv;
    super(mr, send, bytes.subarray(send, send + recv), new Uint32Array(bytes.buffer, bytes.byteOffset + ctlBase, CTL_BYTES >>> 2));
    this.host = host;
    this.id = id;
    this.debug = host.debug;
    this.peerLabel = peerLabel;
    this.sendRingSize = send;
    this.recvRingSize = recv;
    this.cfgMaxResp = maxResp;
    this.recvCredits = credits;
    this.recvMr = dev.register(bytes.subarray(send, send + recv));
    this.ctlBase = ctlBase;
    this.ctlMr = dev.register(bytes.subarray(ctlBase, ctlBase + CTL_BYTES));
    this.ctl32 = new Uint32Array(bytes.buffer, bytes.byteOffset + ctlBase, CTL_BYTES >>> 2);
    // The engine accounts receive credits itself (its shared receive queue): no autoRepost.
    this.qp = dev.createQueuePair({ peerLabel, recvCredits: credits, autoRepost: false });
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
    this.remoteCtl = ctl;
    this.attachSend(recv, info.recvRingSize);
    const C = effectiveRing(this.sendRingSize, info.recvRingSize);
    this.recvC = effectiveRing(info.sendRingSize, this.recvRingSize);
    this.connectFlow(C, this.cfgMaxResp, info.maxRespReservation, this.recvC);
    // With R at most C/4, a message of C/4 (metadata and wrap included) always fits eventually.
    this.maxMessage = C / 4 - META;
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
   * if (id < 0) rpc.poll(onResponse); // RING_FULL or INSUFFICIENT_CREDIT: retry later
   */
  call(payload: Uint8Array, userData: U, responseAllowance: number): CallResult {
    if (this.state !== 'ready') throw this.unusable('call');
    // length, not byteLength: V8 inlines the first and calls a builtin for the second.
    if (!(payload instanceof Uint8Array) || (responseAllowance >>> 0) !== responseAllowance) this.badCall(payload, responseAllowance);
    const len = payload.length;
    // The raw sizes first: the 32-bit rounding below wraps for sizes near 2^31, and a wrapped
    // (negative) size would pass the checks after it.
    if (responseAllowance > this.peerCap || len > this.maxMessage) this.badCall(payload, responseAllowance);
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
    if (!this.fits(end)) {
      this.stats.ringFull++;
      this.readWanted = true;
      this.host.markDirty(this);
      return RING_FULL;
    }
    const id = this.slab.alloc(userData, ia);
    this.peerCredit -= ia;
    this.write(id, ia >>> 5, payload, m, end);
    this.stats.calls++;
    if (this.debug) this.checkInvariant('call');
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
    return this.host.request(this, bytes, options);
  }

  /** @internal RecvHandle.reply: no ring-full check, the caller's credit reserved the space. */
  reply(h: RecvHandle<U>, bytes: Uint8Array): void {
    if (!(bytes instanceof Uint8Array)) throw new WeftError('EINVAL', `${this.name}: reply(bytes) to call ${h.callId} needs a Uint8Array, got ${describe(bytes)}`);
    const len = bytes.length;
    const m = (HEADER_SIZE + len + 31) & ~31;
    // len first: m wraps negative for lengths near 2^31.
    if (len > h.internalAllowance || m + META > h.internalAllowance) {
      throw new WeftError('EINVAL', `${this.name}: reply of ${len} bytes to call ${h.callId} exceeds the caller's response allowance of ${responsePayloadLimit(h.internalAllowance)} bytes; send less, or have the caller pass a larger responseAllowance`);
    }
    const callId = h.callId;
    const ia = h.internalAllowance;
    h.live = false;
    this.host.releaseHandle(h);
    if (this.state !== 'ready') return;
    // Give the reservation back first: grants computed while this write wraps then see it.
    this.R -= ia;
    this.write((callId | RESPONSE_FLAG) >>> 0, ia >>> 5, bytes, m, this.P + this.delta(m));
    this.stats.replies++;
    if (this.debug) this.checkInvariant('reply');
  }

  /**
   * Posts a one-sided RDMA WRITE of `len` bytes from `local` to the peer's `remote`
   * (imported with `importRegion`); counted in `rpc.rawPending` until it completes.
   *
   * @example
   * ep.rdmaWrite(mr, 0, peerRegion, 0, 4096);
   */
  rdmaWrite(local: MemoryRegion, localOffset: number, remote: RemoteRegion, remoteOffset: number, len: number): void {
    if (this.state !== 'ready') throw this.unusable('rdmaWrite');
    postOneSided(this.qp, Opcode.WRITE, local, localOffset, remote, remoteOffset, len);
    this.rawInFlight++;
    this.host.rawPosted();
  }

  /**
   * Posts a one-sided RDMA READ of `len` bytes of the peer's `remote` into `local`.
   *
   * @example
   * ep.rdmaRead(mr, 0, peerRegion, 0, 4096);
   * while (rpc.rawPending > 0) rpc.poll();
   */
  rdmaRead(local: MemoryRegion, localOffset: number, remote: RemoteRegion, remoteOffset: number, len: number): void {
    if (this.state !== 'ready') throw this.unusable('rdmaRead');
    postOneSided(this.qp, Opcode.READ, local, localOffset, remote, remoteOffset, len);
    this.rawInFlight++;
    this.host.rawPosted();
  }

  /** Decodes a peer's memory-region descriptor for rdmaRead/rdmaWrite. */
  importRegion(descriptor: Uint8Array): RemoteRegion {
    return this.qp.importRegion(descriptor);
  }


  // ---- the engine's steps ---------------------------------------------------------------

  /**
   * RpcEngine.flush step for this endpoint: sends the open batch; when none is open, sends a
   * metadata-only batch if the peer waits for our consumer position or our credit (with
   * nothing else to carry them, an idle direction would never return them); posts the
   * consumer READ when a call found the ring full.
   */
  flushWork(): void {
    if (this.state !== 'ready') {
      this.dirty = false;
      return;
    }
    if (this.batchOpen) {
      this.flushBatch();
    } else {
      const unreported = this.unreported;
      const want = (unreported > 0 && (this.reportWanted || unreported * 4 >= this.recvC)) || this.grantWorthSending(this.P);
      if (want) {
        if (this.fits(this.P + this.delta(0))) {
          this.sendEmpty();
          this.stats.emptyBatchesSent++;
        } else {
          // No room even for 32 bytes as far as we know: learn the peer's consumer position
          // (the READ below), so the next flush can send it.
          this.readWanted = true;
        }
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

  /** The consumer READ completed: take the value if it is plausible (a torn read is not). */
  onReadDone(ok: boolean): void {
    if (!ok || this.state !== 'ready') {
      this.readInFlight = false;
      return;
    }
    const v = Atomics.load(this.ctl32, 8) + Atomics.load(this.ctl32, 9) * TWO32;
    this.stats.reads++;
    // Room learnt this way may let the next flush send what did not fit (flushWork decides).
    if (this.consumerRead(v, this.flushStart) && !this.dirty) this.markDirty();
  }

  /** Decodes one batch (one RECV_WRITE_IMM with immediate `imm`) at the parse position. */
  ingest(imm: number): void {
    if (this.state === 'ready') return this.ingestBatch(imm);
    // Not connected yet: ring sizes and credit are unknown, so keep the batch for connect().
    // Dropped, it would leave the parse position behind and skew every later batch.
    if (this.state === 'init') (this.early ??= []).push(imm);
  }

  /** @internal RpcEngine.recv handed out request `seq` (its bytes stay until the next poll). */
  taken(seq: number): void {
    this.releaseRequest(seq);
  }

  /** @internal At the start of a poll: publish the consumer position past taken requests. */
  refreshRelease(): void {
    this.releaseTaken();
  }

  // ---- what the send and receive sides ask of the endpoint -------------------------------

  /** @internal Queue this endpoint for the engine's next flush. */
  protected markDirty(): void {
    this.host.markDirty(this);
  }

  /** @internal A response to one of our calls (payload valid during the callback). */
  protected deliverResponse(userData: U, offset: number, length: number): void {
    this.host.deliverResponse(userData, this.recvRing, offset, length, this);
  }

  /** @internal A request for the engine's recv() queue. */
  protected pushRequest(callId: number, offset: number, length: number, internalAllowance: number, holdSeq: number): void {
    this.host.pushRequest(this, callId, offset, length, internalAllowance, holdSeq);
  }

  // ---- failure --------------------------------------------------------------------------

  /** @internal The peer sent something impossible (the receive side found it). */
  malformed(what: string): void {
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
  checkInvariant(where: string): void {
    this.stats.invariantChecks++;
    const bad = this.violation(this.P);
    if (bad === undefined) return;
    const err = new WeftError('EPROTO', `${this.name}: credit invariant violated after ${where}: ${bad}; this is a weft bug, please report it`);
    this.fail(err);
    throw err;
  }

  /** Flow-control state, for tests and debugging. */
  debugState(): Record<string, number> {
    return { P: this.P, flushStart: this.flushStart, remoteConsumer: this.remoteConsumer, R: this.R, C: this.C, peerCredit: this.peerCredit, peerCap: this.peerCap, creditOut: this.creditOut, ...this.parseState(), maxResp: this.maxResp, recvC: this.recvC };
  }
}
