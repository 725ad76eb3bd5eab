/**
 * The Store API every rendezvous backend implements (as in Gloo and torch.distributed):
 * a small key-value service the ranks of a job use to find each other. Values are bytes.
 *
 * @example
 * const store = new PrefixStore('job-42', await openStore('redis://127.0.0.1:6379'));
 * await store.set('rank/0', encoder.encode('hello'));
 * const [v] = await store.wait(['rank/1'], { timeoutMs: 10_000 }).then(() => store.multiGet(['rank/1']));
 */
import { Deadline, type WaitOptions } from '../util/deadline.js';

/**
 * Options of a write (set, multiSet, add, delete, compareSet): its bound (default: the store's
 * operation timeout, WEFT_TIMEOUT_MS or 30 s) and an AbortSignal that ends it with EABORTED.
 */
export type WriteOptions = WaitOptions;

export interface SetOptions extends WriteOptions {
  /**
   * Write-once: fail with EEXIST if the key already holds a value (the error names the key,
   * and, when the values carry them, both writers).
   */
  once?: boolean;
}

export interface Store {
  /** Stores `value` under `key`. */
  set(key: string, value: Uint8Array, options?: SetOptions): Promise<void>;
  /** The value of `key`, waiting for it to appear (bounded by the options' timeout). */
  get(key: string, options?: WaitOptions): Promise<Uint8Array>;
  /** Resolves when every key exists; the timeout error lists the missing keys. */
  wait(keys: string[], options?: WaitOptions): Promise<void>;
  /** Atomically adds `delta` to the integer counter at `key` (created at 0); returns the new value. */
  add(key: string, delta: number, options?: WriteOptions): Promise<number>;
  /** Values of existing keys, in order; waits for missing ones like `get`. One round trip where the backend allows. */
  multiGet(keys: string[], options?: WaitOptions): Promise<Uint8Array[]>;
  /** Sets several keys in one round trip where the backend allows. */
  multiSet(entries: [string, Uint8Array][], options?: SetOptions): Promise<void>;
  /** Removes a key; true if it existed. */
  delete(key: string, options?: WriteOptions): Promise<boolean>;
  /**
   * Sets `key` to `desired` if its current value equals `expected` (an empty `expected` means
   * "absent"); returns the value now stored.
   */
  compareSet(key: string, expected: Uint8Array, desired: Uint8Array, options?: WriteOptions): Promise<Uint8Array>;
  /** Releases connections (and, for servers, stops serving). */
  close(): Promise<void>;
}

/** Requests a store issued; benchmarks read these to show O(1) round trips per rank. */
export interface StoreStats {
  /** Backend commands issued (Redis commands, TcpStore frames, FileStore file-system calls). */
  commands: number;
  /** Times the caller waited for the backend to answer (a pipeline or batch counts once). */
  roundTrips: number;
}

/** Options of `close()` on every store. */
export interface CloseOptions {
  /** Also delete this job's keys first (see `purge`). On a PrefixStore: every key under its prefix. */
  purge?: boolean;
}

/**
 * The bound of a write: its own timeoutMs, else the store's operation timeout, and its signal.
 * A signal aborted already stops the write before it is sent (EABORTED).
 */
export function writeDeadline(where: string, options: WriteOptions, opTimeoutMs: number): Deadline {
  const deadline = new Deadline(options.timeoutMs ?? opTimeoutMs, options.signal);
  if (options.signal?.aborted) deadline.check(where);
  return deadline;
}

export function newStats(): StoreStats {
  return { commands: 0, roundTrips: 0 };
}
