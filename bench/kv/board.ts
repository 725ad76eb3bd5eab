/**
 * What a rank's threads share with its main thread: a control word array (run / stop flags)
 * and one Float64Array region of counters per thread, written by the thread, read by main at
 * epoch boundaries (plain 8-byte stores: a reader sees an old or a new count, never a torn one).
 */
import { BUCKETS } from './histogram.js';

/** Control words (Int32Array). */
export const CTL = {
  /** 1 once every thread is connected and main says go. */
  RUN: 0,
  /** 1: clients stop issuing and drain. */
  CLIENTS_STOP: 1,
  /** 1: daemons leave their loops (every rank's clients drained). */
  DAEMONS_STOP: 2,
  /** 1: clients record RTT samples (the measured runs). */
  RECORD: 3,
  WORDS: 4,
} as const;

/** Client counters. */
export const C = {
  OPS: 0,
  LOCAL: 1,
  REMOTE: 2,
  MISMATCH: 3,
  /** Set to 1 once the client has drained after CLIENTS_STOP. */
  DRAINED: 4,
  HIST: 8,
} as const;
export const CLIENT_WORDS = C.HIST + BUCKETS;

/** Daemon (and direct-client) loop counters: loops, CQE batches, outstanding calls. */
export const D = {
  LOOPS: 0,
  /** Loops whose CQ poll returned nothing. */
  EMPTY: 1,
  /** Completions over all loops. */
  CQES: 2,
  /** Histogram of extra completions per non-empty loop: 0, 1, 2-10, 11-100, >100. */
  EXTRA0: 3,
  EXTRA1: 4,
  EXTRA2_10: 5,
  EXTRA11_100: 6,
  EXTRA100: 7,
  /** Sum and count of outstanding-call samples. */
  OUT_SUM: 8,
  OUT_N: 9,
  /** Requests served from this daemon's shard. */
  SERVED: 10,
  /** Calls parked in the backlog (RingFull / credit / Flux full). */
  BACKLOGGED: 11,
  /** Loops that polled a CQ (a thread with copyrpc endpoints). */
  CQ_LOOPS: 12,
  /** Time series: count, then SERIES_MAX triples (ms since RUN, outstanding, CQE batch avg). */
  SERIES_N: 13,
  SERIES: 16,
} as const;
export const SERIES_MAX = 2048;
export const LOOP_WORDS = D.SERIES + 3 * SERIES_MAX;

/** Region `index` of a board of `words` per thread. */
export function region(sab: SharedArrayBuffer, words: number, index: number): Float64Array {
  return new Float64Array(sab, index * words * 8, words);
}

/** Adds one loop's CQ poll result to the batch counters. */
export function countBatch(d: Float64Array, k: number): void {
  d[D.CQ_LOOPS]++;
  if (k === 0) {
    d[D.EMPTY]++;
    return;
  }
  d[D.CQES] += k;
  const extra = k - 1;
  if (extra === 0) d[D.EXTRA0]++;
  else if (extra === 1) d[D.EXTRA1]++;
  else if (extra <= 10) d[D.EXTRA2_10]++;
  else if (extra <= 100) d[D.EXTRA11_100]++;
  else d[D.EXTRA100]++;
}

/**
 * Samples the copyrpc calls in flight about once a millisecond (checked every 64 loops): their
 * average, and the time series (outstanding, CQE batch average since the last sample) the
 * plots show, where the memo saw the collapse happen in the first milliseconds.
 */
export class LoopSampler {
  private readonly t0 = performance.now();
  private next = this.t0 + 1;
  private lastCqes = 0;
  private lastBusy = 0;
  constructor(private readonly d: Float64Array) {}

  maybeSample(outstanding: () => number): void {
    const now = performance.now();
    if (now < this.next) return;
    this.next = now + 1;
    const d = this.d;
    const out = outstanding();
    d[D.OUT_SUM] += out;
    d[D.OUT_N]++;
    const busyLoops = d[D.CQ_LOOPS] - d[D.EMPTY];
    const n = d[D.SERIES_N];
    if (n < SERIES_MAX) {
      const base = D.SERIES + 3 * n;
      const busy = busyLoops - this.lastBusy;
      d[base] = now - this.t0;
      d[base + 1] = out;
      d[base + 2] = busy > 0 ? (d[D.CQES] - this.lastCqes) / busy : 0;
      d[D.SERIES_N] = n + 1;
    }
    this.lastCqes = d[D.CQES];
    this.lastBusy = busyLoops;
  }
}
