/**
 * The one waiting loop. Everything in weft that waits for another process (a completion
 * queue, a peer's board word, a collective step, an idle RPC driver) waits here: spin, then
 * yield the core, then sleep on a doorbell, checking the deadline and the caller's liveness
 * probe between sleeps. Sync and async forms share the phases and the constants below, so a
 * change of tuning happens in one place and reaches every layer.
 *
 * Why three phases (measured on this 2-core VM, docs/architecture.md#waiting):
 * - spin: a peer that answers within a round trip (0.2-1 us on shm) is seen at once; a
 *   sleeping process takes 20-30 us to wake, a whole scheduler tick when cores are busy;
 * - yield: with more processes than cores, the one we wait for may need this core: a yield
 *   hands it over at once, where a futex sleep and wake costs tens of microseconds;
 * - sleep: an idle wait must cost no CPU (a test holds an idle wait under half a core).
 *
 * What the waiter sleeps on is a Doorbell: the shm completion ring's futex (peers ring it
 * only while a sleeper is registered), libfabric's CQ fd, a peer's board word.
 */
import { WeftError } from '../errors.js';
import { native } from '../native/binding.js';
import { Deadline } from '../util/deadline.js';

/** The tuning of every wait in weft. */
export const WAIT = {
  /** Busy-poll this long before yielding (covers a round trip between spinning peers). */
  spinUs: 50,
  /**
   * With more processes than cores, do not spin: the process we wait for may need this
   * core, so the first miss goes straight to yielding (4 ranks on 2 cores).
   */
  oversubscribedSpinUs: 0,
  /** Then yield the core this long before sleeping. */
  yieldUs: 2000,
  /**
   * With more processes than cores, keep yielding this long: a yield hands the core straight
   * to the runnable peer, while a futex wake-up costs tens of microseconds or a scheduler tick.
   */
  oversubscribedYieldUs: 20_000,
  /** Sleep in slices this long: liveness probes and deadlines run between slices. */
  sleepSliceMs: 20,
  /** Async waits let the event loop run at least this often while work keeps arriving. */
  turnEveryMs: 1,
} as const;

/** What a waiter sleeps on once spinning and yielding did not help. */
export interface Doorbell {
  /** Called once before the first sleep: publish what peers may be waiting for (credits). */
  beforeSleep?(): void;
  /**
   * Sleeps at most `ms`, unless `ready()` (called after arming the doorbell, so a ring
   * between the last check and the sleep is not lost) says there is no need.
   */
  sleepSync(ms: number, ready: () => boolean): void;
  /** The same on the event loop. */
  sleepAsync(ms: number, ready: () => boolean): Promise<unknown>;
  /**
   * False when a sleep would end at once (the fabric has work to progress): a doorbell that
   * combines others then skips its own sleeps and lets the event loop turn instead.
   */
  mayBlock?(): boolean;
}

/** The call a wait serves: its deadline (timeout and AbortSignal) and its name in errors. */
export interface WaitCall {
  readonly deadline: Deadline;
  readonly what: string;
  /**
   * The error to end the wait with once the deadline passed or the signal aborted, when the
   * owner can say more than the deadline's generic one (what is still pending, which peer
   * stopped). The wait asks for it between sleeps and every few yields: a `ready()` that
   * read the clock itself would do so on every poll of the spin.
   */
  readonly expired?: () => Error;
}

/** Options of waitSync / waitAsync. */
export interface WaitPlan {
  /** More processes on this host than cores: spin briefly, yield long. */
  oversubscribed: boolean;
  /** Deadline and name; without one the wait ends only when ready. */
  call?: WaitCall;
  /** Runs between sleeps and every few yields: may throw to end the wait (a dead peer). */
  probe?: () => void;
}

/** One event-loop turn: pending I/O callbacks and timers run. */
export function turn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * Polls `ready` for at most `us` microseconds; true when it became true. With
 * `yieldBetween`, the core is yielded between polls (more processes than cores).
 */
export function spin(ready: () => boolean, us: number, yieldBetween = false): boolean {
  if (ready()) return true;
  if (us <= 0) return false;
  const until = performance.now() + us / 1000;
  for (let i = 1; ; i++) {
    if (yieldBetween) native.yieldThread();
    if (ready()) return true;
    if ((i & 15) === 0 && performance.now() > until) return false;
  }
}

function spinUs(plan: WaitPlan): number {
  return plan.oversubscribed ? WAIT.oversubscribedSpinUs : WAIT.spinUs;
}

function yieldUntil(plan: WaitPlan): number {
  return performance.now() + (plan.oversubscribed ? WAIT.oversubscribedYieldUs : WAIT.yieldUs) / 1000;
}

/**
 * Between sleeps: the caller's probe (dead peers, aborts), then the deadline. True when the
 * wait is over: a condition that holds (the probe may have routed what it waited for) ends
 * the wait even past the deadline, since the peers have finished that step too.
 */
function probe(plan: WaitPlan, ready: () => boolean): boolean {
  plan.probe?.();
  if (ready()) return true;
  const call = plan.call;
  // `what` is read only to throw: an owner may make it on demand.
  if (call && call.deadline.expired()) {
    if (call.expired !== undefined) throw call.expired();
    call.deadline.check(call.what);
  }
  return false;
}

function slice(plan: WaitPlan): number {
  const call = plan.call;
  if (!call) return WAIT.sleepSliceMs;
  return Math.max(1, Math.min(call.deadline.remaining(), WAIT.sleepSliceMs));
}

/**
 * Blocks the thread until `ready()`: spins, yields, then sleeps on `bell`. Throws ETIMEDOUT
 * or EABORTED from the plan's deadline, or whatever `ready` or the probe throw.
 */
export function waitSync(ready: () => boolean, bell: Doorbell, plan: WaitPlan): void {
  if (spin(ready, spinUs(plan))) return;
  const until = yieldUntil(plan);
  for (let i = 1; performance.now() < until; i++) {
    native.yieldThread();
    if (ready()) return;
    if ((i & 15) === 0 && probe(plan, ready)) return;
  }
  bell.beforeSleep?.();
  for (;;) {
    if (probe(plan, ready)) return;
    bell.sleepSync(slice(plan), ready);
    if (ready()) return;
  }
}

/**
 * Resolves when `ready()`: spins, yields (letting the event loop run), then sleeps on `bell`.
 * Rejects as waitSync throws; the plan's AbortSignal also ends a sleep at once.
 */
export async function waitAsync(ready: () => boolean, bell: Doorbell, plan: WaitPlan): Promise<void> {
  if (spin(ready, spinUs(plan))) return;
  const until = yieldUntil(plan);
  while (performance.now() < until) {
    // Yield and poll as waitSync does for at most WAIT.turnEveryMs (or until the deadline),
    // then let the event loop turn once. A turn before every yield cost this wait a poll of
    // libuv's fds (a system call) and a second poll of `ready()` (another system call or two on
    // the fabric) per yield: on 2 emulated hosts x 2 ranks, an awaited 8-byte allreduce back to
    // back took 77 us against this loop's 68.5 us (medians of six jobs each, alternated; the
    // blocking call 55 us in the same minutes).
    const turnBy = Math.min(until, performance.now() + WAIT.turnEveryMs);
    for (let i = 1; ; i++) {
      native.yieldThread();
      if (ready()) return;
      if (performance.now() >= turnBy) break;
      if ((i & 15) === 0) {
        if (plan.call?.deadline.expired()) break;
        plan.probe?.();
        if (ready()) return;
      }
    }
    // A wait never ends by its deadline without the event loop having turned: a caller that
    // awaits short waits in a loop must still get its timers and messages (a copyrpc test's
    // rank, waiting 1 ms at a time, took its IPC messages only this way).
    await turn();
    if (ready()) return;
    if (probe(plan, ready)) return;
  }
  bell.beforeSleep?.();
  const aborted = abortPromise(plan.call);
  try {
    for (;;) {
      if (probe(plan, ready)) return;
      const sleep = bell.sleepAsync(slice(plan), ready);
      await (aborted ? Promise.race([sleep, aborted.promise]) : sleep);
      if (ready()) return;
    }
  } finally {
    aborted?.dispose();
  }
}

/** A promise that rejects when the call's signal aborts, with a way to drop the listener. */
function abortPromise(call: WaitCall | undefined): { promise: Promise<never>; dispose(): void } | undefined {
  const signal = call?.deadline.signal;
  if (!signal) return undefined;
  let onAbort: () => void = () => {};
  const promise = new Promise<never>((_, reject) => {
    onAbort = () => reject(new WeftError('EABORTED', `${call.what}: aborted by the caller's AbortSignal`, { cause: signal.reason }));
    signal.addEventListener('abort', onAbort, { once: true });
  });
  promise.catch(() => {});
  return { promise, dispose: () => signal.removeEventListener('abort', onAbort) };
}

/** A wait plan for a one-off wait with WaitOptions (the CQ's public wait). */
export function planFor(oversubscribed: boolean, what: string, options: { timeoutMs?: number; signal?: AbortSignal }): WaitPlan {
  return { oversubscribed, call: { deadline: new Deadline(options.timeoutMs, options.signal), what } };
}

/**
 * A completion queue's public `wait` (every provider's): resolves at once when `ready()`,
 * else waits through the one loop with the caller's timeout and signal.
 */
export function waitForCompletions(ready: () => boolean, bell: Doorbell, oversubscribed: boolean, label: string, options: { timeoutMs?: number; signal?: AbortSignal }): Promise<void> {
  if (ready()) return Promise.resolve();
  return waitAsync(ready, bell, planFor(oversubscribed, `${label}: wait for completions`, options));
}

/** The blocking form of waitForCompletions. */
export function waitForCompletionsSync(ready: () => boolean, bell: Doorbell, oversubscribed: boolean, label: string, options: { timeoutMs?: number; signal?: AbortSignal }): void {
  if (ready()) return;
  waitSync(ready, bell, planFor(oversubscribed, `${label}: waitSync for completions`, options));
}

/**
 * The one waiting loop for a thread that polls several sources at once (a daemon serving
 * rings, a mesh and a completion queue): no single doorbell covers them, so a pass that
 * found nothing calls `idle()`, which spins for the first `spinUs` of an idle stretch (returns
 * at once), then yields the core until `yieldUs`, then sleeps in short slices that double
 * from 50 us up to `maxSleepUs` (every source is polled again between slices). A pass that
 * found work calls `busy()`. With more busy threads than cores (`oversubscribed`), spinning is
 * skipped and yielding lasts longer, as in waitSync.
 *
 * @example
 * const backoff = new PollBackoff({ oversubscribed: threads > cores });
 * for (;;) {
 *   const work = ipc.pollAll() + rpc.poll() + flux.poll();
 *   if (work > 0) backoff.busy(); else backoff.idle();
 * }
 */
export class PollBackoff {
  private readonly spinMs: number;
  private readonly yieldMs: number;
  private readonly maxSleepUs: number;
  private idleSince = -1;
  private sleepUs = 50;
  private readonly sleepWord = new Int32Array(new SharedArrayBuffer(4));
  /** Idle passes that yielded and that slept (for reports). */
  yields = 0;
  sleeps = 0;

  constructor(options: { oversubscribed?: boolean; maxSleepUs?: number } = {}) {
    const over = options.oversubscribed ?? false;
    this.spinMs = (over ? WAIT.oversubscribedSpinUs : WAIT.spinUs) / 1000;
    this.yieldMs = (over ? WAIT.oversubscribedYieldUs : WAIT.yieldUs) / 1000;
    this.maxSleepUs = options.maxSleepUs ?? 1000;
  }

  /** The last pass found work: the next idle stretch starts from spinning again. */
  busy(): void {
    this.idleSince = -1;
  }

  /** The last pass found nothing: spin, yield or sleep, depending on how long it has been idle. */
  idle(): void {
    const now = performance.now();
    if (this.idleSince < 0) {
      this.idleSince = now;
      this.sleepUs = 50;
    }
    const idleMs = now - this.idleSince;
    if (idleMs < this.spinMs) return;
    if (idleMs < this.spinMs + this.yieldMs) {
      this.yields++;
      native.yieldThread();
      return;
    }
    this.sleeps++;
    Atomics.wait(this.sleepWord, 0, 0, this.sleepUs / 1000);
    this.sleepUs = Math.min(this.sleepUs * 2, this.maxSleepUs);
  }
}
