/**
 * The device's staging array of native commands: posts write 16 words here and the batch is
 * handed to libfabric with one native call (`submit`) from poll()/wait(), when it fills, or at
 * the latest in a microtask after the posting code returns: a rank that posts and then stops
 * polling (it only awaits something else) still gets its operations onto the fabric.
 * Commands the provider cannot take yet (EAGAIN) stay, in order, for the next flush.
 */
import type { OfiEndpoint } from '../../native/binding.js';
import { CMD_CTX, CMD_RESULT, CMD_WORDS } from './layout.js';

export class CommandBuffer {
  words: Uint32Array;
  count = 0;
  private capacity: number;

  constructor(
    private readonly ep: OfiEndpoint,
    capacity = 256,
    /** Called when the first command of a batch is staged (to schedule a flush). */
    private readonly onFirst: () => void = () => {},
  ) {
    this.capacity = capacity;
    this.words = new Uint32Array(capacity * CMD_WORDS);
    ep.bindCommands(this.words);
  }

  /** Word index of a fresh command slot (zeroed result word). */
  stage(): number {
    if (this.count === this.capacity) this.grow();
    if (this.count === 0) this.onFirst();
    const at = this.count++ * CMD_WORDS;
    this.words[at + CMD_RESULT] = 0;
    return at;
  }

  /**
   * Submits everything staged. `onFailed(ctxLo, ctxHi, errno)` is told about each command the
   * provider rejected outright (not EAGAIN); those are dropped. Returns true when all went.
   */
  flush(onFailed: (ctxLo: number, ctxHi: number, errno: number) => void): boolean {
    let start = 0;
    while (start < this.count) {
      const rest = this.count - start;
      if (start > 0) this.words.copyWithin(0, start * CMD_WORDS, this.count * CMD_WORDS);
      this.count = rest;
      start = 0;
      const accepted = this.ep.submit(rest);
      if (accepted === rest) {
        this.count = 0;
        return true;
      }
      const at = accepted * CMD_WORDS;
      const rc = this.words[at + CMD_RESULT] | 0;
      if (rc === 0) {
        // EAGAIN: keep the rest, in order.
        this.words.copyWithin(0, at, this.count * CMD_WORDS);
        this.count -= accepted;
        return false;
      }
      onFailed(this.words[at + CMD_CTX], this.words[at + CMD_CTX + 1], rc);
      start = accepted + 1;
    }
    this.count = 0;
    return true;
  }

  /** Drops staged commands whose context high word satisfies `drop` (a QP that failed). */
  remove(drop: (ctxHi: number) => boolean): void {
    let keep = 0;
    for (let i = 0; i < this.count; i++) {
      const at = i * CMD_WORDS;
      if (drop(this.words[at + CMD_CTX + 1])) continue;
      if (keep !== i) this.words.copyWithin(keep * CMD_WORDS, at, at + CMD_WORDS);
      keep++;
    }
    this.count = keep;
  }

  private grow(): void {
    this.capacity *= 2;
    const next = new Uint32Array(this.capacity * CMD_WORDS);
    next.set(this.words);
    this.words = next;
    this.ep.bindCommands(next);
  }
}
