/**
 * Pending calls: the slab index is the call id, so a response finds its user data (and the
 * response size the call allowed) in O(1) whatever order responses come back in. Free ids are reused LIFO from an Int32Array stack;
 * the arrays grow by doubling and never shrink, so the steady state allocates nothing.
 */

/** What `take` returns for an id that is not pending (a malformed or duplicate response). */
export const MISSING: unique symbol = Symbol('missing call');

export class Slab<U> {
  private data: (U | undefined)[];
  private live: Uint8Array;
  /** Per id: a number stored with the value (copyrpc: the call's internal response allowance). */
  private aux: Int32Array;
  private free: Int32Array;
  private nFree: number;
  /** Calls pending now. */
  size = 0;

  constructor(capacity = 64) {
    this.data = new Array<U | undefined>(capacity).fill(undefined);
    this.live = new Uint8Array(capacity);
    this.aux = new Int32Array(capacity);
    this.free = new Int32Array(capacity);
    for (let i = 0; i < capacity; i++) this.free[i] = capacity - 1 - i;
    this.nFree = capacity;
  }

  /** Stores `value` (and `aux`) and returns its id (0 .. 2^31-1). */
  alloc(value: U, aux = 0): number {
    if (this.nFree === 0) this.grow();
    const id = this.free[--this.nFree];
    this.data[id] = value;
    this.aux[id] = aux;
    this.live[id] = 1;
    this.size++;
    return id;
  }

  /** The aux number of pending `id` (0 when it is not pending). */
  auxOf(id: number): number {
    return id < this.live.length && this.live[id] !== 0 ? this.aux[id] : 0;
  }

  /** Removes and returns the value of `id`, or MISSING when it is not pending. */
  take(id: number): U | typeof MISSING {
    if (id >= this.live.length || this.live[id] === 0) return MISSING;
    const v = this.data[id] as U;
    this.data[id] = undefined;
    this.live[id] = 0;
    this.free[this.nFree++] = id;
    this.size--;
    return v;
  }

  /** Removes every pending value, calling `fn` on each (used when an endpoint fails). */
  drain(fn: (value: U) => void): void {
    for (let id = 0; id < this.live.length; id++) {
      if (this.live[id] === 0) continue;
      const v = this.take(id);
      if (v !== MISSING) fn(v);
    }
  }

  private grow(): void {
    const old = this.live.length;
    const cap = old * 2;
    if (cap > 0x80000000) throw new RangeError('more than 2^31 pending calls');
    const live = new Uint8Array(cap);
    live.set(this.live);
    this.live = live;
    const aux = new Int32Array(cap);
    aux.set(this.aux);
    this.aux = aux;
    this.data = this.data.concat(new Array<U | undefined>(old).fill(undefined));
    const free = new Int32Array(cap);
    for (let i = 0; i < old; i++) free[i] = cap - 1 - i;
    this.free = free;
    this.nFree = old;
  }
}
