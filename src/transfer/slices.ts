/**
 * Slices: the pieces a request is cut into (sliceBytes each, the last one shorter), each
 * posted as one NIC READ or WRITE whose work-request id is the slice's index here. The table
 * is parallel typed arrays with a free list, and the per-peer queues are rings of indices, so
 * cutting, posting, completing and retrying a slice allocate nothing once warm.
 */
import type { Batch } from './batch.js';

export class SliceTable {
  batch: (Batch | undefined)[] = [];
  /** Request index in its batch. */
  idx = new Int32Array(0);
  /** Byte offset inside the request. */
  off = new Float64Array(0);
  len = new Uint32Array(0);
  /** Path (QP index toward the peer) it was last posted on. */
  path = new Int16Array(0);
  /** Paths tried so far (a failed path is retried on another). */
  tries = new Uint8Array(0);
  /** 1 while posted on `path` and not completed. */
  flying = new Uint8Array(0);
  /** Target rank. */
  rank = new Int32Array(0);
  private free = new Int32Array(0);
  private nFree = 0;
  /** Slices allocated and not released. */
  live = 0;

  alloc(b: Batch, i: number, rank: number, off: number, len: number): number {
    if (this.nFree === 0) this.grow();
    const s = this.free[--this.nFree];
    this.batch[s] = b;
    this.idx[s] = i;
    this.rank[s] = rank;
    this.off[s] = off;
    this.len[s] = len;
    this.path[s] = -1;
    this.tries[s] = 0;
    this.flying[s] = 0;
    this.live++;
    return s;
  }

  release(s: number): void {
    this.batch[s] = undefined;
    this.flying[s] = 0;
    this.free[this.nFree++] = s;
    this.live--;
  }

  private grow(): void {
    const old = this.idx.length;
    const cap = Math.max(1024, old * 2);
    const g = <T extends Int32Array | Float64Array | Uint32Array | Int16Array | Uint8Array>(a: T, make: new (n: number) => T): T => {
      const b = new make(cap);
      b.set(a);
      return b;
    };
    this.idx = g(this.idx, Int32Array);
    this.off = g(this.off, Float64Array);
    this.len = g(this.len, Uint32Array);
    this.path = g(this.path, Int16Array);
    this.tries = g(this.tries, Uint8Array);
    this.flying = g(this.flying, Uint8Array);
    this.rank = g(this.rank, Int32Array);
    const free = new Int32Array(cap);
    free.set(this.free.subarray(0, this.nFree));
    // New slots are handed out lowest first.
    for (let s = cap - 1; s >= old; s--) free[this.nFree++] = s;
    this.free = free;
    while (this.batch.length < cap) this.batch.push(undefined);
  }
}

/** A FIFO of slice indices (a ring that doubles when full). */
export class SliceQueue {
  private ring = new Int32Array(64);
  private head = 0;
  size = 0;

  push(s: number): void {
    if (this.size === this.ring.length) this.grow();
    this.ring[(this.head + this.size) & (this.ring.length - 1)] = s;
    this.size++;
  }

  /** Puts `s` first (a retried slice goes before the ones that never ran). */
  unshift(s: number): void {
    if (this.size === this.ring.length) this.grow();
    this.head = (this.head - 1) & (this.ring.length - 1);
    this.ring[this.head] = s;
    this.size++;
  }

  peek(): number {
    return this.ring[this.head];
  }

  shift(): number {
    const s = this.ring[this.head];
    this.head = (this.head + 1) & (this.ring.length - 1);
    this.size--;
    return s;
  }

  private grow(): void {
    const next = new Int32Array(this.ring.length * 2);
    for (let i = 0; i < this.size; i++) next[i] = this.ring[(this.head + i) & (this.ring.length - 1)];
    this.ring = next;
    this.head = 0;
  }
}
