/**
 * A single-producer single-consumer ring of lap-stamped slots in a shared segment, the
 * channel ipc and Flux are made of. Slot `pos & (depth-1)` holds [stamp, tag, payload]; the
 * producer writes the payload and the tag, then stores stamp = pos + 1; the consumer at `pos`
 * waits for exactly that stamp. Neither side reads the other's index: the protocols above
 * bound what is in flight by the depth (a response per request, a reply per call), so a
 * slot is never rewritten before it was read, and a stale or garbage stamp is never taken
 * for a new message.
 */
import { loadAcquire } from '../host/acquire.js';
import { ShortCopier } from '../host/copy.js';
import { line } from './segment.js';

/** Byte offsets inside a slot. */
export const STAMP = 0;
export const TAG = 4;
export const PAYLOAD = 8;

/** Bytes of a slot carrying `payloadBytes`. */
export function stampedSlotBytes(payloadBytes: number): number {
  return line(PAYLOAD + payloadBytes);
}

/** One ring's view: offsets and preallocated payload views (no allocation per message). */
export class StampedRing {
  readonly mask: number;
  private readonly stampWord: Int32Array;
  private readonly u8: Uint8Array;
  private readonly payloads: Uint8Array[] = [];
  private readonly copier = new ShortCopier();

  constructor(
    private readonly i32: Int32Array,
    private readonly base: number,
    readonly depth: number,
    private readonly slotBytes: number,
    payloadBytes: number,
    /** Publish with a plain store: only where the consumer's sleeps fence (host/remote-fence.ts). */
    private readonly plainPublish = false,
  ) {
    this.mask = depth - 1;
    this.stampWord = i32;
    this.u8 = new Uint8Array(i32.buffer);
    for (let i = 0; i < depth; i++) this.payloads.push(new Uint8Array(i32.buffer, base + i * slotBytes + PAYLOAD, payloadBytes));
  }

  /** Payload view of the slot of `pos` (fill it, then publish). */
  payload(pos: number): Uint8Array {
    return this.payloads[pos & this.mask];
  }

  /** Producer: copies `src` (at most the payload size) into the slot of `pos`, before publish(). */
  fill(pos: number, src: Uint8Array): void {
    this.copier.copy(this.u8, this.i32, this.base + (pos & this.mask) * this.slotBytes + PAYLOAD, src, src.length);
  }

  /** Producer: makes the message at `pos` (payload already written) visible with `tag`. */
  publish(pos: number, tag: number): void {
    const w = (this.base + (pos & this.mask) * this.slotBytes) >> 2;
    this.i32[w + 1] = tag;
    // x86 keeps a plain store after the payload's and the tag's; the consumer's sleeps fence.
    if (this.plainPublish) this.stampWord[w] = (pos + 1) | 0;
    else Atomics.store(this.stampWord, w, (pos + 1) | 0);
  }

  /** Consumer: the message at `pos` has been published. */
  ready(pos: number): boolean {
    return Atomics.load(this.stampWord, (this.base + (pos & this.mask) * this.slotBytes) >> 2) === ((pos + 1) | 0);
  }

  /**
   * ready() for a message after the first of one drain: a plain load where that is an
   * acquire load (host/acquire.ts). The first check of every drain must be ready(), so that
   * a loop of polls always makes a synchronizing load.
   */
  readyNext(pos: number): boolean {
    const w = (this.base + (pos & this.mask) * this.slotBytes) >> 2;
    return loadAcquire(this.stampWord, w) === ((pos + 1) | 0);
  }

  /** The tag of the message at `pos` (after ready). */
  tag(pos: number): number {
    return this.i32[((this.base + (pos & this.mask) * this.slotBytes) >> 2) + 1];
  }
}
