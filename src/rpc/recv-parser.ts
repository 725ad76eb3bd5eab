/**
 * The receive side of a copyrpc endpoint: each RECV_WRITE_IMM is one batch at our parse
 * position; it is decoded in order, every read bounds-checked against the batch, and
 * anything malformed fails the endpoint with EPROTO (never the process). Responses go to
 * the poll callback at once; requests are queued as RecvHandles; their bytes are released
 * (the consumer position moves past them) at the poll after recv() took them, so a slow
 * reply never blocks the ring.
 */
import { ALIGNMENT, FLOW_METADATA_SIZE as META, HEADER_SIZE, RESPONSE_FLAG, WRAP_MESSAGE_COUNT } from './constants.js';
import type { FlowControl } from './flow-control.js';
import { ReleaseQueue } from './release-queue.js';
import { MISSING, type Slab } from './slab.js';

const TWO32 = 0x100000000;

/** What the receive side needs from its endpoint. */
export interface RecvSide<U> {
  readonly ready: boolean;
  readonly dirty: boolean;
  readonly stats: { batchesReceived: number; wrapsReceived: number; responses: number; requests: number };
  /** Bytes posted so far (a consumer position beyond them is impossible). */
  readonly sent: number;
  /** The endpoint must be flushed at the next poll (the peer waits for our news). */
  markDirty(): void;
  /** A response to a call of ours (payload valid during the call). */
  deliverResponse(userData: U, offset: number, length: number): void;
  /** A request to queue for recv(). */
  pushRequest(callId: number, offset: number, length: number, internalAllowance: number, holdSeq: number): void;
  /** The peer sent something impossible: fail the endpoint. */
  malformed(what: string): void;
}

export class RecvParser<U> {
  /** The recv ring (handles and response callbacks read payloads from it). */
  readonly ring: Uint8Array;
  private readonly r32: Uint32Array;
  private readonly rMask: number;
  /** The ring cycle of the peer's sends toward us. */
  C = 0;
  /** Virtual position of the next batch (= the recv producer once a batch is decoded). */
  private parsePos = 0;
  private parseOff = 0;
  /**
   * The consumer position we publish (nothing before it is needed any more) and the last one
   * the peer was told of (the send side piggybacks it on every batch).
   */
  readonly release = { pos: 0, notified: 0 };
  private readonly holds = new ReleaseQueue();

  constructor(
    private readonly side: RecvSide<U>,
    private readonly flow: FlowControl,
    private readonly slab: Slab<U>,
    ring: Uint8Array,
    /** Our consumer-position word (u64), which the peer READs when our batches are scarce. */
    private readonly consumerWord: Uint32Array,
  ) {
    this.ring = ring;
    this.r32 = new Uint32Array(ring.buffer, ring.byteOffset, ring.byteLength >>> 2);
    this.rMask = ring.byteLength - 1;
  }

  /** Decodes one batch (one RECV_WRITE_IMM with immediate `imm`) at the parse position. */
  ingest(imm: number): void {
    const side = this.side;
    side.stats.batchesReceived++;
    const delta = imm * ALIGNMENT;
    const C = this.C;
    const off = this.parseOff;
    const cyc = off & (C - 1);
    const start = this.parsePos;
    if (delta < META || cyc + delta > C) return side.malformed(`a batch of ${delta} bytes (imm ${imm}) at ring offset ${off} does not fit in the ${C}-byte ring cycle`);
    if (start + delta - this.release.pos > C) return side.malformed(`the peer wrote ${start + delta - this.release.pos} bytes past our consumer position into a ${C}-byte ring (it overran unconsumed data)`);
    const r32 = this.r32;
    const w = off >>> 2;
    const consumer = r32[w] + r32[w + 1] * TWO32;
    const grant = r32[w + 2] + r32[w + 3] * TWO32;
    const count = r32[w + 4];
    if (count === WRAP_MESSAGE_COUNT) {
      if (cyc + delta !== C) return side.malformed(`a wrap marker at cycle offset ${cyc} skips ${delta} bytes, which ends at ${cyc + delta}, not at the ${C}-byte cycle boundary`);
      if (!this.applyFlow(consumer, grant)) return;
      side.stats.wrapsReceived++;
      this.advance(delta);
      return;
    }
    if (cyc + delta === C) return side.malformed(`a batch ends exactly at the ring cycle boundary (offset ${off}, ${delta} bytes); batches must leave room for a wrap marker`);
    if (!this.applyFlow(consumer, grant)) return;
    // A metadata-only batch means the peer waits for our credit or consumer position.
    if (count === 0 && !side.dirty) side.markDirty();
    const end = off + delta;
    let cur = off + META;
    for (let i = 0; i < count; i++) {
      if (cur + HEADER_SIZE > end) return side.malformed(`message count ${count} runs past the data: message ${i} would start at byte ${cur - off} of a ${delta}-byte batch`);
      const h = cur >>> 2;
      const id = r32[h];
      const pig = r32[h + 1];
      const len = r32[h + 2];
      if (len > end - cur - HEADER_SIZE) return side.malformed(`message ${i} claims ${len} payload bytes but only ${end - cur - HEADER_SIZE} remain in the ${delta}-byte batch`);
      if (id >= RESPONSE_FLAG) {
        const ud = this.slab.take(id - RESPONSE_FLAG);
        if (ud === MISSING) return side.malformed(`a response to call id ${id - RESPONSE_FLAG}, which is not pending (unknown or already answered)`);
        side.stats.responses++;
        side.deliverResponse(ud, cur + HEADER_SIZE, len);
        if (!side.ready) return;
      } else {
        const ia = pig * ALIGNMENT;
        if (!this.flow.takeRequestCredit(ia)) return side.malformed(`request ${id} claims a response allowance of ${ia} bytes but ${this.flow.creditOut} bytes of credit were outstanding`);
        side.stats.requests++;
        side.pushRequest(id, cur + HEADER_SIZE, len, ia, this.holds.push(start + (cur - off)));
      }
      cur += (HEADER_SIZE + len + 31) & ~31;
    }
    if (cur !== end) return side.malformed(`message count ${count} leaves ${end - cur} bytes of the ${delta}-byte batch undecoded`);
    this.advance(delta);
  }

  /** Applies a batch's consumer position and credit grant; false if they are impossible. */
  private applyFlow(consumer: number, grant: number): boolean {
    const bad = this.flow.apply(consumer, grant, this.side.sent);
    if (bad === undefined) return true;
    this.side.malformed(bad);
    return false;
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
  taken(seq: number): void {
    this.holds.release(seq);
  }

  /** At the start of a poll: publish the consumer position past taken requests. */
  refreshRelease(): void {
    this.setRelease(this.holds.oldest());
  }

  /** Consumed bytes the peer has not been told of. */
  get unreported(): number {
    return this.release.pos - this.release.notified;
  }

  /** Publishes a new consumer position (for the peer's READ) and notes it for piggybacking. */
  private setRelease(held: number): void {
    const rel = held < 0 ? this.parsePos : held;
    const release = this.release;
    if (rel === release.pos) return;
    release.pos = rel;
    // High word first: a reader that copies low then high sees a torn value only as too large,
    // which it rejects. Plain stores: only a READ looks at this word, and it checks what it
    // got, so a seq-cst store (an xchg, on every batch) buys nothing.
    const c = this.consumerWord;
    c[1] = (rel / TWO32) >>> 0;
    c[0] = rel >>> 0;
    if (!this.side.dirty && (rel - release.notified) * 4 >= this.C) this.side.markDirty();
  }

  /** Parse state, for debugging. */
  debugState(): { parsePos: number; releasePos: number } {
    return { parsePos: this.parsePos, releasePos: this.release.pos };
  }
}
