/**
 * A doorbell on two Int32 words of a shared segment: a sleeper count and a bell. A waiter
 * registers itself in the count, re-checks its condition and sleeps on the bell's futex; a
 * producer, after publishing, rings only while the count is nonzero, so a busy hot path pays
 * one load and no system call. Works between threads and between processes (the futex is
 * keyed by the shared page, not by the mapping).
 */
import { native, type FutexResult } from '../native/binding.js';
import { loadAcquire } from './acquire.js';
import { fenceRemoteThreads } from './remote-fence.js';
import type { Doorbell } from './wait.js';

/**
 * Wakes the sleepers on (words[sleeping], words[bell]), if any: call after publishing with
 * Atomics.store (or another atomic write), whose full barrier orders this load after it, or
 * with a plain store toward a bell made with `fences` (whose sleepers order it for you).
 */
export function ringBell(words: Int32Array, sleeping: number, bell: number): void {
  if (loadAcquire(words, sleeping) !== 0) {
    Atomics.add(words, bell, 1);
    native.futexWake(words, bell);
  }
}

/** Sleep slice of a fencing bell whose barrier failed: a plain-store publisher may go unseen. */
const UNFENCED_SLEEP_MS = 1;

/** The sleeping side of ringBell, as a Doorbell of the one waiting loop (host/wait.ts). */
export class FutexBell implements Doorbell {
  /**
   * `fences`: after registering as a sleeper, make every registered process's running threads
   * execute a full barrier (host/remote-fence.ts) before looking again, so that producers may
   * publish with plain stores. Only for bells whose producers rely on it.
   */
  constructor(
    private readonly words: Int32Array,
    private readonly sleeping: number,
    private readonly bell: number,
    private readonly fences = false,
  ) {}

  /** How the sleep ended: the futex's answer, or 'ready' when the look after registering found work. */
  sleepSync(ms: number, ready: () => boolean): FutexResult | 'ready' {
    const w = this.words;
    Atomics.add(w, this.sleeping, 1);
    try {
      const slice = this.slice(ms);
      const seen = Atomics.load(w, this.bell);
      return ready() ? 'ready' : native.futexWait(w, this.bell, seen, slice);
    } finally {
      Atomics.sub(w, this.sleeping, 1);
    }
  }

  async sleepAsync(ms: number, ready: () => boolean): Promise<FutexResult | 'ready'> {
    const w = this.words;
    Atomics.add(w, this.sleeping, 1);
    try {
      const slice = this.slice(ms);
      const seen = Atomics.load(w, this.bell);
      return ready() ? 'ready' : await native.futexWaitAsync(w, this.bell, seen, slice);
    } finally {
      Atomics.sub(w, this.sleeping, 1);
    }
  }

  /** The sleep to take, once registered: fenced first where producers rely on it, else short. */
  private slice(ms: number): number {
    return this.fences && !fenceRemoteThreads() ? Math.min(ms, UNFENCED_SLEEP_MS) : ms;
  }
}
