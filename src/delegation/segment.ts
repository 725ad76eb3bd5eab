/**
 * The /dev/shm segments of the delegation layer: named per job and per creating thread
 * (`/weft.<job>.<pid>.<start>.t<thread>n<k>.<kind>`), so host/segments.ts sweeps them once
 * their creator's process is gone, like every other weft segment.
 */
import { threadId } from 'node:worker_threads';
import { WeftError } from '../errors.js';
import { native } from '../native/binding.js';
import { createSegment, devicePrefix, openSegment, unlinkSegment } from '../host/segments.js';

let made = 0;

/** The job name segments are filed under when the caller names none. */
export function defaultJob(): string {
  return process.env.WEFT_JOB ?? 'weft';
}

/** Creates a fresh segment of `bytes` for `kind` ('dlgrpc', 'ipc', 'flux'); returns name and memory. */
export function createLayerSegment(job: string, kind: string, bytes: number): { name: string; sab: SharedArrayBuffer } {
  const name = `${devicePrefix(job, `t${threadId}n${made++}`)}.${kind}`;
  const sab = createSegment(name, bytes);
  // A server that ends on an exception, or a worker terminated before close(), must not
  // leave its segment behind; a SIGKILLed process is for sweepDeadSegments.
  native.shmUnlinkAtExit(name, true);
  return { name, sab };
}

/** Unlinks a segment made by createLayerSegment (its owner's close()). */
export function removeLayerSegment(name: string): void {
  native.shmUnlinkAtExit(name, false);
  unlinkSegment(name);
}

/** Maps the segment `name` made by a server of `what`; a clear error when it is not there. */
export function openLayerSegment(name: string, what: string): SharedArrayBuffer {
  if (typeof name !== 'string' || !name.startsWith('/')) throw new WeftError('EINVAL', `${what}: segment name must be a string starting with '/', got ${JSON.stringify(name)}`);
  try {
    return openSegment(name);
  } catch (err) {
    const e = err as { code?: string; message?: string };
    const hint = e.code === 'ENOENT' ? ': no such segment (is the server running, and is this the name it reported?)' : `: ${e.message}`;
    throw new WeftError(e.code === 'ENOENT' ? 'EPEERDEAD' : 'EINVAL', `${what}: cannot open ${name}${hint}`, { cause: err });
  }
}

/** Rounds up to a multiple of 64 (a cache line). */
export function line(bytes: number): number {
  return (bytes + 63) & ~63;
}

/** True for 1, 2, 4, ... */
export function isPowerOfTwo(n: number): boolean {
  return Number.isInteger(n) && n > 0 && (n & (n - 1)) === 0;
}
