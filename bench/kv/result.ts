/** What the bench command hands every rank, and what rank 0 hands back (one line of stdout). */
import type { KvConfig } from './config.js';

/** What the bench command passes to every rank. */
export interface RankPlan extends Omit<KvConfig, 'rank' | 'ranks' | 'bindAddress' | 'oversubscribed' | 'job'> {
  duration: number;
  warmup: number;
  /** Seconds the warm-up may go on past `warmup` until the throughput is steady (--settle). */
  settle: number;
  runs: number;
  epochs: number;
}

/** What rank 0 prints. */
export interface RankResult {
  backend: string;
  ranks: number;
  hosts: number;
  /** What copyrpc between ranks ran over: 'shm', 'ofi' or 'shm+ofi' (shm inside a host, ofi between). */
  fabric: string;
  runsMops: number[];
  perRankMops: number[];
  p50_us: number;
  p90_us: number;
  p99_us: number;
  p999_us: number;
  outstanding_avg: number;
  /** Responses per CQ loop over all CQ loops (the memo's CQE batch). */
  cqe_batch_avg: number;
  /** CQ loops by responses: 0, 1, 2-10, 11-100, >100 (counts). */
  cqe_hist: { b0: number; b1: number; b2_10: number; b11_100: number; b100: number };
  /** The daemons' poll controller and its average setting (extra polls, or hold us). */
  poll_controller: string;
  poll_setting_avg: number;
  loops_per_s_per_daemon: number;
  /** Yields of every daemon and client thread per request completed, over the measured runs (the scheduler's turns per request when oversubscribed). */
  yields_per_request: number;
  local_share: number;
  mismatches: number;
  backlogged: number;
  threads: number;
  cores: number;
  oversubscribed: boolean;
  /** Seconds of warm-up (--warmup, then on until the throughput was steady) on rank 0. */
  warmup_s: number;
  /** False when the throughput had not settled after --warmup + --settle s (the runs started anyway). */
  warmup_steady: boolean;
  series: { t_ms: number[]; outstanding: number[]; cqe_batch: number[]; setting: number[] };
}

export const RESULT_PREFIX = 'KVRESULT ';

/** The warm-up goes on at most this long past --warmup when the throughput never settles (--settle's default). */
export const WARMUP_EXTRA_MAX_S = 3;

