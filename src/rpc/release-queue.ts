/**
 * A request's payload stays readable in the recv ring until the poll after recv() took it,
 * so the consumer position we publish stops at the oldest request not yet taken: entries
 * hold each request's start position and retire from the head in order (recv() takes each
 * endpoint's requests in order; release in any order is supported all the same). Sequence numbers wrap as
 * int32; the ring doubles when full, so the steady state allocates nothing.
 */
export class ReleaseQueue {
  private pos: Float64Array;
  private done: Uint8Array;
  private mask: number;
  private head = 0;
  private tail = 0;

  constructor(capacity = 64) {
    this.pos = new Float64Array(capacity);
    this.done = new Uint8Array(capacity);
    this.mask = capacity - 1;
  }

  get size(): number {
    return (this.tail - this.head) | 0;
  }

  /** Holds ring position `position`; returns the sequence number to release it with. */
  push(position: number): number {
    if (this.size > this.mask) this.grow();
    const seq = this.tail;
    const i = seq & this.mask;
    this.pos[i] = position;
    this.done[i] = 0;
    this.tail = (seq + 1) | 0;
    return seq;
  }

  /** Releases entry `seq`; returns the oldest position still held, or -1 when none is. */
  release(seq: number): number {
    this.done[seq & this.mask] = 1;
    while (this.head !== this.tail && this.done[this.head & this.mask] === 1) this.head = (this.head + 1) | 0;
    return this.oldest();
  }

  /** The oldest position still held, or -1. */
  oldest(): number {
    return this.head === this.tail ? -1 : this.pos[this.head & this.mask];
  }

  private grow(): void {
    const cap = (this.mask + 1) * 2;
    const pos = new Float64Array(cap);
    const done = new Uint8Array(cap);
    for (let s = this.head; s !== this.tail; s = (s + 1) | 0) {
      pos[s & (cap - 1)] = this.pos[s & this.mask];
      done[s & (cap - 1)] = this.done[s & this.mask];
    }
    this.pos = pos;
    this.done = done;
    this.mask = cap - 1;
  }
}
