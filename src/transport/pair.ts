/**
 * A Pair is this rank's end of the connection to one peer (Gloo's transport::Pair): one QP,
 * the ring this rank writes in the peer's inbox, and the ring the peer writes in ours.
 *
 * Messages are split into chunks of at most `chunkBytes`; each chunk is a 64-byte header and
 * its payload in the next ring slot, announced by a WRITE_IMM (KIND_DATA). The receiver hands
 * each chunk to the matching receive (copy or reduce straight out of the ring) and returns
 * slots in its own chunks' headers (the count of chunks consumed rides on every chunk it
 * sends), or, after half a ring consumed with nothing sent back, with a KIND_CREDIT
 * immediate. Chunks of one message are contiguous on a pair because sends leave in FIFO order.
 *
 * On shm the sender writes header and payload straight into the peer's ring through the
 * mapped region (one copy) and the WRITE_IMM is a 0-byte doorbell; on ofi both go through a
 * local staging ring that mirrors the peer's, and one WRITE_IMM carries them.
 */
import { WeftError } from '../errors.js';
import { copyInto } from '../host/copy.js';
import { reduceInto } from '../reduce/index.js';
import type { MemoryRegion, QueuePair, RemoteRegion } from '../nic/types.js';
import * as L from './layout.js';
import { RecvOp, type SendOp } from './ops.js';
import { describeSignature } from './signature.js';
import type { BytePool } from './byte-pool.js';

/** What a pair needs from its device. */
export interface PairHost {
  readonly rank: number;
  readonly label: string;
  readonly geometry: L.RingGeometry;
  /** This rank's inbox (all peers' rings) and staging (ofi) or doorbell (shm) memory. */
  readonly inbox: MemoryRegion;
  readonly staging: MemoryRegion;
  /** ofi: `staging` mirrors every peer's ring; shm: it is one 64-byte doorbell source. */
  readonly stagedRings: boolean;
  /** A receive-side mismatch or protocol error: abort the whole job. */
  abort(err: WeftError): void;
  /** A peer told us the job is aborted. */
  peerAborted(peer: number, reason: string): void;
  /** Buffers for messages that arrive before their receive. */
  readonly pool: BytePool;
  /** A message of call `call` of `slot` arriving now belongs to a call this rank has ended. */
  isStale(slot: number, call: number): boolean;
  /** The registered region `view` lies in, if it does (arrays from `ctx.alloc`). */
  regionOf?(view: Uint8Array): MemoryRegion | undefined;
}

/**
 * Staged rings (ofi) write sends of at least this many bytes straight from registered memory:
 * the payload by a plain WRITE, then the header by the WRITE_IMM, whose local completion ends
 * the send. Smaller ones are copied. Until 2026-12-06 a zero-copy send waited for the peer's
 * credit for its last chunk, which these measurements include. Measured
 * across 2 emulated hosts (a core each), allreduce of one array between two ranks, zero-copy
 * against copied: with 2 such pairs at once, 64 KiB 322-415 vs 183-240 us, 128 KiB 573-735 vs
 * 241-430, 256 KiB 700-850 vs 600-680, 512 KiB 964-981 vs 1298-1513; with one pair, 128 KiB
 * 184-192 vs 124-140, 256 KiB 208-249 vs 165-190. (The threshold was 64 KiB before.)
 */
const ZERO_COPY_MIN_BYTES = 512 * 1024;

/** Work-request id of the one write per zero-copy send that asks for a local completion. */
export const ZERO_COPY_WR = 1;

/** A message that arrived before its receive was posted. */
interface Unexpected {
  slot: number;
  total: number;
  sig: number;
  call: number;
  roffset: number;
  bound: boolean;
  data: Uint8Array;
  got: number;
}

/** The message being received: the chunks that follow go to `op` or `held`. */
interface Current {
  op: RecvOp | undefined;
  held: Unexpected | undefined;
  total: number;
  roffset: number;
}


export class Pair {
  error: WeftError | undefined;
  /**
   * ABORT bookkeeping (at most one ABORT goes each way on a pair: the reserved slot holds one
   * text). A rank answers the first ABORT a peer sends it with one of its own unless it has sent
   * one there already, so a rank that told its peers knows when each has heard (Device.linger).
   */
  private abortSent = false;
  private abortSeen = false;
  private remote!: RemoteRegion;
  /** Our ring in the peer's inbox: offset in the peer's region, and its bytes when mapped. */
  private remoteBase = 0;
  private direct: Uint8Array | undefined;
  private directWords: Int32Array | undefined;
  /** The peer's ring in our inbox. */
  private readonly ring: Uint8Array;
  private readonly ringWords: Int32Array;
  private readonly stagingBase: number;
  private readonly stagingWords: Int32Array;
  // Send side.
  private readonly sq: SendOp[] = [];
  private sqHead = 0;
  /**
   * Zero-copy sends fully posted, in post order, waiting for the local completion of their
   * last chunk's WRITE_IMM (the one write of this pair's QP that asks for a completion).
   */
  private readonly unwritten: SendOp[] = [];
  private sent = 0;
  private acked = 0;
  // Receive side.
  private received = 0;
  private consumed = 0;
  private returned = 0;
  private readonly posted = new Map<number, RecvOp[]>();
  private readonly unexpected = new Map<number, Unexpected[]>();
  private current: Current | undefined;

  constructor(
    private readonly host: PairHost,
    readonly peer: number,
    readonly qp: QueuePair,
  ) {
    const g = host.geometry;
    const base = peer * g.ringBytes;
    const bytes = host.inbox.bytes;
    this.ring = bytes.subarray(base, base + g.ringBytes);
    this.ringWords = new Int32Array(bytes.buffer, bytes.byteOffset + base, g.ringBytes >> 2);
    const s = host.staging.bytes;
    this.stagingBase = host.stagedRings ? base : 0;
    this.stagingWords = new Int32Array(s.buffer, s.byteOffset, s.byteLength >> 2);
  }

  /** Connects the ring to the peer's inbox (its descriptor, from the rendezvous). */
  attach(inboxDescriptor: Uint8Array): void {
    const g = this.host.geometry;
    this.remote = this.qp.importRegion(inboxDescriptor);
    this.remoteBase = this.host.rank * g.ringBytes;
    if (this.remote.byteLength < this.remoteBase + g.ringBytes) {
      throw new WeftError('EPROTO', `${this.host.label}: rank ${this.peer}'s inbox is ${this.remote.byteLength} bytes, too small for a ring per rank (${g.ringBytes} bytes each); start every rank with the same transport options`);
    }
    const d = this.remote.direct;
    if (d) {
      this.direct = d.subarray(this.remoteBase, this.remoteBase + g.ringBytes);
      this.directWords = new Int32Array(d.buffer, d.byteOffset + this.remoteBase, g.ringBytes >> 2);
    }
  }

  /** The peer's whole inbox, when the provider maps it (shm): its board is read through this. */
  get peerInbox(): Uint8Array | undefined {
    return this.remote?.direct;
  }

  // ---------------------------------------------------------------- sending

  send(op: SendOp): void {
    if (this.error) return op.fail(this.error);
    if (op.allowZeroCopy && !this.direct && op.src.byteLength >= ZERO_COPY_MIN_BYTES && this.host.regionOf) {
      const mr = this.host.regionOf(op.src);
      if (mr) {
        op.zcRegion = mr;
        op.zcOffset = op.src.byteOffset - mr.bytes.byteOffset;
      }
    }
    this.sq.push(op);
    this.pump();
  }

  /** Writes queued chunks while the peer's ring has free slots. */
  pump(): void {
    const g = this.host.geometry;
    while (this.sqHead < this.sq.length && this.sent - this.acked < g.slots && !this.error) {
      const op = this.sq[this.sqHead];
      if (op.settled) {
        this.sqHead++;
        continue;
      }
      const len = Math.min(g.chunkBytes, op.src.byteLength - op.pos);
      this.writeChunk(op, len);
      op.pos += len;
      if (op.pos >= op.src.byteLength) {
        if (op.zcRegion) this.unwritten.push(op);
        else op.done = true;
        this.sqHead++;
      }
    }
    if (this.sqHead === this.sq.length && this.sqHead > 0) {
      this.sq.length = 0;
      this.sqHead = 0;
    } else if (this.sqHead > 64) {
      this.sq.splice(0, this.sqHead);
      this.sqHead = 0;
    }
  }

  private writeChunk(op: SendOp, len: number): void {
    const g = this.host.geometry;
    const idx = this.sent % g.slots;
    const off = idx * g.stride;
    const seq = this.sent;
    this.sent++;
    const words = this.directWords ?? this.stagingWords;
    const w = ((this.directWords ? 0 : this.stagingBase) + off) >> 2;
    words[w + L.H.MAGIC] = L.CHUNK_MAGIC;
    words[w + L.H.SEQ] = seq;
    words[w + L.H.SLOT_LO] = op.slot % 2 ** 32;
    words[w + L.H.SLOT_HI] = Math.floor(op.slot / 2 ** 32);
    words[w + L.H.TOTAL] = op.src.byteLength;
    words[w + L.H.OFFSET] = op.pos;
    words[w + L.H.LENGTH] = len;
    words[w + L.H.ROFFSET] = op.roffset;
    words[w + L.H.SIG] = op.sig;
    words[w + L.H.CALL] = op.call;
    const last = op.pos + len >= op.src.byteLength;
    // The credits this rank owes the peer ride along: the peer's ring slots are freed without a
    // KIND_CREDIT of their own (a request-reply exchange then sends no credits at all).
    words[w + L.H.ACK] = this.consumed | 0;
    this.returned = this.consumed;
    words[w + L.H.FLAGS] = op.flags | L.FLAG_CREDIT;
    if (this.direct) {
      copyInto(this.direct, off + L.HEADER_BYTES, op.src, op.pos, len);
      this.qp.postWriteImm(this.host.staging, 0, this.remote, this.remoteBase + off, 0, L.KIND_DATA << L.KIND_SHIFT, 0, false);
    } else if (op.zcRegion) {
      // Payload first, then the header with the doorbell: the NIC layer keeps writes in order.
      const s = this.stagingBase + off;
      this.qp.postWrite(op.zcRegion, op.zcOffset + op.pos, this.remote, this.remoteBase + off + L.HEADER_BYTES, len, 0, false);
      // The last chunk's header asks for a local completion: the QP reports completions in post
      // order, so once it is in, every write of the message has left the caller's memory.
      this.qp.postWriteImm(this.host.staging, s, this.remote, this.remoteBase + off, L.HEADER_BYTES, L.KIND_DATA << L.KIND_SHIFT, last ? ZERO_COPY_WR : 0, last);
    } else {
      const s = this.stagingBase + off;
      copyInto(this.host.staging.bytes, s + L.HEADER_BYTES, op.src, op.pos, len);
      this.qp.postWriteImm(this.host.staging, s, this.remote, this.remoteBase + off, L.HEADER_BYTES + len, L.KIND_DATA << L.KIND_SHIFT, 0, false);
    }
  }

  /**
   * Tells the peer the job is aborted (uses the reserved slot: always room for it). Once per
   * pair; also after the pair failed with the job, as long as its QP still works.
   */
  sendAbort(reason: string): void {
    if (this.abortSent || !this.remote || this.qp.state !== 'ready') return;
    this.abortSent = true;
    const g = this.host.geometry;
    const text = new TextEncoder().encode(reason).subarray(0, g.chunkBytes);
    const off = g.slots * g.stride;
    try {
      if (this.direct) {
        this.directWords![(off >> 2) + L.H.LENGTH] = text.byteLength;
        this.direct.set(text, off + L.HEADER_BYTES);
        this.qp.postWriteImm(this.host.staging, 0, this.remote, this.remoteBase + off, 0, (L.KIND_ABORT << L.KIND_SHIFT) >>> 0, 0, false);
      } else {
        const s = this.stagingBase + off;
        this.stagingWords[(s >> 2) + L.H.LENGTH] = text.byteLength;
        this.host.staging.bytes.set(text, s + L.HEADER_BYTES);
        this.qp.postWriteImm(this.host.staging, s, this.remote, this.remoteBase + off, L.HEADER_BYTES + text.byteLength, (L.KIND_ABORT << L.KIND_SHIFT) >>> 0, 0, false);
      }
    } catch {
      // The QP is already gone: the peer learns from its own failure.
    }
  }

  /** The peer has heard of the abort: it answered ours (or sent its own), or it is gone. */
  get abortHeard(): boolean {
    return !this.abortSent || this.abortSeen || this.qp.state !== 'ready';
  }

  // -------------------------------------------------------------- receiving

  /** Posts a receive; it may complete at once from an unexpected message. */
  post(op: RecvOp): void {
    if (this.error) return op.fail(this.error);
    const held = this.unexpected.get(op.slot);
    if (held?.length) {
      for (let i = 0; i < held.length; i++) {
        const u = held[i];
        if (op.persistent !== u.bound) continue;
        // A mismatch aborts the job, which fails the posted receives: this one is not posted
        // yet, so it fails here (left alone, it waited for its timeout and then reported that
        // instead of the mismatch the job was aborted for).
        if (!this.matchable(op, u.total, u.sig, u.call)) return op.fail(this.error ?? new WeftError('EINVAL', `${this.host.label}: a message from rank ${this.peer} does not match ${op.describe()}`));
        held.splice(i, 1);
        op.matched = !op.persistent;
        op.peer = this.peer;
        this.deliver(op, u.data, 0, 0, u.got, u.total, u.roffset);
        this.host.pool.give(u.data);
        if (u.got === u.total) this.finish(op);
        else if (this.current?.held === u) this.current = { op, held: undefined, total: u.total, roffset: u.roffset };
        if (!op.persistent) return;
        i--;
      }
    }
    let q = this.posted.get(op.slot);
    if (!q) this.posted.set(op.slot, (q = []));
    q.push(op);
  }

  /** Stops matching `op` (cancelled receive); its bytes, if any arrived, stay delivered. */
  unpost(op: RecvOp): void {
    const q = this.posted.get(op.slot);
    const i = q ? q.indexOf(op) : -1;
    if (i >= 0) q!.splice(i, 1);
  }

  /** A WRITE_IMM from the peer landed in our inbox. */
  onImm(imm: number): void {
    const kind = imm >>> L.KIND_SHIFT;
    // A failed pair takes no more data (its half-received message is gone); an ABORT that
    // explains the failure is still read.
    if (kind === L.KIND_DATA) {
      if (!this.error) this.onChunk();
    }
    else if (kind === L.KIND_CREDIT) {
      this.credit(imm & L.KIND_MASK);
    } else if (kind === L.KIND_ABORT) {
      this.abortSeen = true;
      const g = this.host.geometry;
      const off = g.slots * g.stride;
      const len = Math.min(this.ringWords[(off >> 2) + L.H.LENGTH] >>> 0, g.chunkBytes);
      this.host.peerAborted(this.peer, new TextDecoder().decode(this.ring.slice(off + L.HEADER_BYTES, off + L.HEADER_BYTES + len)));
    } else {
      this.protocolError(`unknown immediate kind ${kind}`);
    }
  }

  private onChunk(): void {
    const g = this.host.geometry;
    const idx = this.received % g.slots;
    const off = idx * g.stride;
    const w = off >> 2;
    const r = this.ringWords;
    if (r[w + L.H.MAGIC] !== L.CHUNK_MAGIC || r[w + L.H.SEQ] !== (this.received | 0)) {
      return this.protocolError(`chunk ${this.received} has a bad header (magic ${(r[w] >>> 0).toString(16)}, seq ${r[w + L.H.SEQ]}); a different weft version or a corrupted ring`);
    }
    this.received++;
    const slot = (r[w + L.H.SLOT_HI] >>> 0) * 2 ** 32 + (r[w + L.H.SLOT_LO] >>> 0);
    const total = r[w + L.H.TOTAL] >>> 0;
    const offset = r[w + L.H.OFFSET] >>> 0;
    const len = r[w + L.H.LENGTH] >>> 0;
    const roffset = r[w + L.H.ROFFSET] >>> 0;
    const sig = r[w + L.H.SIG] >>> 0;
    const call = r[w + L.H.CALL] >>> 0;
    const flags = r[w + L.H.FLAGS];
    const bound = (flags & L.FLAG_BOUND) !== 0;
    if ((flags & L.FLAG_CREDIT) !== 0) {
      this.credit(r[w + L.H.ACK] & L.KIND_MASK);
      if (this.error) return;
    }
    if (len > g.chunkBytes || offset + len > total) return this.protocolError(`chunk ${this.received - 1} claims ${len} bytes at ${offset} of a ${total}-byte message`);
    const payload = off + L.HEADER_BYTES;

    let cur = this.current;
    if (offset === 0) {
      if (cur) return this.protocolError(`a new message started before the last one (${cur.total} bytes) ended`);
      cur = this.current = { op: this.match(slot, total, sig, call, bound), held: undefined, total, roffset };
      if (!cur.op) {
        if (this.error) return;
        // A collective message for a call this rank has already finished was never asked for:
        // the ranks disagree (every rank took itself for the root, say). Left queued, it would
        // be taken for a later call's data.
        if (call !== 0 && this.host.isStale(slot, call)) {
          this.stale(slot, sig, call);
          return;
        }
        const u: Unexpected = { slot, total, sig, call, roffset, bound, data: this.host.pool.take(total), got: 0 };
        let q = this.unexpected.get(slot);
        if (!q) this.unexpected.set(slot, (q = []));
        q.push(u);
        cur.held = u;
      }
    } else if (!cur || offset !== (cur.op ? cur.op.got : cur.held!.got)) {
      return this.protocolError(`chunk at offset ${offset} does not continue the current message`);
    }
    if (cur.op) {
      this.deliver(cur.op, this.ring, payload, offset, len, total, cur.roffset);
    } else {
      const u = cur.held!;
      copyInto(u.data, offset, this.ring, payload, len);
      u.got += len;
    }
    if (offset + len === total) {
      if (cur.op) this.finish(cur.op);
      this.current = undefined;
    }
    this.consumed++;
    if (this.consumed - this.returned >= g.slots >> 1 || g.slots === 1) this.returnCredits();
  }

  /**
   * The peer has consumed `count` (mod 2^30) of our chunks: their slots are free. From a
   * KIND_CREDIT or a data chunk's header; both arrive in order, so the count never goes back,
   * and it cannot pass what was sent.
   */
  private credit(count: number): void {
    const d = (count - (this.acked & L.KIND_MASK)) & L.KIND_MASK;
    if (d === 0) return;
    if (d > this.sent - this.acked) return this.protocolError(`rank ${this.peer} returned credit for ${d} chunks, but only ${this.sent - this.acked} are in its ring`);
    this.acked += d;
    this.pump();
  }

  /**
   * The oldest zero-copy send's last write completed locally: its memory is the caller's
   * again (the fabric has taken the bytes; the peer's ring slots are still freed by credits).
   */
  onZeroCopyWritten(): void {
    const op = this.unwritten.shift();
    if (op === undefined) return this.protocolError(`a zero-copy write toward rank ${this.peer} completed, but none was posted`);
    op.done = true;
  }

  private returnCredits(): void {
    this.returned = this.consumed;
    try {
      this.qp.postWriteImm(this.host.staging, 0, this.remote, this.remoteBase, 0, ((L.KIND_CREDIT << L.KIND_SHIFT) | (this.consumed & L.KIND_MASK)) >>> 0, 0, false);
    } catch (err) {
      // The peer may be waiting for these slots with nothing else coming: end the job (every
      // peer hears of it) rather than only this pair, which would leave it to its timeout.
      this.host.abort(err instanceof WeftError ? err : new WeftError('EPROTO', `${this.host.label}: returning credits to rank ${this.peer} failed: ${(err as Error)?.message ?? String(err)}`));
    }
  }

  /** The first posted receive for `slot` that takes a message from this peer. */
  private match(slot: number, total: number, sig: number, call: number, bound: boolean): RecvOp | undefined {
    const q = this.posted.get(slot);
    if (!q) return undefined;
    for (let i = 0; i < q.length; i++) {
      const op = q[i];
      if (op.settled || (op.matched && !op.persistent)) {
        q.splice(i--, 1);
        continue;
      }
      if (op.persistent !== bound) continue;
      if (!this.matchable(op, total, sig, call)) return undefined;
      if (!op.persistent) {
        q.splice(i, 1);
        op.matched = true;
        op.peer = this.peer;
      }
      return op;
    }
    return undefined;
  }

  /** Checks a message against the receive it matches; a mismatch aborts the job. */
  private matchable(op: RecvOp, total: number, sig: number, call: number): boolean {
    if (op.sig !== sig) {
      this.host.abort(new WeftError('EINVAL', `${this.host.label}: ${describeSignature(op.sig)} got a message from rank ${this.peer}, which called ${describeSignature(sig)}; every rank must make the same collective calls in the same order, with the same dtype, op and root`));
      return false;
    }
    if (op.call !== call) {
      const when = ((call - op.call) | 0) < 0 ? 'an earlier' : 'a later';
      this.host.abort(new WeftError('EINVAL', `${this.host.label}: ${describeSignature(op.sig)} (call ${op.call} of its kind and tag) got a message from rank ${this.peer} that belongs to ${when} call (${call}); the ranks disagree about an earlier call: another root, or a call that failed or was skipped on some rank. Every rank must make the same collective calls in the same order`));
      return false;
    }
    const room = op.persistent ? op.dst.byteLength : op.nbytes < 0 ? op.dst.byteLength : op.nbytes;
    if (op.nbytes >= 0 ? total !== op.nbytes : total > room) {
      const what = op.sig ? describeSignature(op.sig) : `recv (slot ${op.slot})`;
      this.host.abort(new WeftError('EINVAL', `${this.host.label}: ${what}: rank ${this.peer} sent ${total} bytes where this rank expects ${op.nbytes >= 0 ? op.nbytes : `at most ${room}`}; every rank must pass arrays of matching lengths (and dtypes)`));
      return false;
    }
    return true;
  }

  private deliver(op: RecvOp, src: Uint8Array, srcOff: number, offset: number, len: number, total: number, roffset: number): void {
    const at = (op.persistent ? roffset : 0) + offset;
    if (at + len > op.dst.byteLength) return this.protocolError(`a message for slot ${op.slot} runs past the receive buffer (${at + len} > ${op.dst.byteLength} bytes)`);
    const red = op.reduce;
    if (red) {
      const count = len / red.elementBytes;
      const d = op.dst.subarray(at, at + len);
      reduceInto(red.op, red.dtype, count, d, red.a.subarray(at, at + len), src.subarray(srcOff, srcOff + len));
    } else {
      copyInto(op.dst, at, src, srcOff, len);
    }
    op.got += len;
    if (op.persistent && offset + len === total) op.got = 0;
  }

  private finish(op: RecvOp): void {
    if (op.persistent) op.messages++;
    else op.done = true;
  }

  /** After this rank finished call `call` of `slot`: a message of it still queued here is stale. */
  /** A message of call `call` (or earlier) of `slot` still queued from this peer: the error, after aborting the job. */
  checkStale(slot: number, call: number): WeftError | undefined {
    const q = this.unexpected.get(slot);
    if (!q) return undefined;
    for (const u of q) if (u.call !== 0 && ((u.call - call) | 0) <= 0) return this.stale(slot, u.sig, u.call);
    return undefined;
  }

  private stale(slot: number, sig: number, call: number): WeftError {
    const err = new WeftError('EINVAL', `${this.host.label}: rank ${this.peer} sent a message of ${describeSignature(sig)} call ${call} (of its kind and tag), a call this rank finished without receiving from it; the ranks disagree about that call (another root, or a call that failed or was skipped on some rank). Every rank must make the same collective calls in the same order, with the same root`);
    this.host.abort(err);
    return err;
  }

  // ------------------------------------------------------------------ errors

  private protocolError(what: string): void {
    this.host.abort(new WeftError('EPROTO', `${this.host.label}: malformed message from rank ${this.peer}: ${what}`));
  }

  /** Fails every operation of this pair. */
  fail(err: WeftError): void {
    if (!this.error) this.error = err;
    for (let i = this.sqHead; i < this.sq.length; i++) this.sq[i].fail(err);
    for (const op of this.unwritten) op.fail(err);
    this.unwritten.length = 0;
    this.sq.length = 0;
    this.sqHead = 0;
    for (const q of this.posted.values()) for (const op of q) if (!op.matched || op.persistent) op.fail(err);
    this.posted.clear();
    if (this.current?.op) this.current.op.fail(err);
    this.current = undefined;
  }

  /** Something in flight involves this peer: a queued or unwritten send, a posted receive, a message half in. */
  get busy(): boolean {
    if (this.sqHead < this.sq.length || this.current) return true;
    for (const op of this.unwritten) if (!op.settled) return true;
    for (const q of this.posted.values()) for (const op of q) if (!op.settled && (!op.matched || op.persistent)) return true;
    return false;
  }

  /** Receives posted here (for timeout messages). */
  pendingReceives(): number {
    let n = 0;
    for (const q of this.posted.values()) for (const op of q) if (!op.settled && !op.matched) n++;
    return n;
  }
}
