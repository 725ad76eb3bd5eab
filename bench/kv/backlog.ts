/**
 * Calls a daemon could not hand on yet (copyrpc RingFull / InsufficientCredit after the
 * notes' retries, Flux at maxInflight), kept in order with their bytes copied: the memo's
 * call_backlog. A ring over typed arrays that doubles when full (rare: its size is bounded by
 * the requests in flight in the job), so steady state allocates nothing.
 */
import { REQUEST_BYTES } from './messages.js';

export class Backlog {
  private cap = 64;
  private bytes = new Uint8Array(this.cap * REQUEST_BYTES);
  private target = new Int32Array(this.cap);
  private tokens = new Float64Array(this.cap);
  private head = 0;
  size = 0;
  /** Views of each entry's bytes, made once per capacity. */
  private views: Uint8Array[] = this.makeViews();

  private makeViews(): Uint8Array[] {
    return Array.from({ length: this.cap }, (_, i) => this.bytes.subarray(i * REQUEST_BYTES, (i + 1) * REQUEST_BYTES));
  }

  push(target: number, payload: Uint8Array, token: number): void {
    if (this.size === this.cap) this.grow();
    const i = (this.head + this.size) % this.cap;
    const v = this.views[i];
    for (let b = 0; b < REQUEST_BYTES; b++) v[b] = payload[b];
    this.target[i] = target;
    this.tokens[i] = token;
    this.size++;
  }

  /** Hands entries to `send` in order while it accepts them (returns true); returns how many went. */
  drain(send: (target: number, payload: Uint8Array, token: number) => boolean): number {
    let n = 0;
    while (this.size > 0) {
      const i = this.head;
      if (!send(this.target[i], this.views[i], this.tokens[i])) break;
      this.head = (i + 1) % this.cap;
      this.size--;
      n++;
    }
    return n;
  }

  private grow(): void {
    const cap = this.cap * 2;
    const bytes = new Uint8Array(cap * REQUEST_BYTES);
    const target = new Int32Array(cap);
    const tokens = new Float64Array(cap);
    for (let k = 0; k < this.size; k++) {
      const i = (this.head + k) % this.cap;
      bytes.set(this.views[i], k * REQUEST_BYTES);
      target[k] = this.target[i];
      tokens[k] = this.tokens[i];
    }
    this.cap = cap;
    this.bytes = bytes;
    this.target = target;
    this.tokens = tokens;
    this.head = 0;
    this.views = this.makeViews();
  }
}
