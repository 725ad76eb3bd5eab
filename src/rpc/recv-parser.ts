/**
 * The receive side of a copyrpc endpoint: each RECV_WRITE_IMM is one batch at our parse
 * position; it is decoded in order, every read bounds-checked against the batch, and
 * anything malformed fails the endpoint with EPROTO (never the process). Responses go to
 * the poll callback at once; requests are queued as RecvHandles; their bytes are released
 * (the consumer position moves past them) at the poll after recv() took them, so a slow
 * reply never blocks the ring.
 */
import { ALIGNMENT, FLOW_METADATA_SIZE as META, HEADER_SIZE, RESPONSE_FLAG, responsePayloadLimit, WRAP_MESSAGE_COUNT } from './constants.js';
import type { MemoryRegion } from '../nic/types.js';
import { ReleaseQueue } from './release-queue.js';
import { SendBatcher } from './send-batcher.js';
import { MISSING, Slab } from './slab.js';

const TWO32 = 0x100000000;

/** What can be wrong with a batch (numbers: the message's details, see describeBad). */
const enum Bad {
  FIT,
  OVERRUN,
  WRAP,
  BOUNDARY,
  COUNT_PAST,
  LENGTH,
  RESPONSE,
  RESPONSE_SIZE,
  ALLOWANCE,
  UNDECODED,
}

function describeBad(kind: Bad, a: number, b: number, c: number, d: number): string {
  switch (kind) {
    case Bad.FIT:
      return `a batch of ${a} bytes (imm ${b}) at ring offset ${c} does not fit in the ${d}-byte ring cycle`;
    case Bad.OVERRUN:
      return `the peer wrote ${a} bytes past our consumer position into a ${b}-byte ring (it overran unconsumed data)`;
    case Bad.WRAP:
      return `a wrap marker at cycle offset ${a} skips ${b} bytes, which ends at ${a + b}, not at the ${c}-byte cycle boundary`;
    case Bad.BOUNDARY:
      return `a batch ends exactly at the ring cycle boundary (offset ${a}, ${b} bytes); batches must leave room for a wrap marker`;
    case Bad.COUNT_PAST:
      return `message count ${a} runs past the data: message ${b} would start at byte ${c} of a ${d}-byte batch`;
    case Bad.LENGTH:
      return `message ${a} claims ${b} payload bytes but only ${c} remain in the ${d}-byte batch`;
    case Bad.RESPONSE:
      return `a response to call id ${a}, which is not pending (unknown or already answered)`;
    case Bad.RESPONSE_SIZE:
      return `the response to call id ${a} carries ${b} bytes, more than the ${c} the call allowed`;
    case Bad.ALLOWANCE:
      return `request ${a} claims a response allowance of ${b} bytes but ${c} bytes of credit were outstanding`;
    default:
      return `message count ${a} leaves ${b} bytes of the ${c}-byte batch undecoded`;
  }
}


export abstract class RecvParser<U> extends SendBatcher<U> {
  /** The recv ring (handles and response callbacks read payloads from it). */
  readonly recvRing: Uint8Array;
  private readonly r32: Uint32Array;
  private readonly rMask: number;
  /** The ring cycle of the peer's sends toward us. */
  protected recvC = 0;
  /** Virtual position of the next batch (= the recv producer once a batch is decoded). */
  private parsePos = 0;
  private parseOff = 0;
  private readonly holds = new ReleaseQueue();
  /** Pending calls: their user data by call id. */
  protected readonly slab = new Slab<U>();

  // What the endpoint provides.
  abstract state: 'init' | 'ready' | 'failed' | 'closed';
  /** A response to one of our calls arrived (payload in the recv ring at offset, length). */
  protected abstract deliverResponse(userData: U, offset: number, length: number): void;
  /** A request arrived: queue it for recv(). */
  protected abstract pushRequest(callId: number, offset: number, length: number, internalAllowance: number, holdSeq: number): void;
  /** The peer sent something impossible: fail the endpoint. */
  abstract malformed(what: string): void;

  constructor(
    mr: MemoryRegion,
    sendSize: number,
    recvRing: Uint8Array,
    /** Our consumer-position word (u64), which the peer READs when our batches are scarce. */
    private readonly consumerWord: Uint32Array,
  ) {
    super(mr, sendSize);
    this.recvRing = recvRing;
    this.r32 = new Uint32Array(recvRing.buffer, recvRing.byteOffset, recvRing.byteLength >>> 2);
    this.rMask = recvRing.byteLength - 1;
  }

  /** Decodes one batch (one RECV_WRITE_IMM with immediate `imm`) at the parse position. */
  protected ingestBatch(imm: number): void {
    this.stats.batchesReceived++;
    const delta = imm * ALIGNMENT;
    const C = this.recvC;
    const off = this.parseOff;
    const cyc = off & (C - 1);
    const start = this.parsePos;
    if (delta < META || cyc + delta > C) return this.bad(Bad.FIT, delta, imm, off, C);
    if (start + delta - this.releasePos > C) return this.bad(Bad.OVERRUN, start + delta - this.releasePos, C);
    const r32 = this.r32;
    const w = off >>> 2;
    const consumer = r32[w] + r32[w + 1] * TWO32;
    const grant = r32[w + 2] + r32[w + 3] * TWO32;
    const count = r32[w + 4];
    if (count === WRAP_MESSAGE_COUNT) {
      if (cyc + delta !== C) return this.bad(Bad.WRAP, cyc, delta, C);
      if (!this.applyFlow(consumer, grant)) return;
      this.stats.wrapsReceived++;
      this.advance(delta);
      return;
    }
    if (cyc + delta === C) return this.bad(Bad.BOUNDARY, off, delta);
    if (!this.applyFlow(consumer, grant)) return;
    // A metadata-only batch means the peer waits for our credit or consumer position.
    if (count === 0 && !this.dirty) this.markDirty();
    const end = off + delta;
    let cur = off + META;
    for (let i = 0; i < count; i++) {
      if (cur + HEADER_SIZE > end) return this.bad(Bad.COUNT_PAST, count, i, cur - off, delta);
      const h = cur >>> 2;
      const id = r32[h];
      const pig = r32[h + 1];
      const len = r32[h + 2];
      if (len > end - cur - HEADER_SIZE) return this.bad(Bad.LENGTH, i, len, end - cur - HEADER_SIZE, delta);
      if (id >= RESPONSE_FLAG) {
        // A response fits the allowance its call reserved (reply() checks the same), or it
        // would use ring space and credit the caller never gave.
        const ia = this.slab.auxOf(id - RESPONSE_FLAG);
        if (ia !== 0 && ((HEADER_SIZE + len + 31) & ~31) + META > ia) return this.bad(Bad.RESPONSE_SIZE, id - RESPONSE_FLAG, len, responsePayloadLimit(ia));
        const ud = this.slab.take(id - RESPONSE_FLAG);
        if (ud === MISSING) return this.bad(Bad.RESPONSE, id - RESPONSE_FLAG);
        this.stats.responses++;
        this.deliverResponse(ud, cur + HEADER_SIZE, len);
        if (this.state !== 'ready') return;
      } else {
        const ia = pig * ALIGNMENT;
        if (!this.takeRequestCredit(ia)) return this.bad(Bad.ALLOWANCE, id, ia, this.creditOut);
        this.stats.requests++;
        this.pushRequest(id, cur + HEADER_SIZE, len, ia, this.holds.push(start + (cur - off)));
      }
      cur += (HEADER_SIZE + len + 31) & ~31;
    }
    if (cur !== end) return this.bad(Bad.UNDECODED, count, end - cur, delta);
    this.advance(delta);
  }

  /** Applies a batch's consumer position and credit grant; false if they are impossible. */
  private applyFlow(consumer: number, grant: number): boolean {
    const sent = this.flushStart;
    const before = this.remoteConsumer;
    if (this.acceptFlow(consumer, grant, sent)) {
      // The peer consumed what we sent, so our ring toward it has room again: credit a full
      // ring kept us from granting may now be worth a batch of its own. Nothing else would
      // send it while we have no message for the peer, and a peer that lacks credit may
      // have nothing left to report (it told us everything), so it cannot ask again.
      if (this.remoteConsumer > before && !this.dirty && this.grantWorthSending(this.P)) this.markDirty();
      return true;
    }
    this.malformed(this.flowRejection(consumer, grant, sent));
    return false;
  }

  /**
   * Fails the endpoint for a malformed batch. Cold: the messages are built here, so the hot
   * decode loop stays small enough for V8 to inline what it calls.
   */
  private bad(kind: Bad, a: number, b = 0, c = 0, d = 0): void {
    this.malformed(describeBad(kind, a, b, c, d));
  }

  private advance(delta: number): void {
    this.parsePos += delta;
    this.parseOff = (this.parseOff + delta) & this.rMask;
    const held = this.holds.oldest();
    this.setRelease(held < 0 ? this.parsePos : held);
  }

  /**
   * recv() handed out request `seq`. Its bytes stay readable until the next poll: the
   * consumer position moves past them only when that poll starts (refreshRelease).
   */
  protected releaseRequest(seq: number): void {
    this.holds.release(seq);
  }

  /** At the start of a poll: publish the consumer position past taken requests. */
  protected releaseTaken(): void {
    this.setRelease(this.holds.oldest());
  }

  /** Consumed bytes the peer has not been told of. */
  protected get unreported(): number {
    return this.releasePos - this.lastNotified;
  }

  /** Publishes a new consumer position (for the peer's READ) and notes it for piggybacking. */
  private setRelease(held: number): void {
    const rel = held < 0 ? this.parsePos : held;
    if (rel === this.releasePos) return;
    this.releasePos = rel;
    // High word first: a reader that copies low then high sees a torn value only as too large,
    // which it rejects. Plain stores: only a READ looks at this word, and it checks what it
    // got, so a seq-cst store (an xchg, on every batch) buys nothing.
    const c = this.consumerWord;
    c[1] = (rel / TWO32) >>> 0;
    c[0] = rel >>> 0;
    if (!this.dirty && (rel - this.lastNotified) * 4 >= this.recvC) this.markDirty();
  }

  /** Parse state, for debugging. */
  protected parseState(): { parsePos: number; releasePos: number } {
    return { parsePos: this.parsePos, releasePos: this.releasePos };
  }
}
