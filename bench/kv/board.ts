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

/**
 * Daemon (and direct-client) loop counters. The batch of a loop is what the memo counts: the
 * copyrpc responses the loop's CQ polls delivered (its "CQE batch"), over every loop that
 * polled a CQ, empty ones included.
 */
export const D = {
  LOOPS: 0,
  /** Responses over all CQ loops. */
  RESPONSES: 2,
  /** Histogram of responses per CQ loop: 0 (empty loops), 1, 2-10, 11-100, >100. */
  B0: 3,
  B1: 4,
  B2_10: 5,
  B11_100: 6,
  B100: 7,
  /** Sum and count of outstanding-call samples. */
  OUT_SUM: 8,
  OUT_N: 9,
  /** Requests served from this daemon's shard. */
  SERVED: 10,
  /** Calls parked in the backlog (RingFull / credit / Flux full). */
  BACKLOGGED: 11,
  /** Loops that polled a CQ (a thread with copyrpc endpoints). */
  CQ_LOOPS: 12,
  /** Time series: count, then SERIES_MAX quads (ms since RUN, outstanding, batch avg, poll controller setting). */
  SERIES_N: 13,
  /** Sum over CQ loops of the poll controller's setting (extra polls, or hold us). */
  SETTING_SUM: 14,
  /**
   * Times the thread yielded the core (PollBackoff), copied from its backoff every 64 loops:
   * with more busy threads than cores, every thread yields once per turn, so yields per
   * request is the scheduler's turns per request (docs/benchkv.md).
   */
  YIELDS: 15,
  SERIES: 16,
} as const;
export const SERIES_MAX = 2048;
export const SERIES_WORDS = 4;
export const LOOP_WORDS = D.SERIES + SERIES_WORDS * SERIES_MAX;

/** Region `index` of a board of `words` per thread. */
export function region(sab: SharedArrayBuffer, words: number, index: number): Float64Array {
  return new Float64Array(sab, index * words * 8, words);
}

/** Adds one CQ loop: `batch` responses under a poll controller whose setting is `setting`. */
export function countBatch(d: Float64Array, batch: number, setting: number): void {
  d[D.CQ_LOOPS]++;
  d[D.SETTING_SUM] += setting;
  d[D.RESPONSES] += batch;
  if (batch === 0) d[D.B0]++;
  else if (batch === 1) d[D.B1]++;
  else if (batch <= 10) d[D.B2_10]++;
  else if (batch <= 100) d[D.B11_100]++;
  else d[D.B100]++;
}

/**
 * Samples the copyrpc calls in flight about once a millisecond (checked every 64 loops): their
 * average, and the time series (outstanding, batch average since the last sample, controller
 * setting) the plots show, where the memo saw the collapse happen in the first milliseconds.
 */
export class LoopSampler {
  private readonly t0 = performance.now();
  private next = this.t0 + 1;
  private lastResponses = 0;
  private lastLoops = 0;
  constructor(private readonly d: Float64Array) {}

  maybeSample(outstanding: () => number, setting: number): void {
    const now = performance.now();
    if (now < this.next) return;
    this.next = now + 1;
    const d = this.d;
    const out = outstanding();
    d[D.OUT_SUM] += out;
    d[D.OUT_N]++;
    const n = d[D.SERIES_N];
    if (n < SERIES_MAX) {
      const base = D.SERIES + SERIES_WORDS * n;
      const loops = d[D.CQ_LOOPS] - this.lastLoops;
      d[base] = now - this.t0;
      d[base + 1] = out;
      d[base + 2] = loops > 0 ? (d[D.RESPONSES] - this.lastResponses) / loops : 0;
      d[base + 3] = setting;
      d[D.SERIES_N] = n + 1;
    }
    this.lastResponses = d[D.RESPONSES];
    this.lastLoops = d[D.CQ_LOOPS];
  }
}
