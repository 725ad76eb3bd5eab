/**
 * A doorbell on two Int32 words of a shared segment: a sleeper count and a bell. A waiter
 * registers itself in the count, re-checks its condition and sleeps on the bell's futex; a
 * producer, after publishing, rings only while the count is nonzero, so a busy hot path pays
 * one load and no system call. Works between threads and between processes (the futex is
 * keyed by the shared page, not by the mapping).
 */
import { native } from '../native/binding.js';
import { loadAcquire } from './acquire.js';
import type { Doorbell } from './wait.js';

/**
 * Wakes the sleepers on (words[sleeping], words[bell]), if any: call after publishing with
 * Atomics.store (or another atomic write), whose full barrier orders this load after it.
 */
export function ringBell(words: Int32Array, sleeping: number, bell: number): void {
  if (loadAcquire(words, sleeping) !== 0) {
    Atomics.add(words, bell, 1);
    native.futexWake(words, bell);
  }
}

/** The sleeping side of ringBell, as a Doorbell of the one waiting loop (host/wait.ts). */
export class FutexBell implements Doorbell {
  constructor(
    private readonly words: Int32Array,
    private readonly sleeping: number,
    private readonly bell: number,
  ) {}

  sleepSync(ms: number, ready: () => boolean): void {
    const w = this.words;
    Atomics.add(w, this.sleeping, 1);
    try {
      const seen = Atomics.load(w, this.bell);
      if (!ready()) native.futexWait(w, this.bell, seen, ms);
    } finally {
      Atomics.sub(w, this.sleeping, 1);
    }
  }

  async sleepAsync(ms: number, ready: () => boolean): Promise<void> {
    const w = this.words;
    Atomics.add(w, this.sleeping, 1);
    try {
      const seen = Atomics.load(w, this.bell);
      if (!ready()) await native.futexWaitAsync(w, this.bell, seen, ms);
    } finally {
      Atomics.sub(w, this.sleeping, 1);
    }
  }
}
