/**
 * One daemon's key shard: an open-addressing hash table (linear probing) over typed arrays,
 * u64 keys and values as u32 halves, sized at creation for the keys the daemon owns at a load
 * factor of at most one half, so it never grows and never allocates on the data path.
 */
import { GET_NOT_FOUND, GET_OK, OP_GET, OP_PUT, PUT_OK, type KvMessage, type KvWriter } from './messages.js';

export class KvShard {
  readonly capacity: number;
  private readonly mask: number;
  /** keys[2i], keys[2i+1]: lo, hi of slot i's key. */
  private readonly keys: Uint32Array;
  private readonly values: Uint32Array;
  private readonly used: Uint8Array;
  size = 0;
  /** Filled by get(): the value found. */
  lo = 0;
  hi = 0;

  constructor(expectedKeys: number) {
    let cap = 16;
    while (cap < expectedKeys * 2) cap *= 2;
    this.capacity = cap;
    this.mask = cap - 1;
    this.keys = new Uint32Array(cap * 2);
    this.values = new Uint32Array(cap * 2);
    this.used = new Uint8Array(cap);
  }

  private slot(lo: number, hi: number): number {
    // A murmur3-style finalizer over both halves: sequential keys spread over the table.
    let h = Math.imul(lo ^ Math.imul(hi, 0x9e3779b1), 0x85ebca6b);
    h ^= h >>> 13;
    h = Math.imul(h, 0xc2b2ae35);
    h ^= h >>> 16;
    let i = h & this.mask;
    const k = this.keys;
    const u = this.used;
    for (let probes = 0; probes <= this.mask; probes++) {
      if (u[i] === 0 || (k[2 * i] === lo && k[2 * i + 1] === hi)) return i;
      i = (i + 1) & this.mask;
    }
    return -1;
  }

  /** Inserts or overwrites; throws when the table is full (more keys than it was sized for). */
  put(lo: number, hi: number, vlo: number, vhi: number): void {
    const i = this.slot(lo, hi);
    if (i < 0 || (this.used[i] === 0 && this.size * 2 >= this.capacity)) throw new Error(`KvShard: more than ${this.capacity / 2} keys; size the shard for the key range`);
    if (this.used[i] === 0) {
      this.used[i] = 1;
      this.keys[2 * i] = lo;
      this.keys[2 * i + 1] = hi;
      this.size++;
    }
    this.values[2 * i] = vlo;
    this.values[2 * i + 1] = vhi;
  }

  /** True when found; the value is then in `lo` / `hi`. */
  get(lo: number, hi: number): boolean {
    const i = this.slot(lo, hi);
    if (i < 0 || this.used[i] === 0) return false;
    this.lo = this.values[2 * i];
    this.hi = this.values[2 * i + 1];
    return true;
  }

  /** handle_local of the notes: runs a decoded request, fills `w.response` (tag for Flux). */
  handle(m: KvMessage, w: KvWriter, tag = 0): Uint8Array {
    if (m.op === OP_PUT) {
      this.put(m.keyLo, m.keyHi, m.valueLo, m.valueHi);
      return w.setResponse(PUT_OK, 0, 0, tag);
    }
    if (m.op === OP_GET && this.get(m.keyLo, m.keyHi)) return w.setResponse(GET_OK, this.lo, this.hi, tag);
    return w.setResponse(GET_NOT_FOUND, 0, 0, tag);
  }
}

/** The value every key is preloaded with (lo = key, hi = 0); --verify expects it before any put. */
export function preload(shard: KvShard, keys: number, daemons: number, daemon: number): void {
  for (let k = daemon; k < keys; k += daemons) shard.put(k, 0, k, 0);
}
