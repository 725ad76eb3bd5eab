/**
 * A lock file for FileStore's read-modify-write operations (add, compareSet): created with
 * O_EXCL, holding "<hostname> <pid> <time>", removed on release. A crashed holder's lock is
 * recovered when its process is gone (same host) or when it is older than `staleMs`
 * (another host: holders keep it for microseconds, so an old lock is a dead one), by one
 * contender at a time (`breakStale`).
 */
import { hostname } from 'node:os';
import { open, unlink } from 'node:fs/promises';
import { WeftError } from '../../../errors.js';
import type { Deadline } from '../../../util/deadline.js';
import { sleep } from '../shared/wait-for-keys.js';

const HOST = hostname();

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** A lock file as read: its inode and text tell one lock from the next at the same path. */
interface SeenLock {
  ino: number;
  text: string;
}

/** The lock at `path` when its holder is gone (or it is older than `staleMs`), else undefined. */
async function staleLock(path: string, staleMs: number): Promise<SeenLock | undefined> {
  const seen = await readLock(path);
  if (!seen) return undefined; // gone already: retry the lock
  const [host, pidS] = seen.text.split(' ');
  const stale = (host === HOST && pidS && !alive(Number(pidS))) || Date.now() - seen.mtimeMs > staleMs;
  return stale ? seen : undefined;
}

/**
 * The lock file's text, inode and age, all from one open file: two lookups of the path could
 * pair one lock's inode with the next one's text, and the check in breakStale would pass.
 */
async function readLock(path: string): Promise<(SeenLock & { mtimeMs: number }) | undefined> {
  let fh;
  try {
    fh = await open(path, 'r');
  } catch {
    return undefined;
  }
  try {
    const st = await fh.stat();
    return { ino: st.ino, mtimeMs: st.mtimeMs, text: await fh.readFile('utf8') };
  } catch {
    return undefined;
  } finally {
    await fh.close().catch(() => {});
  }
}

async function create(path: string): Promise<boolean> {
  try {
    const fh = await open(path, 'wx', 0o600);
    try {
      await fh.write(`${HOST} ${process.pid} ${Date.now()}`);
    } finally {
      await fh.close();
    }
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    return false;
  }
}

/**
 * Removes the stale lock `seen` at `path`, if it is still the one there. Breakers take turns
 * through `<path>.break`: several contenders judge one dead lock stale, and each used to unlink
 * "it", the later ones removing the fresh lock the first had taken since, so two held the lock
 * at once. Under the breaker's lock the lock file is read again and removed only if it is the
 * very file judged stale (inode and text). A breaker that died holding `.break` is judged the
 * same way; that judgment is not guarded again (it needs a crash while breaking).
 */
async function breakStale(path: string, seen: SeenLock, staleMs: number): Promise<void> {
  const breaker = `${path}.break`;
  if (!(await create(breaker))) {
    const dead = await staleLock(breaker, staleMs);
    if (dead) await unlink(breaker).catch(() => {});
    return;
  }
  try {
    const now = await readLock(path);
    if (now && now.text === seen.text && now.ino === seen.ino) await unlink(path).catch(() => {});
  } finally {
    await unlink(breaker).catch(() => {});
  }
}

/** Runs `fn` holding the lock at `path`; spins with short sleeps while another process holds it. */
export async function withLock<T>(path: string, deadline: Deadline, what: string, staleMs: number, fn: () => Promise<T>): Promise<T> {
  let spins = 0;
  for (;;) {
    if (await create(path)) break;
    if (deadline.signal?.aborted) deadline.check(what);
    if (deadline.remaining() <= 0) throw new WeftError('ETIMEDOUT', `${what}: the lock file ${path} stayed held for ${Math.round(deadline.timeoutMs)} ms; if no process of the job is alive, delete it`);
    if (++spins === 1 || spins % 64 === 0) {
      const seen = await staleLock(path, staleMs);
      if (seen) {
        await breakStale(path, seen, staleMs);
        continue;
      }
    }
    // Holders keep the lock for a few file operations: yield briefly, with jitter so the
    // contenders do not retry in lockstep.
    await sleep(Math.random() * Math.min(1 + spins / 4, 8));
  }
  try {
    return await fn();
  } finally {
    await unlink(path).catch(() => {});
  }
}
