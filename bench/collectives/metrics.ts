/**
 * What `weft bench collectives` measures and how it is reported, shared by weft's side and the
 * peer harnesses (bench/peers/): the operations, nccl-tests' definition of a size per op, the
 * iteration budget, and algorithm and bus bandwidth as nccl-tests' PERFORMANCE.md defines
 * them. Rows from every system carry the same fields, so they join on (op, np, bytes).
 */

export const COLLECTIVE_OPS = ['allreduce', 'broadcast', 'allgather', 'reduce_scatter', 'barrier'] as const;
export type CollectiveOp = (typeof COLLECTIVE_OPS)[number];

export function isCollectiveOp(s: string): s is CollectiveOp {
  return (COLLECTIVE_OPS as readonly string[]).includes(s);
}

/** The provider of the link-floor rows (system 'floor'; link-floor.ts measures them, plot.ts draws them apart). */
export const LINK_FLOOR = 'tcp-link';

/** Element type of every sweep: float32, summed. */
export const ELEMENT_BYTES = 4;

/** One measured (system, op, np, provider, size), as printed in JSON lines. */
export interface CollectiveRow {
  /** 'weft', 'gloo', 'openmpi'. */
  system: string;
  op: CollectiveOp;
  np: number;
  /** Transport: weft's provider ('shm', 'ofi:tcp', ...), Gloo's 'tcp', Open MPI's BTL ('sm', 'tcp'). */
  provider: string;
  /** nccl-tests size (see `caseBytes`); 0 for barrier. */
  bytes: number;
  iters: number;
  /** Median over iterations of the per-iteration maximum over ranks. */
  median_us: number;
  min_us: number;
  p90_us: number;
  /** Which entry point ran it, e.g. "MPI_Allreduce(MPI_FLOAT, MPI_SUM)". */
  impl?: string;
}

/** A row with its bandwidths (GB/s, 1e9 bytes/s; null for barrier). */
export interface CollectiveResult extends CollectiveRow {
  algbw_gbps: number | null;
  busbw_gbps: number | null;
}

/**
 * Buffer sizes of one op at a requested size, as nccl-tests counts them: `bytes` is the
 * per-rank buffer total (allreduce, broadcast: the buffer; allgather: the receive buffer;
 * reduce_scatter: the send buffer) rounded down to whole float32 elements per rank, at least
 * one. The harnesses apply the same rule, so their reported `bytes` equal `caseBytes(...)`.
 */
export interface CaseLayout {
  bytes: number;
  /** float32 elements each rank sends (contributes). */
  sendElems: number;
  /** float32 elements each rank receives. */
  recvElems: number;
}

export function caseLayout(op: CollectiveOp, requestedBytes: number, np: number): CaseLayout {
  if (op === 'barrier') return { bytes: 0, sendElems: 0, recvElems: 0 };
  if (op === 'allreduce' || op === 'broadcast') {
    const n = Math.max(1, Math.floor(requestedBytes / ELEMENT_BYTES));
    return { bytes: n * ELEMENT_BYTES, sendElems: n, recvElems: n };
  }
  const per = Math.max(1, Math.floor(requestedBytes / (ELEMENT_BYTES * np)));
  return op === 'allgather'
    ? { bytes: per * np * ELEMENT_BYTES, sendElems: per, recvElems: per * np }
    : { bytes: per * np * ELEMENT_BYTES, sendElems: per * np, recvElems: per };
}

export function caseBytes(op: CollectiveOp, requestedBytes: number, np: number): number {
  return caseLayout(op, requestedBytes, np).bytes;
}

/**
 * Timed and warmup iterations at one size under a byte budget (0: none): timed runs capped at
 * max(3, budget / bytes), warmup at max(1, budget / bytes). Same rule as the harnesses.
 */
export function iterationsFor(bytes: number, iters: number, warmup: number, byteBudget = 0): { iters: number; warmup: number } {
  if (!byteBudget || bytes <= 0) return { iters, warmup };
  const fit = Math.floor(byteBudget / bytes);
  return { iters: Math.max(3, Math.min(iters, fit)), warmup: Math.min(warmup, Math.max(1, fit)) };
}

/**
 * nccl-tests' bus bandwidth factor: busbw = algbw * factor, the fraction of the data each
 * rank's link carries in an optimal algorithm. allreduce 2(n-1)/n, reduce_scatter and
 * allgather (n-1)/n, broadcast 1; barrier moves no data (null).
 */
export function busBwFactor(op: CollectiveOp, np: number): number | null {
  switch (op) {
    case 'allreduce':
      return (2 * (np - 1)) / np;
    case 'reduce_scatter':
    case 'allgather':
      return (np - 1) / np;
    case 'broadcast':
      return 1;
    case 'barrier':
      return null;
  }
}

/** Algorithm bandwidth in GB/s (1e9 B/s): bytes / time. */
export function algbwGBps(bytes: number, us: number): number | null {
  if (bytes <= 0 || !(us > 0)) return null;
  return bytes / us / 1e3;
}

/** Bus bandwidth in GB/s: algbw times `busBwFactor(op, np)`. */
export function busbwGBps(op: CollectiveOp, np: number, bytes: number, us: number): number | null {
  const f = busBwFactor(op, np);
  const alg = algbwGBps(bytes, us);
  return f === null || alg === null ? null : alg * f;
}

/** The row with algbw and busbw of its median time. */
export function withBandwidth(row: CollectiveRow): CollectiveResult {
  return { ...row, algbw_gbps: algbwGBps(row.bytes, row.median_us), busbw_gbps: busbwGBps(row.op, row.np, row.bytes, row.median_us) };
}

/** Sizes from `min` to `max` bytes, each `factor` times the previous (nccl-tests -b -e -f). */
export function sweepSizes(min = 8, max = 64 << 20, factor = 2): number[] {
  if (!(min > 0) || !(max >= min) || !(factor > 1)) throw new RangeError(`bad sweep ${min}..${max} x${factor}`);
  const out: number[] = [];
  for (let s = min; s <= max; s *= factor) out.push(s);
  return out;
}

/** Parses "8", "4K", "4KiB", "1M", "64MiB", "1G" (binary multiples) to bytes. */
export function parseSize(text: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([kmg]?)(?:i?b)?\s*$/i.exec(text);
  if (!m) throw new RangeError(`bad size '${text}' (use e.g. 8, 4K, 1MiB, 64M)`);
  const mult = { '': 1, k: 1 << 10, m: 1 << 20, g: 1 << 30 }[m[2].toLowerCase() as '' | 'k' | 'm' | 'g'];
  const bytes = Math.round(Number(m[1]) * mult);
  if (!(bytes > 0)) throw new RangeError(`size '${text}' must be positive`);
  return bytes;
}

/** A comma-separated size list ("8,1M,64MiB"), or a sweep "8..64M" / "8..64M:4" (factor after ':'). */
export function parseSizes(text: string): number[] {
  const sweep = /^\s*([^.,]+)\.\.([^:,]+)(?::(\d+))?\s*$/.exec(text);
  if (sweep) return sweepSizes(parseSize(sweep[1]), parseSize(sweep[2]), sweep[3] ? Number(sweep[3]) : 2);
  return text.split(',').filter((s) => s.trim()).map(parseSize);
}
