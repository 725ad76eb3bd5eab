/**
 * A lock file for FileStore's read-modify-write operations (add, compareSet): created with
 * O_EXCL, holding "<hostname> <pid> <time>", removed on release. A crashed holder's lock is
 * recovered when its process is gone (same host) or when it is older than `staleMs`
 * (another host: holders keep it for microseconds, so an old lock is a dead one).
 */
import { hostname } from 'node:os';
import { open, readFile, stat, unlink } from 'node:fs/promises';
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

async function isStale(path: string, staleMs: number): Promise<boolean> {
  try {
    const [text, st] = await Promise.all([readFile(path, 'utf8'), stat(path)]);
    const [host, pidS] = text.split(' ');
    if (host === HOST && pidS && !alive(Number(pidS))) return true;
    return Date.now() - st.mtimeMs > staleMs;
  } catch {
    return false; // gone already, or half-written by its creator: retry the lock
  }
}

/** Runs `fn` holding the lock at `path`; spins with short sleeps while another process holds it. */
export async function withLock<T>(path: string, deadline: Deadline, what: string, staleMs: number, fn: () => Promise<T>): Promise<T> {
  let spins = 0;
  for (;;) {
    try {
      const fh = await open(path, 'wx', 0o600);
      try {
        await fh.write(`${HOST} ${process.pid} ${Date.now()}`);
      } finally {
        await fh.close();
      }
      break;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
    if (deadline.remaining() <= 0) throw new WeftError('ETIMEDOUT', `${what}: the lock file ${path} stayed held for ${Math.round(deadline.timeoutMs)} ms; if no process of the job is alive, delete it`);
    if ((++spins === 1 || spins % 64 === 0) && (await isStale(path, staleMs))) {
      await unlink(path).catch(() => {});
      continue;
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
