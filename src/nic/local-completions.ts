/**
 * Completions an initiator generates for itself (signaled successes, errors), kept in
 * growable parallel arrays so the steady state allocates nothing.
 */
import type { WeftError } from '../errors.js';
import type { CompletionBatch } from './types.js';

export class LocalCompletions {
  private qpn = new Uint32Array(64);
  private opcode = new Uint8Array(64);
  private status = new Uint8Array(64);
  private len = new Uint32Array(64);
  private wrId = new Uint32Array(64);
  private errors: (WeftError | undefined)[] = new Array(64).fill(undefined);
  private head = 0;
  private tail = 0;

  get size(): number {
    return this.tail - this.head;
  }

  push(qpn: number, opcode: number, status: number, len: number, wrId: number, error?: WeftError): void {
    if (this.tail === this.qpn.length) this.compactOrGrow();
    const i = this.tail++;
    this.qpn[i] = qpn;
    this.opcode[i] = opcode;
    this.status[i] = status;
    this.len[i] = len;
    this.wrId[i] = wrId;
    this.errors[i] = error;
  }

  /** Moves up to `max` entries into `out` starting at `at`; returns how many. */
  drain(out: CompletionBatch, at: number, max: number): number {
    let n = 0;
    while (this.head < this.tail && n < max) {
      const i = this.head++;
      const o = at + n++;
      out.qpn[o] = this.qpn[i];
      out.opcode[o] = this.opcode[i];
      out.status[o] = this.status[i];
      out.imm[o] = 0;
      out.byteLength[o] = this.len[i];
      out.wrId[o] = this.wrId[i];
      out.errors[o] = this.errors[i];
      this.errors[i] = undefined;
    }
    if (this.head === this.tail) this.head = this.tail = 0;
    return n;
  }

  private compactOrGrow(): void {
    const live = this.tail - this.head;
    if (this.head > 0 && live < this.qpn.length / 2) {
      this.qpn.copyWithin(0, this.head, this.tail);
      this.opcode.copyWithin(0, this.head, this.tail);
      this.status.copyWithin(0, this.head, this.tail);
      this.len.copyWithin(0, this.head, this.tail);
      this.wrId.copyWithin(0, this.head, this.tail);
      this.errors.copyWithin(0, this.head, this.tail);
    } else {
      const cap = this.qpn.length * 2;
      const grow = <T extends Uint32Array | Uint8Array>(a: T, make: (n: number) => T): T => {
        const b = make(cap);
        b.set(a.subarray(this.head, this.tail));
        return b;
      };
      this.qpn = grow(this.qpn, (n) => new Uint32Array(n));
      this.opcode = grow(this.opcode, (n) => new Uint8Array(n));
      this.status = grow(this.status, (n) => new Uint8Array(n));
      this.len = grow(this.len, (n) => new Uint32Array(n));
      this.wrId = grow(this.wrId, (n) => new Uint32Array(n));
      const e = this.errors.slice(this.head, this.tail);
      this.errors = e.concat(new Array(cap - e.length).fill(undefined));
    }
    this.tail = live;
    this.head = 0;
  }
}
