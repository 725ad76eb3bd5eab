/**
 * The device's staging array of native commands: posts write 16 words here and the batch is
 * handed to libfabric with one native call (`submit`) from poll()/wait(), when it fills, or at
 * the latest in a microtask after the posting code returns: a rank that posts and then stops
 * polling (it only awaits something else) still gets its operations onto the fabric.
 *
 * Commands the provider cannot take yet (EAGAIN) are held, in order, for a later flush, with
 * every later command of the same QP behind them; the other QPs' commands go on. Before, the
 * first refused command held back all the rest: a probe toward a peer on another host that
 * had closed its device was refused for good (tcp;ofi_rxm redials the closed port on each
 * post), and the two live ranks of a 3-host job, exchanging only with each other, stopped
 * within a second and timed out. Held commands that a retry could not move wait a pause that
 * doubles up to RETRY_MAX_MS: every retry toward such a peer is a connect() in the provider,
 * 120,000 of them in 5 s without the pause.
 */
import type { OfiEndpoint } from '../../native/binding.js';
import { CMD_CTX, CMD_RESULT, CMD_WORDS } from './layout.js';

/** The longest pause between retries of a QP whose commands the provider keeps refusing. */
const RETRY_MAX_MS = 20;

/** The QP a command belongs to: its context's high word without the kind bits (layout ctxHi). */
function qpKey(ctxHi: number): number {
  return ctxHi & ~(3 << 10);
}

export class CommandBuffer {
  words: Uint32Array;
  /** Commands staged in `words`, not yet offered to the provider. */
  count = 0;
  private capacity: number;
  /** Commands the provider refused (EAGAIN), in order, with their QPs' later ones. */
  private held = new Uint32Array(0);
  private heldCount = 0;
  /** The QPs of the held commands. */
  private readonly heldQps = new Set<number>();
  /** Held commands are offered again from this time on (performance.now()). */
  private retryAt = 0;
  private retryDelayMs = 0;

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

  /** Commands not yet taken by the provider (staged and held). */
  get pending(): number {
    return this.count + this.heldCount;
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
   * Submits what it can. `onFailed(ctxLo, ctxHi, errno)` is told about each command the
   * provider rejected outright (not EAGAIN); those are dropped. Returns true when all went.
   */
  flush(onFailed: (ctxLo: number, ctxHi: number, errno: number) => void): boolean {
    let retried = false;
    if (this.heldCount > 0) {
      if (performance.now() >= this.retryAt) {
        this.unhold();
        retried = true;
      } else {
        // Not yet: a held QP's new commands wait behind its held ones.
        this.holdHeldQps();
      }
    }
    const heldBefore = this.heldCount;
    // Whether the provider took any held command back (they lead the first submit).
    let moved = false;
    let first = true;
    while (this.count > 0) {
      const rest = this.count;
      const accepted = this.ep.submit(rest);
      if (first && retried && accepted > 0) moved = true;
      first = false;
      if (accepted === rest) {
        this.count = 0;
        break;
      }
      const at = accepted * CMD_WORDS;
      const rc = this.words[at + CMD_RESULT] | 0;
      if (rc !== 0) {
        onFailed(this.words[at + CMD_CTX], this.words[at + CMD_CTX + 1], rc);
        this.words.copyWithin(0, at + CMD_WORDS, rest * CMD_WORDS);
        this.count = rest - accepted - 1;
        continue;
      }
      // EAGAIN: hold this command and its QP's later ones; the rest go on.
      this.words.copyWithin(0, at, rest * CMD_WORDS);
      this.count = rest - accepted;
      this.heldQps.add(qpKey(this.words[CMD_CTX + 1]));
      this.holdHeldQps();
    }
    if (this.heldCount === 0) {
      this.retryDelayMs = 0;
      return true;
    }
    // Held commands are offered again at the next flush while the provider keeps taking some
    // (a queue that was full drains as completions come); after a retry that moved nothing,
    // a pause of 0.05 ms, twice as long after each such retry in a row.
    if (moved) this.retryDelayMs = 0;
    else if (retried) this.retryDelayMs = Math.min(RETRY_MAX_MS, Math.max(0.05, this.retryDelayMs * 2));
    if (retried || this.heldCount > heldBefore) this.retryAt = performance.now() + this.retryDelayMs;
    return false;
  }

  /** Drops staged and held commands whose context high word satisfies `drop` (a QP that failed). */
  remove(drop: (ctxHi: number) => boolean): void {
    this.count = compact(this.words, this.count, drop);
    if (this.heldCount > 0) {
      this.heldCount = compact(this.held, this.heldCount, drop);
      this.heldQps.clear();
      for (let i = 0; i < this.heldCount; i++) this.heldQps.add(qpKey(this.held[i * CMD_WORDS + CMD_CTX + 1]));
    }
  }

  /**
   * Moves the staged commands of the held QPs to the held ones, in order. (No callback: this
   * runs at every flush while a QP is held, and a poll allocates nothing.)
   */
  private holdHeldQps(): void {
    let keep = 0;
    for (let i = 0; i < this.count; i++) {
      const at = i * CMD_WORDS;
      if (this.heldQps.has(qpKey(this.words[at + CMD_CTX + 1]))) {
        if ((this.heldCount + 1) * CMD_WORDS > this.held.length) {
          const next = new Uint32Array(Math.max(16, this.heldCount * 2) * CMD_WORDS);
          next.set(this.held.subarray(0, this.heldCount * CMD_WORDS));
          this.held = next;
        }
        this.held.set(this.words.subarray(at, at + CMD_WORDS), this.heldCount++ * CMD_WORDS);
      } else {
        if (keep !== i) this.words.copyWithin(keep * CMD_WORDS, at, at + CMD_WORDS);
        keep++;
      }
    }
    this.count = keep;
  }

  /** Puts the held commands back in front of the staged ones (they were first). */
  private unhold(): void {
    const n = this.heldCount;
    while (this.count + n > this.capacity) this.grow();
    this.words.copyWithin(n * CMD_WORDS, 0, this.count * CMD_WORDS);
    this.words.set(this.held.subarray(0, n * CMD_WORDS), 0);
    this.count += n;
    this.heldCount = 0;
    this.heldQps.clear();
  }

  private grow(): void {
    this.capacity *= 2;
    const next = new Uint32Array(this.capacity * CMD_WORDS);
    next.set(this.words);
    this.words = next;
    this.ep.bindCommands(next);
  }
}

/** Keeps the commands of `words[0, count)` that `drop` spares, in order; returns how many. */
function compact(words: Uint32Array, count: number, drop: (ctxHi: number) => boolean): number {
  let keep = 0;
  for (let i = 0; i < count; i++) {
    const at = i * CMD_WORDS;
    if (drop(words[at + CMD_CTX + 1])) continue;
    if (keep !== i) words.copyWithin(keep * CMD_WORDS, at, at + CMD_WORDS);
    keep++;
  }
  return keep;
}
