/**
 * What the launcher (weft.ts) tells each weft rank (rank.ts), and how rank 0 marks its rows.
 * Kept apart from rank.ts, which runs a rank as soon as it is imported.
 */
import type { CollectiveOp } from './metrics.js';

/** 'await': the Promise API ('weft' rows); 'sync': the blocking `...Sync` API ('weft-sync'). */
export type Variant = 'await' | 'sync';

export const VARIANT_SYSTEM: Record<Variant, string> = { await: 'weft', sync: 'weft-sync' };

/** argv[2] of every rank, as JSON. */
export interface RankPlan {
  ops: CollectiveOp[];
  /** Requested sizes (bytes), as nccl-tests' -b/-e: see caseLayout. */
  sizes: number[];
  iters: number;
  warmup: number;
  byteBudget: number;
  variants: Variant[];
  /** Reported as the rows' provider ('shm', 'ofi:tcp', ...). */
  provider: string;
  /** Per collective call; a hung peer fails the run instead of stalling it. */
  timeoutMs: number;
  /** Where weft's arrays live: 'alloc' (ctx.alloc, registered; default) or 'heap' (new Float32Array). */
  buffers?: 'alloc' | 'heap';
  /** Jobs that span hosts: false runs the flat algorithms (default: hierarchical). */
  hierarchical?: boolean;
}

/** Rank 0 prints each row as this prefix and one JSON object on a line of its own. */
export const ROW_PREFIX = 'WEFT_ROW ';
