/**
 * Who holds a part of a shared segment: the pid, thread id and start time of the thread that
 * created or claimed it. A worker_thread that dies leaves its process alive, so liveness is
 * judged per thread (native threadAlive reads /proc/<pid>/task/<tid>).
 */
import { native } from '../native/binding.js';

/** Int32 word offsets of an owner record inside its 64-byte line. */
export const OWNER_PID = 1;
export const OWNER_TID = 2;
export const OWNER_START_LO = 3;
export const OWNER_START_HI = 4;

let self: [number, number, number] | undefined;

/** Writes the calling thread's identity into the record at word `base` of `i32`. */
export function writeOwner(i32: Int32Array, base: number): void {
  // Per thread: each worker has its own module instance, so this cache is per thread too.
  self ??= native.threadIdentity();
  const [pid, tid, start] = self;
  i32[base + OWNER_PID] = pid;
  i32[base + OWNER_TID] = tid;
  i32[base + OWNER_START_LO] = start % 0x1_0000_0000;
  i32[base + OWNER_START_HI] = Math.floor(start / 0x1_0000_0000);
}

/** False when the thread recorded at `base` is gone (or the record holds no thread). */
export function ownerAlive(i32: Int32Array, base: number): boolean {
  const pid = i32[base + OWNER_PID];
  const tid = i32[base + OWNER_TID];
  if (pid <= 0 || tid <= 0) return false;
  const start = (i32[base + OWNER_START_LO] >>> 0) + (i32[base + OWNER_START_HI] >>> 0) * 0x1_0000_0000;
  return native.threadAlive(pid, tid, start);
}

/** "pid P thread T", for error messages. */
export function ownerLabel(i32: Int32Array, base: number): string {
  return `pid ${i32[base + OWNER_PID]} thread ${i32[base + OWNER_TID]}`;
}
