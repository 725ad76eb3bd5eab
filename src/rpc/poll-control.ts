/**
 * Poll control for daemon loops that batch completions (docs/bistability.md).
 *
 * A daemon loop that drains a completion queue and then issues and flushes work is bistable
 * (the CQE batching memo): with enough completions per loop it stays in a high-throughput
 * equilibrium, with too few it collapses into fast, nearly empty loops and stays there. The
 * controllers here decide how long a loop lets completions accumulate:
 *
 * - `none`: one CQ poll per loop.
 * - `fixed:N`: the notes' poll budget: poll until N completions have come in or N polls were
 *   made (the setting that rescued NP=8 and throttled NP=16 in the memo).
 * - `adaptive`: the memo's self-identifying adaptive poll budget, as its pseudocode reads:
 *   EWMAs of batch, empty-loop ratio, loop time and RTT; rho = loop / RTT; hysteresis counters
 *   and a hold after each step; a warm-up that measures the loop at u = 0 and at u = u_probe
 *   and derives step_up, step_down and u_max from the sensitivities; collapse recovery. Its
 *   extra polls stop at the first completion (`for _ in 0..=u { ...; if cqe > 0 break }`).
 * - `batch-hold`: the notes' authors' replacement: responses to clients are held until
 *   `target` of them are ready or the hold time passes; the hold time is target / rate_ewma
 *   (rate = responses released / time held, EWMA alpha 0.125), clamped to 0.5-100 us.
 * - `min-batch`: weft's own: `fixed:n` with n steered so that a loop lasts about one base round
 *   trip (the memo's target), and a loop never waits for more than a quarter of the calls in
 *   flight. The two above stay collapsed in the model wherever the collapse is real; this one
 *   comes out of it under every input tried but one (a WRITE that outlasts the round trip;
 *   docs/bistability.md).
 *
 * Pure arithmetic: no clock, no I/O, no allocation. The loop reads the public fields before it
 * polls and reports what it saw after; the same objects drive the simulator
 * (`weft sim daemon-loop`) and benchkv's daemons (`--poll-controller`).
 *
 * @example
 * import { createPollController } from 'weftjs/rpc';
 * const ctl = createPollController('adaptive', { batchTarget: 8 });
 * for (;;) {
 *   const t0 = performance.now();
 *   let got = engine.poll(onResponse);
 *   for (let i = 0; i < ctl.extraPolls && got < ctl.pollUntil; i++) got += engine.poll(onResponse);
 *   // ... issue, flush ...
 *   ctl.endLoop(got, (performance.now() - t0) * 1000, callsInFlight);
 * }
 */

/** The controllers by name. */
export type PollControllerKind = 'none' | 'fixed' | 'adaptive' | 'batch-hold' | 'min-batch';

/** What the loop owner tells a controller at creation. */
export interface PollControllerOptions {
  /** batch-hold: responses worth releasing together (the notes: about the number of ranks). */
  batchTarget?: number;
  /** batch-hold: hold time before the first rate estimate, us (the notes' default 10). */
  initialHoldUs?: number;
  /** adaptive: RTT assumed until the first sample; min-batch: the base RTT until a smaller sample, us (the memo's T_rtt, 6). */
  rttUs?: number;
  /** adaptive: loops in each of the two warm-up phases (default 5000). */
  warmupLoops?: number;
  /** adaptive: the probe budget of the second warm-up phase (the memo's u_probe, 8). */
  probeBudget?: number;
}

/**
 * One daemon loop's poll policy. The loop reads `extraPolls` and `pollUntil` before it polls
 * (poll again while fewer than `pollUntil` completions came in and fewer than `extraPolls`
 * extra polls were made), asks `shouldHold()` for each response it could hand to a client,
 * `shouldRelease(...)` at the end of the loop when it holds some, and reports with `endLoop`,
 * `rtt` and `released`.
 */
export abstract class PollController {
  abstract readonly kind: PollControllerKind;
  /** The spec this controller was made from (`fixed:16`, `adaptive`, ...). */
  abstract readonly spec: string;
  /** Extra CQ polls the next loop may make after its first. */
  extraPolls = 0;
  /** The loop stops its extra polls once this many completions have come in. */
  pollUntil = 1;

  /**
   * One loop ended: `batch` completions (responses) in `loopUs` microseconds, with
   * `outstanding` calls still in flight (min-batch uses it; the others ignore it).
   */
  endLoop(_batch: number, _loopUs: number, _outstanding?: number): void {}
  /** One call's round trip, from issue to completion, us. */
  rtt(_us: number): void {}
  /** Whether a response ready now should wait in the hold buffer instead of going out. */
  shouldHold(): boolean {
    return false;
  }
  /** With `held` responses waiting since `heldUs` ago and `outstanding` calls in flight: release now? */
  shouldRelease(_held: number, _heldUs: number, _outstanding: number): boolean {
    return true;
  }
  /** `count` held responses went out after waiting `heldUs`. */
  released(_count: number, _heldUs: number): void {}
  /** The setting in force, for reports: extra polls (budgets) or the hold time in us (batch-hold). */
  abstract get setting(): number;
  /** The unit of `setting`. */
  abstract get settingUnit(): 'polls' | 'us';
}

/** One poll per loop. */
export class NoPollControl extends PollController {
  readonly kind = 'none';
  readonly spec = 'none';
  get setting(): number {
    return 0;
  }
  get settingUnit(): 'polls' {
    return 'polls';
  }
}

/**
 * The notes' fixed poll budget: up to N polls per loop, stopping once N completions came in.
 * `fixed:0` and `fixed:1` are one poll, as `none`.
 */
export class FixedPollBudget extends PollController {
  readonly kind = 'fixed';
  readonly spec: string;
  constructor(readonly budget: number) {
    super();
    if (!Number.isInteger(budget) || budget < 0 || budget > 1 << 20) throw new RangeError(`fixed:${budget}: the poll budget is an integer from 0 to ${1 << 20}`);
    this.spec = `fixed:${budget}`;
    this.extraPolls = Math.max(0, budget - 1);
    this.pollUntil = Math.max(1, budget);
  }
  get setting(): number {
    return this.extraPolls;
  }
  get settingUnit(): 'polls' {
    return 'polls';
  }
}

/** The memo's thresholds and gains (its pseudocode's comments give the values). */
export const ADAPTIVE_DEFAULTS = {
  rhoLow: 0.8,
  rhoHigh: 1.2,
  eHigh: 0.75,
  eLow: 0.4,
  lowNeed: 64,
  highNeed: 128,
  holdMin: 32,
  alphaBatch: 0.05,
  alphaEmpty: 0.05,
  alphaLoop: 0.05,
  alphaRtt: 0.02,
  /** Floor of the RTT in rho = loop / max(rtt, 0.5). */
  rttFloorUs: 0.5,
  /** Floor of dB/du in step_up = 2 / max(dB/du, eps). */
  eps: 1e-3,
  warmupLoops: 5000,
  probeBudget: 8,
  rttUs: 6,
} as const;

/** Warm-up phase 1 (u = 0), phase 2 (u = u_probe), then control. */
const enum Phase {
  Baseline = 0,
  Probe = 1,
  Active = 2,
}

/**
 * The memo's self-identifying adaptive poll budget (its last section), line for line. Where
 * the memo leaves a choice open this class says so:
 * - the warm-up phases last `warmupLoops` loops each and only measure (steps D and E start
 *   after them); B0 and E0 are plain means over the phase, start-up included;
 * - R0 in u_max = clamp(round(2.5 R0), 8, 64) is the RTT in loop times at u = 0 (rtt_ema /
 *   mean loop: the polls it takes to wait one RTT); control starts from u = 0;
 * - the batch, empty and loop EWMAs start at the first loop's values, the RTT EWMA at `rttUs`
 *   (the memo's T_rtt); the RTT folded in per loop is the mean of the loop's samples;
 * - eps in max(dB/du, eps) is 1e-3; dE/du is computed by the memo but used by no gain;
 * - the batch is the loop's responses (the memo's copyrpc_resp_count), so `pollUntil` = 1
 *   ends the extra polls at the first response.
 */
export class AdaptivePollBudget extends PollController {
  readonly kind = 'adaptive';
  readonly spec = 'adaptive';
  // filtered metrics
  bEma = 0;
  eEma = 0;
  rttEmaUs: number;
  loopEmaUs = 0;
  // control
  /** u: the effective poll budget. */
  u = 0;
  uMax = 64;
  stepUp = 1;
  stepDown = 2;
  // hysteresis counters
  lowCnt = 0;
  highCnt = 0;
  holdCnt = 0;
  // self-identification
  phase: Phase = Phase.Baseline;
  private loops = 0;
  private sumB = 0;
  private sumE = 0;
  private sumLoopUs = 0;
  private b0 = 0;
  private e0 = 0;
  private r0 = 0;
  private readonly warmupLoops: number;
  private readonly probe: number;
  private seeded = false;

  constructor(options: PollControllerOptions = {}) {
    super();
    this.rttEmaUs = options.rttUs ?? ADAPTIVE_DEFAULTS.rttUs;
    this.rttLastUs = this.rttEmaUs;
    this.warmupLoops = options.warmupLoops ?? ADAPTIVE_DEFAULTS.warmupLoops;
    this.probe = options.probeBudget ?? ADAPTIVE_DEFAULTS.probeBudget;
    if (!(this.warmupLoops >= 1) || !(this.probe >= 1)) throw new RangeError('adaptive: warmupLoops and probeBudget are at least 1');
    this.pollUntil = 1;
  }

  get setting(): number {
    return this.u;
  }
  get settingUnit(): 'polls' {
    return 'polls';
  }

  /** RTT samples of the current loop (the memo's sample_rtt, folded in once per loop). */
  private rttSum = 0;
  private rttN = 0;
  private rttLastUs: number;

  override rtt(us: number): void {
    if (!(us >= 0)) return;
    this.rttSum += us;
    this.rttN++;
  }

  override endLoop(batch: number, loopUs: number): void {
    const d = ADAPTIVE_DEFAULTS;
    const empty = batch === 0 ? 1 : 0;
    // rtt_us = sample_rtt_ewma_us(): this loop's samples, or the previous value without any
    if (this.rttN > 0) {
      this.rttLastUs = this.rttSum / this.rttN;
      this.rttSum = 0;
      this.rttN = 0;
    }
    this.rttEmaUs = this.rttEmaUs * (1 - d.alphaRtt) + this.rttLastUs * d.alphaRtt;
    if (!this.seeded) {
      this.bEma = batch;
      this.eEma = empty;
      this.loopEmaUs = loopUs;
      this.seeded = true;
    } else {
      this.bEma = this.bEma * (1 - d.alphaBatch) + batch * d.alphaBatch;
      this.eEma = this.eEma * (1 - d.alphaEmpty) + empty * d.alphaEmpty;
      this.loopEmaUs = this.loopEmaUs * (1 - d.alphaLoop) + loopUs * d.alphaLoop;
    }
    if (this.phase !== Phase.Active) {
      this.warmup(batch, empty, loopUs);
      return;
    }
    const rho = this.loopEmaUs / Math.max(this.rttEmaUs, d.rttFloorUs);

    // Step D: hysteresis + rate-limited adaptation
    if (this.holdCnt > 0) {
      this.holdCnt--;
      return;
    }
    const lowCond = rho < d.rhoLow || this.eEma > d.eHigh;
    const highCond = rho > d.rhoHigh && this.eEma < d.eLow;
    if (lowCond) {
      this.lowCnt++;
      this.highCnt = 0;
      if (this.lowCnt >= d.lowNeed) {
        this.u = Math.min(this.u + this.stepUp, this.uMax);
        this.lowCnt = 0;
        this.holdCnt = d.holdMin;
      }
    } else if (highCond) {
      this.highCnt++;
      this.lowCnt = 0;
      if (this.highCnt >= d.highNeed) {
        this.u = Math.max(this.u - this.stepDown, 0);
        this.highCnt = 0;
        this.holdCnt = d.holdMin;
      }
    } else {
      this.lowCnt = 0;
      this.highCnt = 0;
    }

    // Step E: collapse recovery
    if (this.bEma < 1 && this.eEma > 0.9) {
      this.u = Math.min(this.u + this.stepUp * 2, this.uMax);
      this.holdCnt = d.holdMin;
    }
    this.extraPolls = this.u;
  }

  private warmup(batch: number, empty: number, loopUs: number): void {
    this.loops++;
    this.sumB += batch;
    this.sumE += empty;
    this.sumLoopUs += loopUs;
    if (this.loops < this.warmupLoops) return;
    const n = this.loops;
    if (this.phase === Phase.Baseline) {
      // 1. u = 0: B0, E0, R0
      this.b0 = this.sumB / n;
      this.e0 = this.sumE / n;
      this.r0 = this.rttEmaUs / Math.max(this.sumLoopUs / n, 1e-3);
      this.phase = Phase.Probe;
      this.u = this.probe;
    } else {
      // 2. u = u_probe: B1, E1; 3. sensitivities; 4. gains
      const b1 = this.sumB / n;
      const e1 = this.sumE / n;
      const dBdu = (b1 - this.b0) / this.probe;
      const dEdu = (e1 - this.e0) / this.probe;
      void dEdu; // the memo computes it; its gains use dB/du only
      this.stepUp = clamp(Math.round(2 / Math.max(dBdu, ADAPTIVE_DEFAULTS.eps)), 1, 8);
      this.stepDown = Math.max(this.stepUp * 2, 2);
      this.uMax = clamp(Math.round(2.5 * this.r0), 8, 64);
      this.phase = Phase.Active;
      this.u = 0;
    }
    this.loops = 0;
    this.sumB = 0;
    this.sumE = 0;
    this.sumLoopUs = 0;
    this.extraPolls = this.u;
  }

  /** What the warm-up identified (for reports and tests). */
  get identified(): { b0: number; e0: number; r0: number; stepUp: number; stepDown: number; uMax: number; active: boolean } {
    return { b0: this.b0, e0: this.e0, r0: this.r0, stepUp: this.stepUp, stepDown: this.stepDown, uMax: this.uMax, active: this.phase === Phase.Active };
  }
}

/** The notes' authors' adaptive batch hold: bounds of the hold time, us, and the EWMA gain. */
export const BATCH_HOLD_DEFAULTS = { minHoldUs: 0.5, maxHoldUs: 100, alpha: 0.125, initialHoldUs: 10 } as const;

/**
 * Adaptive batch hold (the replacement the notes' authors published): responses to clients
 * wait in a buffer until `target` are ready, the hold time passes, or nothing is in flight.
 * After each release, rate = released / time held updates rate_ewma (alpha 0.125) and the hold
 * becomes target / rate_ewma, clamped to 0.5-100 us. Holding is switched off after a release
 * of at least `target` responses (the batch was healthy) and on again after a loop without
 * responses, as in their daemon.
 */
export class AdaptiveBatchHold extends PollController {
  readonly kind = 'batch-hold';
  readonly spec = 'batch-hold';
  holdUs: number;
  rateEwma = 0;
  active: boolean;
  readonly target: number;
  private initialized = false;

  constructor(options: PollControllerOptions = {}) {
    super();
    const target = options.batchTarget ?? 8;
    if (!Number.isInteger(target) || target < 1) throw new RangeError(`batch-hold: batchTarget is an integer of at least 1, got ${target}`);
    this.target = target;
    this.holdUs = options.initialHoldUs ?? BATCH_HOLD_DEFAULTS.initialHoldUs;
    this.active = this.holdUs > 0;
  }

  get setting(): number {
    return this.holdUs;
  }
  get settingUnit(): 'us' {
    return 'us';
  }

  override shouldHold(): boolean {
    return this.active;
  }

  override shouldRelease(held: number, heldUs: number, outstanding: number): boolean {
    return held >= this.target || heldUs >= this.holdUs || outstanding === 0;
  }

  override released(count: number, heldUs: number): void {
    const d = BATCH_HOLD_DEFAULTS;
    if (heldUs > 0) {
      const rate = count / heldUs;
      if (!this.initialized) {
        this.rateEwma = rate;
        this.initialized = true;
      } else this.rateEwma = (1 - d.alpha) * this.rateEwma + d.alpha * rate;
      if (this.rateEwma > 0) this.holdUs = clamp(this.target / this.rateEwma, d.minHoldUs, d.maxHoldUs);
    }
    this.active = this.holdUs > 0 && count < this.target;
  }

  override endLoop(batch: number): void {
    // A loop without responses: hold the next ones (their daemon, after an empty hold buffer).
    if (batch === 0) this.active = this.holdUs > 0;
  }
}

/** The adaptive minimum batch's target band, gains and bounds (docs/bistability.md). */
export const MIN_BATCH_DEFAULTS = {
  /** rho = loop / base RTT is steered into [rhoLow, rhoHigh] (the memo's control target). */
  rhoLow: 0.8,
  rhoHigh: 1.2,
  /** Consecutive loops below the band before n doubles. */
  lowNeed: 16,
  /** Consecutive loops that waited while above the band or with nothing queued, before n shrinks by n/8. */
  highNeed: 64,
  /** EWMA gain of the loop time (the memo's). */
  alphaLoop: 0.05,
  /** n never exceeds this... */
  maxBatch: 256,
  /** ...and a loop waits for at most ceil(in flight / inFlightShare) responses (at least 1). */
  inFlightShare: 4,
  /** Base RTT assumed until a smaller sample is seen, us (the memo's T_rtt). */
  rttUs: 6,
  /** EWMA gain of the RTT samples. */
  alphaRtt: 1 / 16,
  /** n grows only while calls queue: the RTT EWMA above queuedAbove x the base RTT... */
  queuedAbove: 3,
  /** ...and shrinks after loops that waited while it is below idleBelow x the base. */
  idleBelow: 1.5,
} as const;

/**
 * Adaptive minimum batch: the notes' fixed budget with its N steered. A loop polls until `n`
 * responses came in or n polls were made (`fixed:n`), and never waits for more than a quarter
 * of the calls in flight. n doubles while loops are shorter than 0.8 base round trips and calls
 * queue somewhere (their RTT is over 3x the base: batching is what drains such queues). It
 * shrinks by an eighth while loops that waited for their batch are longer than 1.2 base round
 * trips, or while calls do not queue (RTT under 1.5x the base: waiting only adds latency).
 *
 * The memo's target (loop time about one RTT, rho = loop / RTT in 0.8-1.2) is kept; what
 * changes is the actuator and the RTT. Its extra polls ended at the first completion, so they
 * could not make a batch, only drop empty loops; here the loop waits for n responses. Its RTT
 * was the measured one, which in a collapse is the queueing delay (1.9 ms, rho ~0.001 in any
 * state); here it is the base round trip: the smallest sample seen, at most `rttUs`.
 *
 * @example
 * const ctl = createPollController('min-batch', { rttUs: 6 }); // rttUs: the fabric's idle round trip
 * // per loop: poll while got < ctl.pollUntil, at most ctl.extraPolls more times; then
 * ctl.rtt(sampledRoundTripUs);           // now and then, for a call that completed
 * ctl.endLoop(got, loopUs, callsInFlight); // no extra polls while nothing is in flight
 */
export class AdaptiveMinBatch extends PollController {
  readonly kind = 'min-batch';
  readonly spec = 'min-batch';
  /** The minimum batch: poll until n responses, or n polls. */
  n = 1;
  /** EWMA of the loop time, us (-1 before the first loop). */
  loopEmaUs = -1;
  /** The base round trip the loop time is compared with, us. */
  rttBaseUs: number;
  /** EWMA of the RTT samples, us (-1 before the first). */
  rttEmaUs = -1;
  private lowCnt = 0;
  private highCnt = 0;

  constructor(options: PollControllerOptions = {}) {
    super();
    this.rttBaseUs = options.rttUs ?? MIN_BATCH_DEFAULTS.rttUs;
    if (!(this.rttBaseUs > 0 && Number.isFinite(this.rttBaseUs))) throw new RangeError(`min-batch: rttUs must be a positive number of microseconds, got ${this.rttBaseUs}`);
  }

  /** Extra polls, as for `fixed:N` (n - 1). */
  get setting(): number {
    return this.extraPolls;
  }
  get settingUnit(): 'polls' {
    return 'polls';
  }

  override rtt(us: number): void {
    if (!(us > 0 && us < Infinity)) return;
    if (us < this.rttBaseUs) this.rttBaseUs = us;
    this.rttEmaUs = this.rttEmaUs < 0 ? us : this.rttEmaUs + (us - this.rttEmaUs) * MIN_BATCH_DEFAULTS.alphaRtt;
  }

  override endLoop(batch: number, loopUs: number, outstanding?: number): void {
    const d = MIN_BATCH_DEFAULTS;
    // A loop time that is not a time (a clock fault) is skipped, not folded in for good.
    if (loopUs >= 0 && loopUs < Infinity) this.loopEmaUs = this.loopEmaUs < 0 ? loopUs : this.loopEmaUs * (1 - d.alphaLoop) + loopUs * d.alphaLoop;
    const rho = this.loopEmaUs < 0 ? 1 : this.loopEmaUs / this.rttBaseUs;
    // Whether the loop waited, as far as its batch tells: it could poll again and did not get
    // more than it waited for (a first poll that brought exactly that many counts too).
    const waited = this.extraPolls > 0 && batch <= this.pollUntil;
    // Before the first round trip, calls in flight count as queued: a start that goes wrong shows
    // no sample for a while. A loop that makes no calls has nothing to batch.
    const queued = this.rttEmaUs < 0 ? outstanding !== undefined && outstanding > 0 : this.rttEmaUs > d.queuedAbove * this.rttBaseUs;
    const idle = this.rttEmaUs >= 0 && this.rttEmaUs < d.idleBelow * this.rttBaseUs;
    if (rho < d.rhoLow && queued) {
      this.highCnt = 0;
      if (++this.lowCnt >= d.lowNeed) {
        this.lowCnt = 0;
        this.n = Math.min(d.maxBatch, this.n * 2);
      }
    } else if ((rho > d.rhoHigh || idle) && waited) {
      this.lowCnt = 0;
      if (++this.highCnt >= d.highNeed) {
        this.highCnt = 0;
        this.n = Math.max(1, this.n - Math.max(1, this.n >> 3));
      }
    } else {
      this.lowCnt = 0;
      this.highCnt = 0;
    }
    if (outstanding === undefined || !(outstanding >= 0)) {
      this.extraPolls = this.n - 1;
      this.pollUntil = this.n;
    } else {
      // Nothing in flight: no response can come, so no poll waits for one.
      this.extraPolls = outstanding === 0 ? 0 : this.n - 1;
      this.pollUntil = Math.max(1, Math.min(this.n, Math.ceil(outstanding / d.inFlightShare)));
    }
  }
}

function clamp(x: number, lo: number, hi: number): number {
  return x < lo ? lo : x > hi ? hi : x;
}

/** The controller specs `createPollController` accepts, for help texts. */
export const POLL_CONTROLLER_SPECS = 'none | fixed:N | adaptive | min-batch | batch-hold';

/**
 * A controller from its spec: `none`, `fixed:N`, `adaptive`, `min-batch` or `batch-hold`.
 *
 * @example
 * const ctl = createPollController('fixed:16'); // ctl.extraPolls === 15, ctl.pollUntil === 16
 */
export function createPollController(spec: string, options: PollControllerOptions = {}): PollController {
  const s = spec.trim();
  if (s === 'none') return new NoPollControl();
  if (s === 'adaptive') return new AdaptivePollBudget(options);
  if (s === 'batch-hold') return new AdaptiveBatchHold(options);
  if (s === 'min-batch') return new AdaptiveMinBatch(options);
  const m = /^fixed:(\d+)$/.exec(s);
  if (m) return new FixedPollBudget(Number(m[1]));
  throw new RangeError(`poll controller '${spec}': expected ${POLL_CONTROLLER_SPECS}`);
}
