/**
 * PrefixStore: one job's (or one sub-group's) namespace inside a shared store.
 */
import { WeftError } from '../errors.js';
import type { WaitOptions } from '../util/deadline.js';
import { newStats, type CloseOptions, type SetOptions, type Store, type StoreStats, type WriteOptions } from './store.js';
import { checkKey, checkKeys } from './stores/shared/arguments.js';

/** A store that can delete every key under a prefix (all weft backends can). */
export interface PurgeableStore extends Store {
  /** Deletes every key equal to `prefix` or under `prefix/`; returns how many. */
  purge(prefix: string): Promise<number>;
  readonly stats?: StoreStats;
}

function isPurgeable(s: Store): s is PurgeableStore {
  return typeof (s as Partial<PurgeableStore>).purge === 'function';
}

export interface PrefixStoreOptions {
  /** Close the wrapped store when this one closes (default true: the usual one store per job). */
  closeInner?: boolean;
}

/** Refuses a prefix that is not a non-empty string. */
function checkPrefix(where: string, prefix: string): void {
  if (typeof prefix !== 'string' || prefix.length === 0) throw new WeftError('EINVAL', `${where}: the prefix must be a non-empty string (e.g. a job id)`);
}

/**
 * Refuses a job prefix with '/': the job's keys are `<prefix>/...`, so purging job `a` (every
 * key under `a/`) would also delete the keys, claims included, of a job named `a/b`.
 */
export function checkJobPrefix(where: string, prefix: string): void {
  checkPrefix(where, prefix);
  if (prefix.includes('/')) throw new WeftError('EINVAL', `${where}: the job prefix ${JSON.stringify(prefix)} contains '/': ending a job named ${JSON.stringify(prefix.slice(0, prefix.indexOf('/')))} would delete this job's keys with its own; use '-' or '.' instead`);
}

/**
 * Namespaces every key as `<prefix>/<key>` and forwards to the wrapped store, so two jobs (or
 * two runs of one job) sharing a Redis or a directory never see each other's keys.
 *
 * @example
 * const store = new PrefixStore(`job-${jobId}`, await openStore('redis://127.0.0.1:6379'));
 * await store.set('rank/0', addr, { once: true });   // Redis key "job-123/rank/0"
 * await store.close({ purge: true });                // deletes job-123/* and disconnects
 */
export class PrefixStore implements PurgeableStore {
  readonly prefix: string;
  readonly inner: Store;
  private readonly closeInner: boolean;

  constructor(prefix: string, store: Store, options: PrefixStoreOptions = {}) {
    checkPrefix('PrefixStore', prefix);
    if (!store || typeof store.set !== 'function') throw new WeftError('EINVAL', `PrefixStore('${prefix}'): the second argument must be a Store`);
    this.prefix = prefix;
    this.inner = store;
    this.closeInner = options.closeInner ?? true;
  }

  /** The wrapped store's counters (shared with every other user of that store). */
  get stats(): StoreStats {
    return (this.inner as { stats?: StoreStats }).stats ?? newStats();
  }

  // Checked here: once prefixed, an empty or non-string key would look valid to the inner store.
  private k(key: string): string {
    checkKey(`PrefixStore('${this.prefix}')`, key);
    return `${this.prefix}/${key}`;
  }

  private ks(keys: string[]): string[] {
    checkKeys(`PrefixStore('${this.prefix}')`, keys);
    return keys.map((k) => this.k(k));
  }

  async set(key: string, value: Uint8Array, options?: SetOptions): Promise<void> {
    return this.inner.set(this.k(key), value, options);
  }
  async get(key: string, options?: WaitOptions): Promise<Uint8Array> {
    return this.inner.get(this.k(key), options);
  }
  async wait(keys: string[], options?: WaitOptions): Promise<void> {
    return this.inner.wait(this.ks(keys), options);
  }
  async add(key: string, delta: number, options?: WriteOptions): Promise<number> {
    return this.inner.add(this.k(key), delta, options);
  }
  async multiGet(keys: string[], options?: WaitOptions): Promise<Uint8Array[]> {
    return this.inner.multiGet(this.ks(keys), options);
  }
  async multiSet(entries: [string, Uint8Array][], options?: SetOptions): Promise<void> {
    if (!Array.isArray(entries)) throw new WeftError('EINVAL', `PrefixStore('${this.prefix}').multiSet: entries must be an array of [key, value] pairs`);
    return this.inner.multiSet(entries.map((e) => [this.k(e?.[0]), e[1]]), options);
  }
  async delete(key: string, options?: WriteOptions): Promise<boolean> {
    return this.inner.delete(this.k(key), options);
  }
  async compareSet(key: string, expected: Uint8Array, desired: Uint8Array, options?: WriteOptions): Promise<Uint8Array> {
    return this.inner.compareSet(this.k(key), expected, desired, options);
  }

  /** Deletes the keys under `<prefix>/<sub>` (or this whole namespace when `sub` is empty). */
  async purge(sub = ''): Promise<number> {
    if (!isPurgeable(this.inner)) throw new WeftError('ENOTSUP', `PrefixStore('${this.prefix}').purge: the wrapped store has no purge()`);
    return this.inner.purge(sub ? this.k(sub) : this.prefix);
  }

  /**
   * Closes the wrapped store (unless `closeInner: false`); with `{ purge: true }` first deletes
   * every key of this namespace. Purge from one process once every rank is done with the keys.
   */
  async close(options: CloseOptions = {}): Promise<void> {
    try {
      if (options.purge) await this.purge();
    } finally {
      if (this.closeInner) await this.inner.close();
    }
  }
}
