/**
 * The parameters of the daemon-loop model and their defaults. The defaults are the memo's
 * setting (QD 32, 46 clients, one daemon thread per rank, a 6 us RDMA round trip, about
 * 0.16 us of daemon work per request) plus the per-WRITE cost of a connection, calibrated so
 * that the collapsed equilibrium carries what the memo measured at NP=8 (about 1.1 Mops per
 * rank). docs/bistability.md explains each number.
 */

export interface DaemonLoopParams {
  /** Ranks (one daemon each). */
  np: number;
  /** Client threads per rank. */
  clients: number;
  /** Requests in flight per client (closed loop). */
  qd: number;
  /** Simulated time, ms. */
  durationMs: number;
  /** Metrics start here, ms (the series start at 0). */
  warmupMs: number;
  seed: number;
  /** Round trip of a one-message WRITE and its answer on idle connections, us. */
  rttUs: number;
  /** Mean of the exponential delay added to each WRITE's flight, us (wave dispersion). */
  jitterUs: number;
  /** Time a WRITE occupies its connection (rank to rank, in order), us. */
  writeUs: number;
  /** Added occupancy per message in a WRITE, us. */
  messageUs: number;
  // daemon loop costs, us
  /** Step A: the IPC poll over the clients' channels. */
  ipcUs: number;
  /** Step B: the delegation ring poll. */
  ringUs: number;
  /** Step C: one CQ poll (each extra poll of a budget costs this again). */
  pollUs: number;
  /** Step C: one completion (WRITE arrival) taken from the CQ. */
  cqeUs: number;
  /** Step C: one incoming request served (recv, the KV operation, the reply into the send buffer). */
  requestUs: number;
  /** Step C: one response handed to its client (callback, delegation reply). */
  responseUs: number;
  /** Step D: one call issued. */
  callUs: number;
  /** Step F: the flush (fixed part). */
  flushUs: number;
  /** Step F: one WRITE posted (per endpoint with something to send). */
  postUs: number;
  /** Step B takes at most this many requests per loop (0 = all that are ready). */
  ringTakeMax: number;
  /** A client's turnaround from its response to its next request, us. */
  clientUs: number;
  /** Share of each rank's requests sent to one hot rank (rank 0; 0 = uniform targets). */
  hotShare: number;
  /** Series bin width, us, and how far the fine series goes, ms. */
  binUs: number;
  seriesMs: number;
  /**
   * Induced collapse: from `collapseAtMs` for `collapseForMs` the clients stall (a response
   * that arrives is not followed by a request), then each comes back at a uniform time over
   * `startSpreadUs`: the thin restart that collapses NP=8 without control. The controllers
   * run throughout. 0 = off.
   */
  collapseAtMs: number;
  collapseForMs: number;
  /** Requests per rank sent at time 0 (the memo's initial burst)... */
  startBurst: number;
  /** ...and the rest of the clients' first requests spread evenly over this many us (threads starting). */
  startSpreadUs: number;
}

export const DEFAULT_PARAMS: DaemonLoopParams = {
  np: 8,
  clients: 46,
  qd: 32,
  durationMs: 20,
  warmupMs: 5,
  seed: 1,
  rttUs: 6,
  jitterUs: 0.3,
  writeUs: 5,
  messageUs: 0.01,
  ipcUs: 0.3,
  ringUs: 0.05,
  pollUs: 0.1,
  cqeUs: 0.04,
  requestUs: 0.06,
  responseUs: 0.05,
  callUs: 0.05,
  flushUs: 0.05,
  postUs: 0.08,
  clientUs: 0.2,
  ringTakeMax: 0,
  hotShare: 0,
  binUs: 10,
  seriesMs: 3,
  collapseAtMs: 0,
  collapseForMs: 0,
  startBurst: 0,
  startSpreadUs: 300,
};

/** Per-request daemon work across both ends: the memo's T_item. */
export function itemUs(p: DaemonLoopParams): number {
  return p.callUs + p.requestUs + p.responseUs;
}

/** Checks a parameter set; returns the first problem, or undefined. */
export function checkParams(p: DaemonLoopParams): string | undefined {
  if (!Number.isInteger(p.np) || p.np < 2 || p.np > 64) return `np ${p.np}: an integer from 2 to 64 (memory grows as NP^2 x clients x QD)`;
  if (!(p.rttUs > 0)) return `rttUs ${p.rttUs}: > 0 (a WRITE must take time to land)`;
  if (!Number.isInteger(p.clients) || p.clients < 1) return `clients ${p.clients}: an integer of at least 1`;
  if (!Number.isInteger(p.qd) || p.qd < 1) return `qd ${p.qd}: an integer of at least 1`;
  if (p.clients * p.qd > 1 << 20) return `clients x qd = ${p.clients * p.qd}: at most ${1 << 20} requests per rank`;
  if (!(p.durationMs > 0) || !(p.warmupMs >= 0) || p.warmupMs >= p.durationMs) return `duration ${p.durationMs} ms / warm-up ${p.warmupMs} ms: the warm-up ends before the run`;

  for (const k of ['rttUs', 'jitterUs', 'writeUs', 'messageUs', 'ipcUs', 'ringUs', 'pollUs', 'cqeUs', 'requestUs', 'responseUs', 'callUs', 'flushUs', 'postUs', 'clientUs', 'binUs', 'seriesMs', 'collapseAtMs', 'collapseForMs', 'startSpreadUs'] as const) {
    if (!(p[k] >= 0) || !Number.isFinite(p[k])) return `${k} ${p[k]}: a finite number >= 0`;
  }
  if (p.pollUs + p.ipcUs + p.ringUs <= 0) return 'a loop must cost something (ipc + ring + poll > 0)';
  if (!(p.hotShare >= 0 && p.hotShare <= 1)) return `hot share ${p.hotShare}: from 0 to 1`;
  if (!Number.isInteger(p.startBurst) || p.startBurst < 0) return `start burst ${p.startBurst}: an integer >= 0`;
  if (!(p.binUs > 0)) return `bin ${p.binUs} us: > 0`;
  return undefined;
}
