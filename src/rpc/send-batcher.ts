/**
 * The send side of a copyrpc endpoint (deferred send): `call` and `reply` only write header
 * + payload into the send ring; the open batch starts with a 32-byte flow-metadata
 * placeholder. `flushBatch` (from RpcEngine.poll/flush) fills the metadata (our consumer
 * position, a credit grant, the message count) and posts ONE WRITE_IMM for the whole batch,
 * imm = bytes / 32, to the same virtual position in the peer's recv ring. A batch never
 * reaches the end of a ring cycle (strict `<`): when the next message would, the batch is
 * sent and a wrap marker (count 0xFFFFFFFF) tells the peer to skip to the next cycle.
 *
 * Positions are virtual byte counts held in doubles (exact below 2^53: about 100 days at
 * 1 GB/s per direction); physical offsets are tracked incrementally, never by `%` on the
 * hot path: `%` on a double is a C call in V8. Where low bits are needed, `x >>> 0` is x mod
 * 2^32 for these non-negative integers, and every ring size and 32 divide 2^32.
 */
import { copyToShared } from '../host/copy.js';
import type { MemoryRegion, QueuePair, RemoteRegion } from '../nic/types.js';
import { ALIGNMENT, FLOW_METADATA_SIZE as META, HEADER_SIZE, SIGNAL_INTERVAL, WRAP_MESSAGE_COUNT } from './constants.js';
import { FlowControl } from './flow-control.js';
import type { EndpointStats } from './endpoint.js';

const TWO32 = 0x100000000;

/** Work-request id of batch WRITE_IMMs on the endpoint's QP. */
export const WR_BATCH = 0;

export abstract class SendBatcher<U> extends FlowControl {
  /**
   * The send ring; on shm, once connected, the peer's recv ring itself (see `inPlace`). The
   * views and mask change once, in attach().
   */
  private s8: Uint8Array;
  private s32: Uint32Array;
  /** The send ring as int32 words, the destination of word-wise payload copies. */
  private si32: Int32Array;
  private sMask: number;
  /** Registered memory holding the send ring at offset 0. */
  protected readonly mr: MemoryRegion;
  /**
   * shm: calls and replies are written straight into the peer's recv ring (its mapping is
   * ours too) and each batch is posted as a WRITE_IMM in place: no copy at flush, and the
   * stores' cache-line transfers overlap the rest of the work instead of stalling the post.
   * Only space the peer has released is written, as a copy at flush would.
   */
  private inPlace = false;
  private remoteRecv: RemoteRegion | undefined;
  private remoteRecvSize = 0;
  /** Producer: virtual position of the next byte written to the send ring. */
  protected P = 0;
  /** P's offset in the send ring. */
  private sOff = 0;
  /** Everything before this has been posted. */
  protected flushStart = 0;
  /** Virtual position of the open batch's metadata, -1 when no batch is open. */
  private metaPos = -1;
  private metaOff = 0;
  private batchCount = 0;
  /** Where the write in progress will end (grants computed mid-write must leave it room). */
  private writeEnd = 0;
  private unsignaled = 0;

  // What the endpoint provides.
  abstract readonly qp: QueuePair;
  abstract dirty: boolean;
  /** Queue the endpoint for the engine's next flush. */
  protected abstract markDirty(): void;
  abstract readonly stats: EndpointStats;
  abstract readonly debug: boolean;
  abstract checkInvariant(where: string): void;

  constructor(mr: MemoryRegion, size: number) {
    super();
    this.mr = mr;
    const bytes = mr.bytes;
    this.s8 = bytes.subarray(0, size);
    this.s32 = new Uint32Array(bytes.buffer, bytes.byteOffset, size >>> 2);
    this.si32 = new Int32Array(bytes.buffer, bytes.byteOffset, size >>> 2);
    this.sMask = size - 1;
  }

  /** At connect: where batches go; on shm (`postWriteImmInPlace`) written there in place. */
  protected attachSend(remoteRecv: RemoteRegion, remoteRecvSize: number): void {
    this.remoteRecv = remoteRecv;
    this.remoteRecvSize = remoteRecvSize;
    const direct = remoteRecv.direct;
    if (direct && this.qp.postWriteImmInPlace) {
      // Offsets in the send ring become offsets in the peer's ring (sOff = P mod its size).
      this.inPlace = true;
      this.s8 = direct;
      this.s32 = new Uint32Array(direct.buffer, direct.byteOffset, direct.length >>> 2);
      this.si32 = new Int32Array(direct.buffer, direct.byteOffset, direct.length >>> 2);
      this.sMask = remoteRecvSize - 1;
    }
  }

  /** A batch is open (messages written and not posted). */
  protected get batchOpen(): boolean {
    return this.metaPos >= 0;
  }

  /** Bytes the producer advances to write a message of padded size m (metadata, wrap included). */
  protected delta(m: number): number {
    const C = this.C;
    const cMask = this.cMask;
    const c = this.sOff & cMask;
    if (this.metaPos < 0) return c + META + m >= C ? C - c + META + m : META + m;
    if ((this.metaOff & cMask) + (this.P - this.metaPos) + m >= C) return C - c + META + m;
    return m;
  }

  /**
   * Writes one message: its 12-byte header (words w0, w1 and the length) and payload, padded
   * to m bytes. `end` is where the producer lands (P + delta(m)), for grants computed while
   * the write wraps.
   */
  protected write(w0: number, w1: number, payload: Uint8Array, m: number, end: number): void {
    const at = this.reserveUpTo(m, end);
    const w = at >>> 2;
    const s32 = this.s32;
    const len = payload.length;
    s32[w] = w0;
    s32[w + 1] = w1;
    s32[w + 2] = len;
    this.copyIn(payload, at + HEADER_SIZE, len, at + m);
  }

  /** Sends a metadata-only batch (consumer position and credit, no message). */
  protected sendEmpty(): void {
    this.reserveUpTo(0, this.P + this.delta(0));
    this.batchCount = 0;
    this.flushBatch();
  }

  /**
   * reserve(m) for a write that lands the producer at `end`: a flush or wrap marker emitted on
   * the way computes its grant with the whole write counted (writeEnd), so in_flight + 2R <= C
   * holds once the write is out, a metadata-only batch's own 32 bytes included.
   */
  private reserveUpTo(m: number, end: number): number {
    this.writeEnd = end;
    const at = this.reserve(m);
    this.writeEnd = 0;
    return at;
  }

  /** Makes room for a message of padded size m in the open batch; returns its ring offset. */
  private reserve(m: number): number {
    const C = this.C;
    const cMask = this.cMask;
    if (this.metaPos < 0) {
      if ((this.sOff & cMask) + META + m >= C) this.wrap();
      this.openBatch();
    } else if ((this.metaOff & cMask) + (this.P - this.metaPos) + m >= C) {
      this.flushBatch();
      this.wrap();
      this.openBatch();
    }
    const at = this.sOff;
    this.P += m;
    this.sOff += m;
    this.batchCount++;
    if (!this.dirty) this.markDirty();
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
  protected flushBatch(): void {
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
    const grant = this.grant(Math.max(this.P, this.writeEnd));
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
    if (this.debug) this.checkInvariant('metadata');
  }

  /**
   * Copies the payload (copyToShared: `dst` is 4-aligned, a 32-aligned message plus the
   * 12-byte header) and zeroes the padding up to `end`.
   */
  private copyIn(src: Uint8Array, dst: number, len: number, end: number): void {
    const s8 = this.s8;
    let p = dst + len;
    copyToShared(s8, this.si32, dst, src, len);
    while (p & 3 && p < end) s8[p++] = 0;
    const s32 = this.s32;
    for (let w = p >>> 2, e = end >>> 2; w < e; w++) s32[w] = 0;
  }
}
