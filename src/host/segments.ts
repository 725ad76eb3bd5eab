/**
 * Names, creation and sweeping of /dev/shm segments. A name carries the owner's pid and start
 * time (`/weft.<job>.<pid>.<start>.<dev>.<kind>`), so any weft process can tell a segment whose
 * owner is gone and unlink it: a crashed rank must not leak /dev/shm.
 */
import { readdirSync } from 'node:fs';
import { isMainThread } from 'node:worker_threads';
import { native } from '../native/binding.js';
import { localIdentity } from './identity.js';
import { WeftError } from '../errors.js';

const JOB_RE = /^[A-Za-z0-9_-]{1,48}$/;
const NAME_RE = /^weft\.([A-Za-z0-9_-]{1,48})\.(\d+)\.(\d+)\.([A-Za-z0-9]+)\.([A-Za-z0-9]+)$/;

/** Validates a job name (it scopes segment names). */
export function checkJob(job: string): string {
  if (!JOB_RE.test(job)) throw new WeftError('EINVAL', `job name ${JSON.stringify(job)} must be 1-48 characters of [A-Za-z0-9_-]`);
  return job;
}

/** The segment name prefix of one device of this process. */
export function devicePrefix(job: string, device: string): string {
  const id = localIdentity();
  return `/weft.${checkJob(job)}.${id.pid}.${id.startTime}.${device}`;
}

/** Parsed parts of a weft segment name, or undefined for other names. */
export function parseSegmentName(name: string): { job: string; pid: number; startTime: number; device: string; kind: string } | undefined {
  const m = NAME_RE.exec(name.startsWith('/') ? name.slice(1) : name);
  if (!m) return undefined;
  return { job: m[1], pid: Number(m[2]), startTime: Number(m[3]), device: m[4], kind: m[5] };
}

/** Weft segments currently in /dev/shm (names with a leading slash). */
export function listSegments(): string[] {
  try {
    return readdirSync('/dev/shm').filter((n) => n.startsWith('weft.')).map((n) => `/${n}`);
  } catch {
    return [];
  }
}

/**
 * Unlinks every weft segment whose owner process is gone (or whose pid was recycled), or,
 * with `pid`, those of that process only. Returns the names removed.
 */
export function sweepDeadSegments(pid?: number): string[] {
  const removed: string[] = [];
  for (const name of listSegments()) {
    const p = parseSegmentName(name);
    if (!p || (pid !== undefined && p.pid !== pid)) continue;
    if (native.processAlive(p.pid, p.startTime)) continue;
    try {
      if (native.shmUnlink(name)) removed.push(name);
    } catch {
      // Another process may own it under a different uid; not ours to remove.
    }
  }
  return removed;
}

/**
 * Creates a segment (0600, exclusive) and maps it. With `threadOwned`, a worker thread that
 * ends (terminated, or on an exception) before unlinking it still removes it: its process
 * lives on, so sweepDeadSegments would not.
 */
export function createSegment(name: string, bytes: number, threadOwned = false): SharedArrayBuffer {
  try {
    const sab = native.shmCreate(name, bytes);
    if (threadOwned && !isMainThread) native.shmUnlinkAtExit(name, true);
    return sab;
  } catch (err) {
    const e = err as { code?: string; message?: string };
    const hint = e.code === 'ENOSPC' || e.code === 'ENOMEM' ? ' (/dev/shm is full: free space or raise its size, e.g. docker --shm-size)' : '';
    throw new WeftError('ETRANSPORT', `cannot create shared-memory segment ${name} of ${bytes} bytes: ${e.message}${hint}`, { cause: err });
  }
}

/** Maps an existing segment. */
export function openSegment(name: string): SharedArrayBuffer {
  return native.shmOpen(name);
}

/** Unlinks a segment; missing is fine. */
export function unlinkSegment(name: string): void {
  if (!isMainThread) native.shmUnlinkAtExit(name, false);
  try {
    native.shmUnlink(name);
  } catch {
    // Already gone or not ours: nothing to release.
  }
}
