/** What the bench command hands every rank, and what rank 0 hands back (one line of stdout). */
import type { KvConfig } from './config.js';

/** What the bench command passes to every rank. */
export interface RankPlan extends Omit<KvConfig, 'rank' | 'ranks' | 'bindAddress' | 'oversubscribed' | 'job'> {
  duration: number;
  warmup: number;
  runs: number;
  epochs: number;
}

/** What rank 0 prints. */
export interface RankResult {
  backend: string;
  ranks: number;
  hosts: number;
  runsMops: number[];
  perRankMops: number[];
  p50_us: number;
  p90_us: number;
  p99_us: number;
  p999_us: number;
  outstanding_avg: number;
  cqe_batch_avg: number;
  cqe_hist: { empty: number; extra0: number; extra1: number; extra2_10: number; extra11_100: number; extra100: number };
  loops_per_s_per_daemon: number;
  local_share: number;
  mismatches: number;
  backlogged: number;
  threads: number;
  cores: number;
  oversubscribed: boolean;
  series: { t_ms: number[]; outstanding: number[]; cqe_batch: number[] };
}

export const RESULT_PREFIX = 'KVRESULT ';

