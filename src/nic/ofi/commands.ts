/**
 * The device's staging array of native commands: posts write 16 words here and the batch is
 * handed to libfabric with one native call (`submit`) from poll()/wait(), when it fills, or at
 * the latest in a microtask after the posting code returns: a rank that posts and then stops
 * polling (it only awaits something else) still gets its operations onto the fabric.
 * Commands the provider cannot take yet (EAGAIN) stay, in order per peer, for the next flush.
 */
import type { OfiEndpoint } from '../../native/binding.js';
import { CMD_ADDR, CMD_CTX, CMD_RESULT, CMD_WORDS } from './layout.js';

export class CommandBuffer {
  words: Uint32Array;
  count = 0;
  /** Where commands held back by EAGAIN wait during a flush. */
  private spare: Uint32Array;
  /** Fabric addresses that answered EAGAIN in the flush under way. */
  private readonly blocked: number[] = [];
  private capacity: number;

  constructor(
    private readonly ep: OfiEndpoint,
    capacity = 256,
    /** Called when the first command of a batch is staged (to schedule a flush). */
    private readonly onFirst: () => void = () => {},
  ) {
    this.capacity = capacity;
    this.words = new Uint32Array(capacity * CMD_WORDS);
    this.spare = new Uint32Array(capacity * CMD_WORDS);
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
   *
   * A command the provider cannot take yet (EAGAIN) keeps its place, and so does every later
   * command toward the same fabric address (per-peer order is kept); commands toward other
   * peers go on. rxm answers EAGAIN for as long as the connection to a dead peer is down: one
   * dead peer must not hold back the operations, and the liveness probes, toward every other.
   */
  flush(onFailed: (ctxLo: number, ctxHi: number, errno: number) => void): boolean {
    let deferred = 0;
    let nBlocked = 0;
    const w = this.words;
    while (this.count > 0) {
      const n = this.count;
      const accepted = this.ep.submit(n);
      if (accepted === n) break;
      const at = accepted * CMD_WORDS;
      const rc = w[at + CMD_RESULT] | 0;
      if (rc !== 0) {
        onFailed(w[at + CMD_CTX], w[at + CMD_CTX + 1], rc);
        w.copyWithin(0, at + CMD_WORDS, n * CMD_WORDS);
        this.count = n - accepted - 1;
        continue;
      }
      // EAGAIN: set aside this command and every later one toward a blocked address.
      if (nBlocked === this.blocked.length) this.blocked.push(0);
      this.blocked[nBlocked++] = w[at + CMD_ADDR];
      let keep = 0;
      for (let i = accepted; i < n; i++) {
        const c = i * CMD_WORDS;
        if (this.isBlocked(w[c + CMD_ADDR], nBlocked)) {
          this.spare.set(w.subarray(c, c + CMD_WORDS), deferred * CMD_WORDS);
          deferred++;
        } else {
          if (keep !== i) w.copyWithin(keep * CMD_WORDS, c, c + CMD_WORDS);
          keep++;
        }
      }
      this.count = keep;
    }
    this.count = deferred;
    if (deferred === 0) return true;
    w.set(this.spare.subarray(0, deferred * CMD_WORDS), 0);
    return false;
  }

  private isBlocked(addr: number, n: number): boolean {
    for (let k = 0; k < n; k++) if (this.blocked[k] === addr) return true;
    return false;
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
    this.spare = new Uint32Array(this.capacity * CMD_WORDS);
    this.ep.bindCommands(next);
  }
}
