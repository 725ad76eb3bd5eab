/**
 * What `weft bench transfer` (index.ts) tells its ranks (engine-rank.ts, nic-worker.ts) and what
 * they send back: one trial of one (system, provider, op) over every block size.
 */

/** argv of both kinds of ranks, as JSON. */
export interface TrialPlan {
  op: 'read' | 'write';
  /** Block sizes, bytes. */
  blocks: number[];
  /** Requests per batch. */
  batch: number;
  /** Batches in flight. */
  inflight: number;
  /** Seconds measured per block size (after the warm-up of warmupSeconds). */
  seconds: number;
  /** weft only: 'async' (await waitBatch) or 'sync' (waitBatchSync). */
  wait: 'async' | 'sync';
  /** weft only: the engine's slice size (undefined: its default). */
  sliceBytes?: number;
}

/** One block size of one trial. */
export interface TrialPoint {
  block_bytes: number;
  gbps: number;
  ops_per_s: number;
  /** Per batch of `batch` requests: submit to last completion. */
  avg_us: number;
  p99_us: number;
  batches: number;
}

/** Engine rank 0 prints each point as this prefix and one JSON object. */
export const POINT_PREFIX = 'WEFT_TRANSFER_POINT ';

/**
 * Seconds of warm-up before a point is measured, for both systems: a tenth of the point, and
 * at least half a second for points of a second or more. The engine's JavaScript needs that
 * long to reach V8's optimizing tier; with 0.1 s, points of 1 s measured part of it in the
 * baseline tiers (64 KiB over shm: 0.80-0.89x of the NIC stream with 1 s points, 0.90-0.91x with
 * 8 s points). Quick (smoke) points keep a warm-up of half their length at most.
 */
export function warmupSeconds(seconds: number): number {
  return Math.max(seconds / 10, Math.min(0.5, seconds / 2));
}

/** Slots of `block` bytes on each side: as many as requests in flight, at most 64 MiB (2 at least). */
export function slotsFor(block: number, batch: number, inflight: number): number {
  return Math.max(2, Math.min(batch * inflight, Math.floor((64 << 20) / block)));
}

/** Summary of a trial's batch latencies (µs) and totals. */
export function pointOf(block: number, batchSize: number, seconds: number, latUs: number[]): TrialPoint {
  const n = latUs.length;
  const sorted = Float64Array.from(latUs).sort();
  const ops = (n * batchSize) / seconds;
  return {
    block_bytes: block,
    gbps: (ops * block) / 1e9,
    ops_per_s: ops,
    avg_us: n ? latUs.reduce((a, b) => a + b, 0) / n : NaN,
    p99_us: n ? sorted[Math.min(n - 1, Math.floor(n * 0.99))] : NaN,
    batches: n,
  };
}
