/**
 * An HDR-style latency histogram (log-linear buckets: 2^SUB sub-buckets per power of two,
 * so every value is kept within 1/2^SUB of its size) as ONE flat Float64Array of counts.
 * A flat array is what weft's allreduce sums: the histograms of every client of every rank
 * merge with one collective, which an object-based histogram library cannot do.
 */
export const SUB_BITS = 5;
const SUB = 1 << SUB_BITS;
/** Values up to 2^MAX_EXP units (ns here: about 69 s). */
const MAX_EXP = 36;
export const BUCKETS = (MAX_EXP - SUB_BITS + 1) * SUB + SUB;

/** Bucket of value v >= 0 (integers). */
export function bucketOf(v: number): number {
  if (v < SUB) return v < 0 ? 0 : Math.floor(v);
  const e = Math.min(Math.floor(Math.log2(v)), MAX_EXP);
  const sub = Math.min(Math.floor(v / 2 ** (e - SUB_BITS)) - SUB, SUB - 1);
  return SUB + (e - SUB_BITS) * SUB + sub;
}

/** The value a bucket stands for (its middle). */
export function valueOf(b: number): number {
  if (b < SUB) return b;
  const e = Math.floor((b - SUB) / SUB) + SUB_BITS;
  const sub = (b - SUB) % SUB;
  const w = 2 ** (e - SUB_BITS);
  return (SUB + sub) * w + w / 2;
}

export function record(counts: Float64Array, v: number): void {
  counts[bucketOf(v)]++;
}

/** The q-quantile (0..1) of the recorded values; NaN when empty. */
export function quantile(counts: Float64Array, q: number): number {
  let total = 0;
  for (let i = 0; i < counts.length; i++) total += counts[i];
  if (total === 0) return NaN;
  const want = Math.max(1, Math.ceil(q * total));
  let seen = 0;
  for (let i = 0; i < counts.length; i++) {
    seen += counts[i];
    if (seen >= want) return valueOf(i);
  }
  return valueOf(counts.length - 1);
}
