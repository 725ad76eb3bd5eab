/**
 * Slices: the pieces a request is cut into (its path's slice size each, the last one shorter),
 * each posted as one NIC READ or WRITE whose work-request id is the slice's index here. A slice
 * is one Float64Array record of SS numbers (one cache line; see batch.ts for why) plus its
 * batch, with a free list; the per-peer queues are rings of indices. Cutting, posting,
 * completing and retrying a slice allocate nothing once warm.
 */
import type { Batch } from './batch.js';
import type { RemoteBuffer } from './remote-segment.js';
import type { MemoryRegion, RemoteRegion } from '../nic/types.js';

export const SS = 8;
/** Request index in its batch. */
export const S_IDX = 0;
/** Byte offset inside the request. */
export const S_OFF = 1;
export const S_LEN = 2;
/** Path (QP index toward the peer) it was last posted on. */
export const S_PATH = 3;
/** Paths tried so far (a failed path is retried on another). */
export const S_TRIES = 4;
/** 1 while posted on its path and not completed. */
export const S_FLYING = 5;
/** Target rank. */
export const S_RANK = 6;
/** Its batch's generation (batch.ts). */
export const S_GEN = 7;

export class SliceTable {
  batch: (Batch | undefined)[] = [];
  /** The buffer a flying slice targets (its `flying` count includes the slice). */
  target: (RemoteBuffer | undefined)[] = [];
  f = new Float64Array(0);
  private free = new Int32Array(0);
  private nFree = 0;
  /** Slices allocated and not released. */
  live = 0;

  /** Slots (allocated or free). */
  get capacity(): number {
    return this.batch.length;
  }

  alloc(b: Batch, i: number, rank: number, off: number, len: number): number {
    if (this.nFree === 0) this.grow();
    const s = this.free[--this.nFree];
    this.batch[s] = b;
    const o = s * SS;
    const f = this.f;
    f[o + S_IDX] = i;
    f[o + S_OFF] = off;
    f[o + S_LEN] = len;
    f[o + S_PATH] = -1;
    f[o + S_TRIES] = 0;
    f[o + S_FLYING] = 0;
    f[o + S_RANK] = rank;
    f[o + S_GEN] = b.gen;
    this.live++;
    return s;
  }

  release(s: number): void {
    this.batch[s] = undefined;
    this.landed(s);
    this.free[this.nFree++] = s;
    this.live--;
  }

  /** Slice s is posted toward `to`. */
  flying(s: number, to: RemoteBuffer): void {
    this.f[s * SS + S_FLYING] = 1;
    this.target[s] = to;
    to.flying++;
  }

  /** Slice s is no longer in the fabric (completed, failed, or given up on with its path). */
  landed(s: number): void {
    if (this.f[s * SS + S_FLYING] === 0) return;
    this.f[s * SS + S_FLYING] = 0;
    (this.target[s] as RemoteBuffer).flying--;
    this.target[s] = undefined;
  }

  private grow(): void {
    const old = this.batch.length;
    const cap = Math.max(1024, old * 2);
    const f = new Float64Array(cap * SS);
    f.set(this.f);
    this.f = f;
    const free = new Int32Array(cap);
    free.set(this.free.subarray(0, this.nFree));
    // New slots are handed out lowest first.
    for (let s = cap - 1; s >= old; s--) free[this.nFree++] = s;
    this.free = free;
    while (this.batch.length < cap) {
      this.batch.push(undefined);
      this.target.push(undefined);
    }
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

/** Slices staged for copies that run at once (shm `copyNow`): run together per pump turn. */
export const STAGED_MAX = 64;

/** The staged copies of one turn toward one peer: parallel arrays, allocated once. */
export class StagedCopies {
  n = 0;
  /** The engine's settle count when the first of these was staged. */
  settles = 0;
  readonly slice: Int32Array;
  readonly path: Int32Array;
  readonly read: Uint8Array;
  readonly done: Uint8Array;
  readonly localOff: Float64Array;
  readonly remoteOff: Float64Array;
  readonly len: Float64Array;
  readonly mr: (MemoryRegion | undefined)[];
  readonly region: (RemoteRegion | undefined)[];
  constructor(capacity: number) {
    this.slice = new Int32Array(capacity);
    this.path = new Int32Array(capacity);
    this.read = new Uint8Array(capacity);
    this.done = new Uint8Array(capacity);
    this.localOff = new Float64Array(capacity);
    this.remoteOff = new Float64Array(capacity);
    this.len = new Float64Array(capacity);
    this.mr = new Array(capacity).fill(undefined);
    this.region = new Array(capacity).fill(undefined);
  }
}
