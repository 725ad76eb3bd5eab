/**
 * The workload of one client thread, generated before the run from a seed (rank, client,
 * --seed): `length` entries of (target rank, key, read?) that the client cycles through, so
 * drawing random numbers costs nothing during the measurement. Keys are uniform or zipfian
 * (theta configurable: 0.99 as YCSB, 1.0 as the notes' benchmark); the target rank is uniform
 * over all ranks, or this rank with probability `locality` and uniform over the others
 * otherwise. With `partition` (for --verify), client g of G only uses keys k with k % G == g.
 */

import { prng } from '../../harness/data.js';

export type Distribution = { kind: 'uniform' } | { kind: 'zipfian'; theta: number };

export interface WorkloadSpec {
  keys: number;
  readRatio: number;
  distribution: Distribution;
  ranks: number;
  rank: number;
  /** Probability of this rank as the target; undefined: uniform over all ranks. */
  locality?: number;
  seed: number;
  /** Client's global index and the number of clients, when keys are partitioned (--verify). */
  partition?: { index: number; count: number };
  length: number;
}

export interface Workload {
  target: Uint32Array;
  key: Uint32Array;
  read: Uint8Array;
}

/** Uniform floats in [0, 1) from the harness's seeded xorshift32 (the tests' generator too). */
export function uniformRandom(seed: number): () => number {
  const next = prng(seed);
  return () => next() / 4294967296;
}

/** Largest key range a zipfian draw tabulates (8 bytes of CDF per key). */
export const ZIPF_MAX_KEYS = 1 << 24;

/**
 * Zipfian ranks in [0, n): P(i) proportional to 1 / (i + 1)^theta, by inverse CDF on a table
 * (exact for every theta, 1.0 included, where YCSB's closed form divides by zero). Rank i is
 * then scrambled to a key (YCSB's ScrambledZipfian), so the hot keys spread over shards.
 */
export function zipfian(n: number, theta: number, random: () => number): () => number {
  if (n > ZIPF_MAX_KEYS) throw new Error(`zipfian keys are tabulated: at most ${ZIPF_MAX_KEYS} keys, got ${n}`);
  const cdf = new Float64Array(n);
  let sum = 0;
  for (let i = 0; i < n; i++) {
    sum += 1 / Math.pow(i + 1, theta);
    cdf[i] = sum;
  }
  return () => {
    const u = random() * sum;
    let lo = 0;
    let hi = n - 1;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (cdf[mid] < u) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
}

/** FNV-1a of a rank, modulo n: YCSB's scramble of zipfian ranks into keys. */
export function scramble(i: number, n: number): number {
  let h = 0x811c9dc5;
  for (let b = 0; b < 4; b++) {
    h ^= (i >>> (8 * b)) & 0xff;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h % n;
}

export function generate(spec: WorkloadSpec): Workload {
  const random = uniformRandom(spec.seed);
  const part = spec.partition;
  // With a partition the client draws an index into its own keys: k = index + count * j.
  const span = part ? Math.max(1, Math.floor((spec.keys - part.index + part.count - 1) / part.count)) : spec.keys;
  const draw = spec.distribution.kind === 'zipfian' ? zipfian(span, spec.distribution.theta, random) : () => Math.floor(random() * span);
  const zipf = spec.distribution.kind === 'zipfian';
  const w: Workload = { target: new Uint32Array(spec.length), key: new Uint32Array(spec.length), read: new Uint8Array(spec.length) };
  for (let i = 0; i < spec.length; i++) {
    const j = zipf ? scramble(draw(), span) : draw();
    w.key[i] = part ? part.index + part.count * j : j;
    w.read[i] = random() < spec.readRatio ? 1 : 0;
    w.target[i] = pickRank(spec, random);
  }
  return w;
}

function pickRank(spec: WorkloadSpec, random: () => number): number {
  if (spec.ranks === 1) return 0;
  if (spec.locality === undefined) return Math.floor(random() * spec.ranks);
  if (random() < spec.locality) return spec.rank;
  const other = Math.floor(random() * (spec.ranks - 1));
  return other >= spec.rank ? other + 1 : other;
}
