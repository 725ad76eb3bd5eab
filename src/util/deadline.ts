/** Timeout and AbortSignal handling shared by every blocking call. */
import { WeftError } from '../errors.js';

/** Options every blocking call accepts. */
export interface WaitOptions {
  /** Milliseconds before the call fails with ETIMEDOUT. */
  timeoutMs?: number;
  /** Aborts the call with EABORTED. */
  signal?: AbortSignal;
}

/** Default timeout of blocking calls, overridable with WEFT_TIMEOUT_MS. */
export function defaultTimeoutMs(): number {
  // Read once: process.env is a slow getter and this runs on every collective call.
  if (cachedMs === undefined) {
    const env = Number(process.env.WEFT_TIMEOUT_MS);
    cachedMs = Number.isFinite(env) && env > 0 ? env : 30_000;
  }
  return cachedMs;
}
let cachedMs: number | undefined;

/** The longest delay Node's timers keep (2^31 - 1 ms, 24.8 days): a longer one fires after 1 ms. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * A delay for setTimeout: at least 0, at most MAX_TIMER_MS. A timeout of Infinity (or over
 * 24.8 days) then waits 24.8 days instead of firing at once, as Node does with what it cannot
 * hold (a TimeoutOverflowWarning and 1 ms).
 */
export function timerMs(ms: number): number {
  return ms > MAX_TIMER_MS ? MAX_TIMER_MS : ms > 0 ? ms : 0;
}

/** A point in time after which a blocking call gives up. */
export class Deadline {
  readonly at: number;
  readonly timeoutMs: number;
  constructor(timeoutMs: number | undefined, readonly signal?: AbortSignal) {
    const t = timeoutMs ?? defaultTimeoutMs();
    if (typeof t !== 'number' || !(t >= 0)) throw new WeftError('EINVAL', `timeoutMs must be a non-negative number, got ${typeof t === 'string' ? JSON.stringify(t) : String(t)}`);
    this.timeoutMs = t;
    this.at = performance.now() + t;
  }
  remaining(): number {
    return this.at - performance.now();
  }
  /** The deadline passed or the signal aborted: what check() would throw for. */
  expired(): boolean {
    return this.signal?.aborted === true || performance.now() >= this.at;
  }
  /** Throws ETIMEDOUT or EABORTED when the call must stop; `what` describes the call. */
  check(what: string): void {
    if (this.signal?.aborted) throw new WeftError('EABORTED', `${what}: aborted by the caller's AbortSignal`, { cause: this.signal.reason });
    if (performance.now() >= this.at) {
      throw new WeftError('ETIMEDOUT', `${what}: timed out after ${Math.round(this.timeoutMs)} ms; raise timeoutMs (or WEFT_TIMEOUT_MS) if the peer is just slow, else check that it is alive and made the matching call`);
    }
  }
}
