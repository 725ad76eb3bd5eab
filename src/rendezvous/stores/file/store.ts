/**
 * FileStore: the Store API on a directory every rank can see (a local dir for one host, or
 * a shared file system such as NFS or Lustre for several).
 */
import { watch, type FSWatcher } from 'node:fs';
import { link, readdir, readFile, rename, unlink, writeFile } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { WeftError } from '../../../errors.js';
import { Deadline, defaultTimeoutMs, type WaitOptions } from '../../../util/deadline.js';
import { withLock } from './lock.js';
import { prepareDirectory } from './directory.js';
import { newStats, writeDeadline, type CloseOptions, type SetOptions, type Store, type StoreStats, type WriteOptions } from '../../store.js';
import { checkDelta, checkKey, checkKeys, checkValue } from '../shared/arguments.js';
import { encodeCounter, existsError, sameBytes } from '../shared/values.js';
import { waitForKeys } from '../shared/wait-for-keys.js';

export interface FileStoreOptions {
  /** Bound of add/compareSet's wait for the lock (default WEFT_TIMEOUT_MS or 30 s). */
  opTimeoutMs?: number;
  /** Age after which a lock file of another host counts as left by a crashed process (default 30 s). */
  staleLockMs?: number;
  /** Poll of waits, for file systems whose changes fs.watch does not see (NFS): first delay and cap, ms (100, 200). */
  pollFirstMs?: number;
  pollMaxMs?: number;
}

// File names: "v.<base64url key>" values, "l.<...>" locks, "t.<pid>.<random>" temporaries.
// base64url keeps any key a safe, case-preserving file name. Every file is created 0600.
const FILE_MODE = 0o600;
const MAX_NAME = 250;

function isMissing(e: unknown): boolean {
  return (e as NodeJS.ErrnoException).code === 'ENOENT';
}

/**
 * A store whose keys are files of one directory. Writes are atomic (a temporary file renamed
 * into place; write-once by link(), which fails if the key exists); add and compareSet hold
 * a per-key lock file; waits watch the directory (fs.watch) and poll as a fallback for
 * network file systems, whose remote changes inotify does not see.
 *
 * The directory must be its user's alone (see directory.ts): a missing one is created with
 * mode 0700, an existing one that belongs to another user or that others can write is refused
 * (EINVAL naming it and the fix). Files are created 0600, so other users read no address.
 *
 * @example
 * const store = new FileStore('/shared/jobs/job-42');   // same path on every host
 * await store.set('rank/3', addr, { once: true });
 * const [a0] = await store.multiGet(['rank/0'], { timeoutMs: 60_000 });
 */
export class FileStore implements Store {
  /** File-system calls issued (`commands`) and batches of them waited for (`roundTrips`). */
  readonly stats: StoreStats = newStats();
  readonly dir: string;
  private readonly opTimeoutMs: number;
  private readonly staleLockMs: number;
  private readonly poll: { pollFirstMs: number; pollMaxMs: number };
  private watcher: FSWatcher | undefined;
  private readonly watchers = new Map<string, Set<() => void>>(); // file name -> wakers
  private closed = false;

  constructor(dir: string, options: FileStoreOptions = {}) {
    if (typeof dir !== 'string' || !dir) throw new WeftError('EINVAL', 'FileStore: dir must be a non-empty path');
    this.dir = path.resolve(dir);
    prepareDirectory(this.dir);
    this.opTimeoutMs = options.opTimeoutMs ?? defaultTimeoutMs();
    this.staleLockMs = options.staleLockMs ?? 30_000;
    this.poll = { pollFirstMs: options.pollFirstMs ?? 100, pollMaxMs: options.pollMaxMs ?? 200 };
  }

  async set(key: string, value: Uint8Array, options: SetOptions = {}): Promise<void> {
    this.check('set', key);
    checkValue('FileStore.set', key, value);
    // A local write does not wait: the options are checked (bad timeoutMs, aborted signal) only.
    writeDeadline(`FileStore ${this.dir}: set('${key}')`, options, this.opTimeoutMs);
    await this.write('set', key, value, options.once ?? false);
  }

  /** Sets each key; with `once`, a conflict removes the keys this call already wrote. */
  async multiSet(entries: [string, Uint8Array][], options: SetOptions = {}): Promise<void> {
    if (!Array.isArray(entries)) throw new WeftError('EINVAL', 'FileStore.multiSet: entries must be an array of [key, value] pairs');
    for (const e of entries) {
      this.check('multiSet', e?.[0]);
      checkValue('FileStore.multiSet', e[0], e[1]);
    }
    writeDeadline(`FileStore ${this.dir}: multiSet`, options, this.opTimeoutMs);
    const done: string[] = [];
    try {
      for (const [k, v] of entries) {
        await this.write('multiSet', k, v, options.once ?? false);
        done.push(k);
      }
    } catch (err) {
      if (options.once) await Promise.all(done.map((k) => unlink(this.file(k)).catch(() => {})));
      throw err;
    }
  }

  async get(key: string, options?: WaitOptions): Promise<Uint8Array> {
    this.check('get', key);
    return (await this.multiGet([key], options))[0];
  }

  async multiGet(keys: string[], options?: WaitOptions): Promise<Uint8Array[]> {
    checkKeys('FileStore.multiGet', keys);
    keys.forEach((k) => this.check('multiGet', k));
    const values = new Map<string, Uint8Array>();
    await this.waitFor('multiGet', keys, options, async (k) => {
      const v = await this.read(k, false);
      if (v) values.set(k, v);
      return v !== undefined;
    });
    return keys.map((k) => values.get(k) as Uint8Array);
  }

  async wait(keys: string[], options?: WaitOptions): Promise<void> {
    checkKeys('FileStore.wait', keys);
    keys.forEach((k) => this.check('wait', k));
    // Reading is as cheap as stat for rendezvous-sized values, and proves the file is complete.
    await this.waitFor('wait', keys, options, async (k) => (await this.read(k, false)) !== undefined);
  }

  async add(key: string, delta: number, options: WriteOptions = {}): Promise<number> {
    this.check('add', key);
    checkDelta('FileStore.add', key, delta);
    return this.locked('add', key, options, async () => {
      const cur = await this.read(key);
      const text = cur ? Buffer.from(cur).toString() : '0';
      if (!/^-?\d+$/.test(text)) throw new WeftError('EINVAL', `FileStore ${this.dir}: add('${key}'): the key holds a value that is not a counter`);
      const next = BigInt(text) + BigInt(delta);
      await this.replace(key, encodeCounter(next));
      return Number(next);
    });
  }

  async delete(key: string, options: WriteOptions = {}): Promise<boolean> {
    this.check('delete', key);
    writeDeadline(`FileStore ${this.dir}: delete('${key}')`, options, this.opTimeoutMs);
    this.count(1);
    try {
      await unlink(this.file(key));
      return true;
    } catch (e) {
      if (isMissing(e)) return false;
      throw this.fsError('delete', key, e);
    }
  }

  async compareSet(key: string, expected: Uint8Array, desired: Uint8Array, options: WriteOptions = {}): Promise<Uint8Array> {
    this.check('compareSet', key);
    checkValue('FileStore.compareSet', key, expected);
    checkValue('FileStore.compareSet', key, desired);
    return this.locked('compareSet', key, options, async () => {
      const cur = await this.read(key);
      const matches = cur === undefined ? expected.byteLength === 0 : sameBytes(cur, expected);
      if (!matches) return cur ?? new Uint8Array(0);
      await this.replace(key, desired);
      return desired;
    });
  }

  /** Deletes every key equal to `prefix` or under `prefix/` ('' = every key); returns how many. */
  async purge(prefix: string): Promise<number> {
    this.count(1);
    let n = 0;
    for (const name of await readdir(this.dir)) {
      if (!name.startsWith('v.')) continue;
      const key = Buffer.from(name.slice(2), 'base64url').toString();
      if (prefix && key !== prefix && !key.startsWith(`${prefix}/`)) continue;
      this.count(1);
      await unlink(path.join(this.dir, name)).then(() => n++, () => {});
    }
    return n;
  }

  /** Stops watching; `{ purge: true }` first deletes every key of the directory. */
  async close(options: CloseOptions = {}): Promise<void> {
    if (this.closed) return;
    if (options.purge) await this.purge('');
    this.closed = true;
    this.watcher?.close();
    this.watcher = undefined;
    this.watchers.clear();
  }

  // ---------------------------------------------------------------- internals

  private check(op: string, key: unknown): asserts key is string {
    if (this.closed) throw new WeftError('ECLOSED', `FileStore ${this.dir}: ${op} after close()`);
    checkKey(`FileStore.${op}`, key);
    if (this.name(key).length > MAX_NAME) throw new WeftError('EINVAL', `FileStore ${this.dir}: ${op}: key '${key.slice(0, 40)}…' is too long for a file name (keep keys under 180 bytes)`);
  }

  private count(commands: number): void {
    this.stats.commands += commands;
    this.stats.roundTrips++;
  }

  private name(key: string): string {
    return `v.${Buffer.from(key).toString('base64url')}`;
  }

  private file(key: string): string {
    return path.join(this.dir, this.name(key));
  }

  private temp(): string {
    return path.join(this.dir, `t.${process.pid}.${randomBytes(6).toString('hex')}`);
  }

  /** Reads a value (undefined if absent); `counted` false when the caller counts a batch. */
  private async read(key: string, counted = true): Promise<Uint8Array | undefined> {
    if (counted) this.count(1);
    try {
      return new Uint8Array(await readFile(this.file(key)));
    } catch (e) {
      if (isMissing(e)) return undefined;
      throw this.fsError('read', key, e);
    }
  }

  /** Atomically replaces the value: readers see the old or the new file, never a partial one. */
  private async replace(key: string, value: Uint8Array): Promise<void> {
    const tmp = this.temp();
    this.count(2);
    try {
      await writeFile(tmp, value, { mode: FILE_MODE });
      await rename(tmp, this.file(key));
    } catch (e) {
      await unlink(tmp).catch(() => {});
      throw this.fsError('write', key, e);
    }
  }

  private async write(op: string, key: string, value: Uint8Array, once: boolean): Promise<void> {
    if (!once) return this.replace(key, value);
    const tmp = this.temp();
    this.count(3);
    try {
      await writeFile(tmp, value, { mode: FILE_MODE });
      await link(tmp, this.file(key)); // fails with EEXIST if the key exists: write-once without a lock
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'EEXIST') throw existsError(`FileStore ${this.dir}: ${op}`, key, await this.read(key), value);
      throw this.fsError(op, key, e);
    } finally {
      await unlink(tmp).catch(() => {});
    }
  }

  /** Runs `fn` holding the key's lock file; waiting for it is bounded by the write's options. */
  private locked<T>(op: string, key: string, options: WriteOptions, fn: () => Promise<T>): Promise<T> {
    const lock = path.join(this.dir, `l.${this.name(key).slice(2)}`);
    const what = `FileStore ${this.dir}: ${op}('${key}')`;
    return withLock(lock, writeDeadline(what, options, this.opTimeoutMs), what, this.staleLockMs, fn);
  }

  private waitFor(op: string, keys: string[], options: WaitOptions | undefined, exists: (key: string) => Promise<boolean>): Promise<void> {
    return waitForKeys({
      what: `FileStore ${this.dir}: ${op}`,
      keys,
      options,
      ...this.poll,
      check: async (missing) => {
        this.count(missing.length);
        const found = await Promise.all(missing.map(exists));
        return missing.filter((_, i) => !found[i]);
      },
      watch: async (missing, events) => {
        const names = missing.map((k) => this.name(k));
        const wake = () => events.changed();
        for (const n of names) {
          let set = this.watchers.get(n);
          if (!set) this.watchers.set(n, (set = new Set()));
          set.add(wake);
        }
        this.startWatching();
        return () => {
          for (const n of names) {
            const set = this.watchers.get(n);
            set?.delete(wake);
            if (set?.size === 0) this.watchers.delete(n);
          }
          if (this.watchers.size === 0) this.watcher?.close(), (this.watcher = undefined);
        };
      },
    });
  }

  /** One fs.watch of the directory while waits are pending; if it fails, the waits just poll. */
  private startWatching(): void {
    if (this.watcher) return;
    try {
      this.watcher = watch(this.dir, { persistent: false }, (_event, filename) => {
        if (filename === null) {
          for (const set of this.watchers.values()) for (const w of set) w();
          return;
        }
        for (const w of this.watchers.get(filename.toString()) ?? []) w();
      });
      this.watcher.on('error', () => {
        this.watcher?.close();
        this.watcher = undefined;
      });
    } catch {
      this.watcher = undefined;
    }
  }

  private fsError(op: string, key: string, e: unknown): WeftError {
    return new WeftError('EINVAL', `FileStore ${this.dir}: ${op}('${key}') failed: ${(e as Error).message}; is the directory writable and on a file system every rank shares?`, { cause: e });
  }
}
