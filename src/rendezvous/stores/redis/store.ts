/**
 * RedisStore: the Store API on a Redis server (ioredis), for clusters that already run one.
 */
import type { Redis, RedisOptions } from 'ioredis';
import { WeftError } from '../../../errors.js';
import { Deadline, defaultTimeoutMs, type WaitOptions } from '../../../util/deadline.js';
import { ADD, ALL_SCRIPTS, CAS, MISSING, MSET, type RedisScript } from './scripts.js';
import { RedisNotifier } from './notifier.js';
import { newStats, writeDeadline, type CloseOptions, type SetOptions, type Store, type StoreStats, type WriteOptions } from '../../store.js';
import { checkDelta, checkKey, checkKeys, checkValue } from '../shared/arguments.js';
import { existsError } from '../shared/values.js';
import { listKeys, waitForKeys, withDeadline } from '../shared/wait-for-keys.js';
import { credentialFromEnv } from '../shared/secrets.js';

export interface RedisStoreOptions extends WaitOptions {
  /**
   * Expiry of every key in seconds, refreshed on each write, so a crashed job's keys do not
   * stay forever (default 86400 = 24 h; 0 = never expire).
   */
  ttlSeconds?: number;
  /** Bound of the operations that do not take WaitOptions (set, add, ...); default WEFT_TIMEOUT_MS or 30 s. */
  opTimeoutMs?: number;
  /** Safety-net poll of waits (only covers lost notifications): first delay and cap, ms (100, 200). */
  pollFirstMs?: number;
  pollMaxMs?: number;
  /**
   * Extra ioredis options (tls settings for rediss://, ...). When neither the URL nor
   * `redis.password` has a password, it comes from the WEFT_STORE_PASSWORD environment
   * variable, else from the file WEFT_STORE_PASSWORD_FILE names: keep passwords out of URLs
   * that end up on command lines.
   */
  redis?: RedisOptions;
}

const AUTH_ERROR = /^(WRONGPASS|NOAUTH|NOPERM)/;

/** `redis://user:secret@h:1/2` -> `redis://user@h:1/2`: URLs in messages never carry the password. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    u.password = '';
    return u.toString().replace(/\/$/, '');
  } catch {
    return url.replace(/\/\/[^@/]*@/, '//');
  }
}

/**
 * With no password in the URL or the options, the password from WEFT_STORE_PASSWORD(_FILE)
 * goes into `redisOptions` (and a user name of the URL with it: ioredis lets the URL's
 * credentials, even an empty password, win over the options). Returns the URL to connect to.
 */
function withEnvPassword(url: string, redisOptions: RedisOptions, shown: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return url; // ioredis reports it
  }
  if (u.password || redisOptions.password !== undefined) return url;
  const c = credentialFromEnv('WEFT_STORE_PASSWORD', `RedisStore ${shown}`);
  if (!c) return url;
  redisOptions.password = c.value;
  if (u.username) {
    redisOptions.username ??= decodeURIComponent(u.username);
    u.username = '';
  }
  return u.toString();
}

function isConnectionError(e: unknown): boolean {
  const err = e as Error;
  return err?.name === 'MaxRetriesPerRequestError' || err?.message === 'Connection is closed.';
}

/**
 * The Store API on Redis. Write-once keys use SET NX; every write also PUBLISHes the value
 * on the key's channel (atomically, in one Lua script), and waits SUBSCRIBE to the missing
 * keys' channels, so nothing polls: a get of a present key is one GET, a multiGet of present
 * keys one MGET. Keys expire after `ttlSeconds`; `purge(prefix)` deletes a job's keys.
 * Lost connections are retried within the timeout; errors name the URL (without password),
 * the operation and the key.
 *
 * @example
 * // the password from WEFT_STORE_PASSWORD (or the file WEFT_STORE_PASSWORD_FILE names)
 * const redis = await RedisStore.connect('redis://weft@10.0.0.5:6379/3');
 * const store = new PrefixStore('job-42', redis);
 * await store.set('rank/0', addr, { once: true });
 * const peers = await store.multiGet(['rank/1', 'rank/2'], { timeoutMs: 60_000 });
 * await store.close({ purge: true }); // from one rank, once all are done
 */
export class RedisStore implements Store {
  /** Commands this store issued for its operations (connection setup not included). */
  readonly stats: StoreStats = newStats();
  /** The URL without its password. */
  readonly url: string;
  private readonly client: Redis;
  private readonly notifier: RedisNotifier;
  private readonly ttl: string;
  private readonly channelPrefix: string;
  private readonly opTimeoutMs: number;
  private readonly poll: { pollFirstMs: number; pollMaxMs: number };
  private lastError: Error | undefined;
  private closed = false;

  private constructor(RedisClient: typeof Redis, url: string, options: RedisStoreOptions) {
    this.url = redactUrl(url);
    const ttl = options.ttlSeconds ?? 86_400;
    if (!Number.isInteger(ttl) || ttl < 0) throw new WeftError('EINVAL', `RedisStore ${this.url}: ttlSeconds must be a non-negative integer, got ${ttl}`);
    this.ttl = String(ttl);
    this.opTimeoutMs = options.opTimeoutMs ?? defaultTimeoutMs();
    this.poll = { pollFirstMs: options.pollFirstMs ?? 100, pollMaxMs: options.pollMaxMs ?? 200 };
    const redisOptions: RedisOptions = {
      lazyConnect: true,
      // Reconnect forever with backoff; each operation bounds its own wait by its deadline.
      retryStrategy: (times) => Math.min(50 * 2 ** Math.min(times, 5), 1000),
      // Fail in-flight commands when the connection drops (we retry the idempotent ones
      // ourselves), instead of resending an add blindly.
      maxRetriesPerRequest: 0,
      autoResendUnfulfilledCommands: false,
      ...options.redis,
    };
    this.client = new RedisClient(withEnvPassword(url, redisOptions, this.url), redisOptions);
    this.client.on('error', (e: Error) => (this.lastError = e));
    const db = (this.client.options.db ?? 0).toString();
    this.channelPrefix = `weft:${db}:`;
    this.notifier = new RedisNotifier(() => this.client.duplicate({ lazyConnect: false, autoResubscribe: false }), this.stats);
  }

  /**
   * Connects to `redis://[user:password@]host[:port][/db]` or `rediss://...` (TLS), waiting
   * for the server within `timeoutMs` (it may still be starting). Wrong credentials fail at once.
   */
  static async connect(url: string, options: RedisStoreOptions = {}): Promise<RedisStore> {
    if (typeof url !== 'string' || !/^rediss?:\/\//i.test(url)) throw new WeftError('EINVAL', `RedisStore.connect: expected a redis:// or rediss:// URL, got ${typeof url === 'string' ? redactUrl(url) : typeof url}`);
    // Loaded here, not at import: ioredis costs every process ~70 ms to load, and most jobs
    // never use Redis.
    const { Redis: RedisClient } = await import('ioredis');
    const store = new RedisStore(RedisClient, url, options);
    const deadline = new Deadline(options.timeoutMs, options.signal);
    try {
      store.client.connect().catch(() => {}); // failures are retried; readiness is awaited below
      await store.waitReady('connect', deadline);
      // Load the scripts once so that every later write is one EVALSHA round trip.
      const pipe = store.client.pipeline();
      for (const s of ALL_SCRIPTS) pipe.script('LOAD', s.source);
      await withDeadline(pipe.exec(), deadline, () => store.timeoutError('connect', deadline));
      store.notifier.warm(); // every rank waits at least once (connectFullMesh)
    } catch (err) {
      store.client.disconnect();
      throw err;
    }
    return store;
  }

  // ---------------------------------------------------------------- Store API

  async set(key: string, value: Uint8Array, options: SetOptions = {}): Promise<void> {
    checkKey(`RedisStore.set`, key);
    checkValue('RedisStore.set', key, value);
    await this.writeMany('set', [[key, value]], options);
  }

  async multiSet(entries: [string, Uint8Array][], options: SetOptions = {}): Promise<void> {
    if (!Array.isArray(entries)) throw new WeftError('EINVAL', 'RedisStore.multiSet: entries must be an array of [key, value] pairs');
    for (const e of entries) {
      checkKey('RedisStore.multiSet', e?.[0]);
      checkValue('RedisStore.multiSet', e[0], e[1]);
    }
    if (entries.length) await this.writeMany('multiSet', entries, options);
  }

  async get(key: string, options?: WaitOptions): Promise<Uint8Array> {
    checkKey('RedisStore.get', key);
    return (await this.fetch('get', [key], options))[0];
  }

  multiGet(keys: string[], options?: WaitOptions): Promise<Uint8Array[]> {
    checkKeys('RedisStore.multiGet', keys);
    return keys.length ? this.fetch('multiGet', keys, options) : Promise.resolve([]);
  }

  async wait(keys: string[], options?: WaitOptions): Promise<void> {
    checkKeys('RedisStore.wait', keys);
    if (!keys.length) return;
    await waitForKeys({
      what: `RedisStore ${this.url}: wait`,
      keys,
      options,
      ...this.poll,
      check: async (missing, deadline) => {
        if (!missing.length) return [];
        const idx = (await this.script('wait', deadline, MISSING, missing, [])) as number[];
        return idx.map((i) => missing[i - 1]);
      },
      watch: (missing, events, deadline) => this.watch(missing, deadline, (k) => events.found(k), () => events.changed()),
    });
  }

  async add(key: string, delta: number, options: WriteOptions = {}): Promise<number> {
    checkKey('RedisStore.add', key);
    checkDelta('RedisStore.add', key, delta);
    const deadline = this.writeDeadline(options, `add('${key}')`);
    // Not idempotent: if the connection drops while it is in flight we say so rather than retry.
    return Number(await this.script(`add('${key}')`, deadline, ADD, [key], [String(delta), this.ttl, this.channelPrefix], false));
  }

  async delete(key: string, options: WriteOptions = {}): Promise<boolean> {
    checkKey('RedisStore.delete', key);
    const n = await this.exec(`delete('${key}')`, this.writeDeadline(options, `delete('${key}')`), true, () => this.client.unlink(key));
    return n > 0;
  }

  async compareSet(key: string, expected: Uint8Array, desired: Uint8Array, options: WriteOptions = {}): Promise<Uint8Array> {
    checkKey('RedisStore.compareSet', key);
    checkValue('RedisStore.compareSet', key, expected);
    checkValue('RedisStore.compareSet', key, desired);
    const out = await this.script(`compareSet('${key}')`, this.writeDeadline(options, `compareSet('${key}')`), CAS, [key], [Buffer.from(expected), Buffer.from(desired), this.ttl, this.channelPrefix]);
    return new Uint8Array(out as Buffer);
  }

  /**
   * Deletes every key equal to `prefix` or under `prefix/` (SCAN + UNLINK, in batches);
   * returns how many. Call it from one process once every rank is done with the keys.
   */
  async purge(prefix: string): Promise<number> {
    if (typeof prefix !== 'string' || !prefix) throw new WeftError('EINVAL', `RedisStore ${this.url}: purge needs a non-empty prefix (an empty one would wipe the whole database)`);
    const deadline = new Deadline(this.opTimeoutMs);
    const pattern = `${prefix.replace(/[*?[\]\\]/g, '\\$&')}/*`;
    let deleted = await this.exec(`purge('${prefix}')`, deadline, true, () => this.client.unlink(prefix));
    let cursor = '0';
    do {
      const [next, keys] = await this.exec(`purge('${prefix}')`, deadline, true, () => this.client.scan(cursor, 'MATCH', pattern, 'COUNT', 1000));
      if (keys.length) deleted += await this.exec(`purge('${prefix}')`, deadline, true, () => this.client.unlink(...keys));
      cursor = next;
    } while (cursor !== '0');
    return deleted;
  }

  /** Disconnects (after deleting every key, with `{ purge: true }`: use a PrefixStore for that). */
  async close(options: CloseOptions = {}): Promise<void> {
    if (this.closed) return;
    if (options.purge) throw new WeftError('EINVAL', `RedisStore ${this.url}: close({ purge: true }) needs a namespace; wrap the store in a PrefixStore, or call purge(prefix)`);
    this.closed = true;
    this.notifier.close();
    try {
      if (this.client.status === 'ready') await this.client.quit();
    } catch {
      // already gone
    } finally {
      this.client.disconnect();
    }
  }

  // ---------------------------------------------------------------- internals

  /** A write's bound: its own timeoutMs (else the store's operation timeout) and signal. */
  private writeDeadline(options: WriteOptions, what: string): Deadline {
    return writeDeadline(`RedisStore ${this.url}: ${what}`, options, this.opTimeoutMs);
  }

  private async writeMany(op: string, entries: [string, Uint8Array][], options: SetOptions): Promise<void> {
    const once = options.once ?? false;
    const keys = entries.map(([k]) => k);
    const what = `${op}(${listKeys(keys, 3)}${once ? ', once' : ''})`;
    const args = [this.ttl, once ? '1' : '0', this.channelPrefix, ...entries.map(([, v]) => Buffer.from(v))];
    let attempt = 0;
    const out = (await this.script(what, this.writeDeadline(options, what), MSET, keys, args, true, () => attempt++)) as [number, Buffer?];
    if (out[0] === 0) return;
    const [key, value] = entries[out[0] - 1];
    const existing = new Uint8Array(out[1] as Buffer);
    // A retry after a lost reply finds our own write: same bytes on a retried attempt is success.
    if (attempt > 1 && Buffer.compare(Buffer.from(existing), Buffer.from(value)) === 0) return;
    throw existsError(`RedisStore ${this.url}: ${op}`, key, existing, value);
  }

  /** MGET, then (only for missing keys) subscribe + re-check + wait for pushed values. */
  private async fetch(op: string, keys: string[], options?: WaitOptions): Promise<Uint8Array[]> {
    const values = new Map<string, Uint8Array>();
    const record = (k: string, v: Buffer) => values.set(k, new Uint8Array(v.buffer, v.byteOffset, v.byteLength));
    await waitForKeys({
      what: `RedisStore ${this.url}: ${op}`,
      keys,
      options,
      ...this.poll,
      check: async (missing, deadline) => {
        if (!missing.length) return [];
        const got = await this.exec(`${op}(${listKeys(missing, 3)})`, deadline, true, () => this.client.mgetBuffer(...missing));
        missing.forEach((k, i) => got[i] && record(k, got[i] as Buffer));
        return missing.filter((_, i) => !got[i]);
      },
      watch: (missing, events, deadline) =>
        this.watch(missing, deadline, (k, v) => (record(k, v), events.found(k)), () => events.changed()),
    });
    return keys.map((k) => values.get(k) as Uint8Array);
  }

  private async watch(keys: string[], deadline: Deadline, onValue: (key: string, value: Buffer) => void, onResync: () => void): Promise<() => void> {
    const byChannel = new Map(keys.map((k) => [this.channelPrefix + k, k]));
    const { confirmed, stop } = this.notifier.listen([...byChannel.keys()], (ch, v) => onValue(byChannel.get(ch) as string, v), onResync);
    try {
      await withDeadline(confirmed, deadline, () => this.timeoutError(`subscribe(${listKeys(keys, 3)})`, deadline));
    } catch (err) {
      // Subscriptions are an optimisation: without them the wait still polls; only the deadline is fatal.
      if ((err as WeftError).code === 'ETIMEDOUT' || (err as WeftError).code === 'EABORTED') {
        stop();
        throw err;
      }
    }
    return stop;
  }

  private script(what: string, deadline: Deadline, s: RedisScript, scriptKeys: string[], args: (string | Buffer)[], idempotent = true, onAttempt?: () => void): Promise<unknown> {
    return this.exec(what, deadline, idempotent, async () => {
      onAttempt?.();
      try {
        return await this.client.callBuffer('EVALSHA', [s.sha, scriptKeys.length, ...scriptKeys, ...args]);
      } catch (err) {
        // The server lost its script cache (restart, SCRIPT FLUSH): send the source once.
        if (!String((err as Error).message).startsWith('NOSCRIPT')) throw err;
        this.stats.commands++;
        this.stats.roundTrips++;
        return await this.client.callBuffer('EVAL', [s.source, scriptKeys.length, ...scriptKeys, ...args]);
      }
    });
  }

  /**
   * Runs one command within the deadline: waits for the connection if it is down, retries
   * idempotent commands whose connection dropped, and turns every failure into a WeftError.
   */
  private async exec<T>(what: string, deadline: Deadline, idempotent: boolean, send: () => Promise<T>): Promise<T> {
    for (;;) {
      if (this.closed) throw new WeftError('ECLOSED', `RedisStore ${this.url}: ${what} after close()`);
      if (this.client.status !== 'ready') await this.waitReady(what, deadline);
      this.stats.commands++;
      this.stats.roundTrips++;
      try {
        return await withDeadline(send(), deadline, () => this.timeoutError(what, deadline));
      } catch (err) {
        if (err instanceof WeftError) throw err;
        if (isConnectionError(err) && !this.closed) {
          if (idempotent) continue;
          throw new WeftError('ETRANSPORT', `RedisStore ${this.url}: the connection dropped while ${what} was in flight; it may or may not have been applied (not retried: it is not idempotent)`, { cause: err });
        }
        throw this.redisError(what, err as Error);
      }
    }
  }

  private async waitReady(what: string, deadline: Deadline): Promise<void> {
    let onReady!: () => void;
    let onError!: (e: Error) => void;
    const ready = new Promise<void>((resolve, reject) => {
      onReady = resolve;
      // A refused password will not get better with retries: fail now.
      onError = (e) => AUTH_ERROR.test(e.message) && reject(this.redisError(what, e));
      this.client.on('ready', onReady);
      this.client.on('error', onError);
    });
    try {
      if (this.client.status === 'ready') return;
      await withDeadline(ready, deadline, () => this.timeoutError(what, deadline));
    } finally {
      this.client.off('ready', onReady);
      this.client.off('error', onError);
    }
  }

  private timeoutError(what: string, deadline: Deadline): WeftError {
    if (deadline.signal?.aborted) return new WeftError('EABORTED', `RedisStore ${this.url}: ${what} aborted by the caller's AbortSignal`, { cause: deadline.signal.reason });
    const status = this.client.status;
    const last = this.lastError ? `, last error: ${this.lastError.message}` : '';
    const why = status === 'ready' ? 'Redis did not answer' : `could not reach Redis (connection ${status}${last})`;
    return new WeftError('ETIMEDOUT', `RedisStore ${this.url}: ${what}: ${why} within ${Math.round(deadline.timeoutMs)} ms; is redis-server running and reachable at that address?`, { cause: this.lastError });
  }

  private redisError(what: string, err: Error): WeftError {
    const msg = err.message ?? String(err);
    if (/^(WRONGPASS|NOAUTH)/.test(msg)) return new WeftError('EINVAL', `RedisStore ${this.url}: ${what}: Redis refused the credentials (${msg}); check the user and password in the URL (redis://user:password@host:port/db), or in WEFT_STORE_PASSWORD / WEFT_STORE_PASSWORD_FILE when the URL has none`, { cause: err });
    if (msg.startsWith('NOPERM')) return new WeftError('EINVAL', `RedisStore ${this.url}: ${what}: the Redis ACL user lacks a permission (${msg}); it needs +@read +@write +@scripting +@pubsub on the job's keys and channels`, { cause: err });
    if (/not an integer|overflow/.test(msg)) return new WeftError('EINVAL', `RedisStore ${this.url}: ${what}: the key holds a value that is not a counter (${msg})`, { cause: err });
    if (isConnectionError(err) && this.closed) return new WeftError('ECLOSED', `RedisStore ${this.url}: ${what}: the store was closed`, { cause: err });
    return new WeftError('ETRANSPORT', `RedisStore ${this.url}: ${what} failed: ${msg}`, { cause: err });
  }
}
