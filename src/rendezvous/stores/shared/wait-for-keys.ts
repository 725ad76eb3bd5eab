/**
 * The wait loop every store backend shares (check, watch for changes, re-check, with a
 * bounded backoff poll as the safety net) whose timeout error lists the keys still missing,
 * and the deadline helpers around it.
 */
import { WeftError } from '../../../errors.js';
import { Deadline, timerMs, type WaitOptions } from '../../../util/deadline.js';

/** How long a look with timeoutMs 0 may take to answer. */
const LOOK_MS = 5000;

/** Lists keys for messages without flooding them. */
export function listKeys(keys: string[], max = 10): string {
  const shown = keys.slice(0, max).map((k) => `'${k}'`).join(', ');
  return keys.length > max ? `${shown} and ${keys.length - max} more` : shown;
}

/** The ETIMEDOUT or EABORTED error of a wait, listing what is still missing. */
export function waitError(what: string, deadline: Deadline, missing: string[], total: number): WeftError {
  const keys = `${missing.length} of ${total} key${total === 1 ? '' : 's'} still missing: ${listKeys(missing)}`;
  if (deadline.signal?.aborted) return new WeftError('EABORTED', `${what}: aborted by the caller's AbortSignal; ${keys}`, { cause: deadline.signal.reason });
  return new WeftError('ETIMEDOUT', `${what}: timed out after ${Math.round(deadline.timeoutMs)} ms; ${keys}. Are the ranks that set them running, with the same store URL and prefix? Raise timeoutMs (or WEFT_TIMEOUT_MS) if they are just slow.`);
}

/** Throws when the deadline passed or the signal fired, naming the keys still missing. */
export function checkWait(what: string, deadline: Deadline, missing: string[], total: number): void {
  if (deadline.signal?.aborted || deadline.remaining() <= 0) throw waitError(what, deadline, missing, total);
}

/** How a backend tells the wait loop that keys may have appeared. */
export interface WatchEvents {
  /** `key` now exists (its value, if needed, was recorded by the backend). */
  found(key: string): void;
  /** Something changed (or a notification may have been lost): re-check the missing keys. */
  changed(): void;
}

export interface WaitSpec {
  /** Describes the call for error messages, e.g. "RedisStore(redis://h:6379/0).wait". */
  what: string;
  keys: string[];
  options?: WaitOptions;
  /** Looks the keys up (recording values if the caller needs them); returns those still missing. */
  check(missing: string[], deadline: Deadline): Promise<string[]>;
  /** Starts watching the keys; returns the function that stops it. */
  watch(missing: string[], events: WatchEvents, deadline: Deadline): Promise<() => void>;
  /** Safety-net poll: first delay and cap of its exponential backoff, in ms. */
  pollFirstMs: number;
  pollMaxMs: number;
}

/**
 * Waits until every key exists. One check first (the fast path: one round trip when all are
 * there), then watch and re-check (closing the race between the two), then sleep until a
 * notification or the backoff timer; the timer only covers lost notifications.
 */
export async function waitForKeys(spec: WaitSpec): Promise<void> {
  const deadline = new Deadline(spec.options?.timeoutMs, spec.options?.signal);
  const missing = new Set(spec.keys);
  try {
    await waitLoop(spec, deadline, missing);
  } catch (err) {
    // A backend call cut short by the deadline: still say which keys were missing, plus what
    // the backend saw (e.g. "could not reach Redis").
    const c = (err as WeftError).code;
    if ((c === 'ETIMEDOUT' || c === 'EABORTED') && (deadline.signal?.aborted || deadline.remaining() <= 0) && !/still missing/.test((err as Error).message)) {
      const e = waitError(spec.what, deadline, [...missing], spec.keys.length);
      throw new WeftError(e.code, `${e.message} (${(err as Error).message})`, { cause: err });
    }
    throw err;
  }
}

async function waitLoop(spec: WaitSpec, deadline: Deadline, missing: Set<string>): Promise<void> {
  const total = spec.keys.length;
  if (deadline.signal?.aborted) throw waitError(spec.what, deadline, [...missing], total);
  // timeoutMs 0 means "look once, do not wait": the look itself still gets time to answer
  // (a Redis round trip raced against a 0 ms deadline always lost: get(k, { timeoutMs: 0 })
  // failed for keys that existed).
  const look = deadline.timeoutMs === 0 ? new Deadline(LOOK_MS, deadline.signal) : deadline;
  const first = new Set(await spec.check([...missing], look));
  for (const k of [...missing]) if (!first.has(k)) missing.delete(k);
  if (missing.size === 0) return;
  checkWait(spec.what, deadline, [...missing], total);

  let wake: (() => void) | undefined;
  let dirty = false;
  const events: WatchEvents = {
    found(key) {
      if (missing.delete(key)) wake?.();
    },
    changed() {
      dirty = true;
      wake?.();
    },
  };
  const stop = await spec.watch([...missing], events, deadline);
  try {
    const recheck = async () => {
      // A notification may have emptied the set since the last look: MGET with no keys is an error.
      if (missing.size === 0) return;
      const still = new Set(await spec.check([...missing], deadline));
      for (const k of [...missing]) if (!still.has(k)) missing.delete(k);
    };
    dirty = true; // the watch may have started after a set: look once more
    let delay = spec.pollFirstMs;
    for (;;) {
      if (dirty && deadline.remaining() > 0 && !deadline.signal?.aborted) {
        dirty = false;
        await recheck();
      }
      if (missing.size === 0) return;
      checkWait(spec.what, deadline, [...missing], total);
      const reason = await nap(Math.min(delay, deadline.remaining()), deadline.signal, (w) => (wake = w));
      wake = undefined;
      if (reason === 'timer') {
        dirty = true;
        delay = Math.min(delay * 2, spec.pollMaxMs);
      }
    }
  } finally {
    stop();
  }
}

/** Sleeps `ms`, or until woken or aborted; says which. */
export function nap(ms: number, signal: AbortSignal | undefined, register: (wake: () => void) => void): Promise<'timer' | 'wake' | 'abort'> {
  return new Promise((resolve) => {
    const done = (why: 'timer' | 'wake' | 'abort') => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      resolve(why);
    };
    const onAbort = () => done('abort');
    if (signal?.aborted) return resolve('abort');
    const timer = setTimeout(() => done('timer'), timerMs(ms));
    signal?.addEventListener('abort', onAbort, { once: true });
    register(() => done('wake'));
  });
}

/** Sleeps `ms` or until the signal aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return nap(ms, signal, () => {}).then(() => undefined);
}

/**
 * Races `work` against the deadline: the returned promise rejects with `onTimeout()` when
 * the deadline passes or the signal fires first. The work itself is not cancelled.
 */
export function withDeadline<T>(work: Promise<T>, deadline: Deadline, onTimeout: () => WeftError): Promise<T> {
  if (deadline.signal?.aborted || deadline.remaining() <= 0) {
    work.catch(() => {});
    return Promise.reject(onTimeout());
  }
  return new Promise<T>((resolve, reject) => {
    const finish = () => {
      clearTimeout(timer);
      deadline.signal?.removeEventListener('abort', onAbort);
    };
    const onAbort = () => (finish(), reject(onTimeout()));
    const timer = setTimeout(onAbort, timerMs(deadline.remaining()));
    deadline.signal?.addEventListener('abort', onAbort, { once: true });
    work.then(
      (v) => (finish(), resolve(v)),
      (e) => (finish(), reject(e)),
    );
  });
}
