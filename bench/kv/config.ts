/** One benchkv configuration as every thread of a rank receives it (plain data: workerData). */
import type { Distribution } from './workload.js';
import type { Backend } from './topology.js';

/** The shape and workload of a run, as the command line gives them. */
export interface KvShape {
  daemons: number;
  clients: number;
  qd: number;
  keys: number;
  readRatio: number;
  distribution: Distribution;
  /** Probability of the own rank as the target; undefined: uniform over all ranks. */
  locality?: number;
  seed: number;
  verify: boolean;
  /** The daemon loops' poll controller: none, fixed:N, adaptive, min-batch or batch-hold (docs/bistability.md). */
  pollController: string;
}

export interface KvConfig extends KvShape {
  backend: Backend;
  ranks: number;
  rank: number;
  /** copyrpc ring bytes per endpoint (send and recv). */
  ringBytes: number;
  /** Device provider of the threads' copyrpc engines ('shm', 'ofi', 'shm+ofi'). */
  provider: string;
  /** Address the fabric binds (ranks spread over hosts). */
  bindAddress?: string;
  /** Segment job name. */
  job: string;
  /** Workload entries each client cycles through. */
  patternLength: number;
  /** More busy threads than cores on this host: the waiting policy yields early. */
  oversubscribed: boolean;
  /** Bound of every setup step and of the drain at the end. */
  timeoutMs: number;
}

/** delegationrpc ring depth (section 9 of the notes). */
export const DELEG_RING_DEPTH = 1024;
/** Flux geometry (section 9). */
export const FLUX_CAPACITY = 1024;
export const FLUX_MAX_INFLIGHT = 256;

export function nextPow2(n: number): number {
  let p = 1;
  while (p < n) p *= 2;
  return p;
}
