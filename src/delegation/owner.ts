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

/**
 * Writes the calling thread's identity into the record at word `base` of `i32`. The pid goes
 * last, with release order: a reader that loads a nonzero pid with Atomics sees the whole
 * record (a claimed id's reaper tells "not written yet" from "written" by the pid).
 */
export function writeOwner(i32: Int32Array, base: number): void {
  // Per thread: each worker has its own module instance, so this cache is per thread too.
  self ??= native.threadIdentity();
  const [pid, tid, start] = self;
  i32[base + OWNER_TID] = tid;
  i32[base + OWNER_START_LO] = start % 0x1_0000_0000;
  i32[base + OWNER_START_HI] = Math.floor(start / 0x1_0000_0000);
  Atomics.store(i32, base + OWNER_PID, pid);
}

/**
 * Empties the record at `base` (pid first), before an id is released: the id's next claimer
 * is then "not written yet" until it wrote its own, never its predecessor (dead, maybe).
 */
export function clearOwner(i32: Int32Array, base: number): void {
  Atomics.store(i32, base + OWNER_PID, 0);
  i32[base + OWNER_TID] = 0;
  i32[base + OWNER_START_LO] = 0;
  i32[base + OWNER_START_HI] = 0;
}

/** Whether the thread (pid, tid, start time in two words) still lives; false for no thread. */
export function threadAlive(pid: number, tid: number, startLo: number, startHi: number): boolean {
  if (pid <= 0 || tid <= 0) return false;
  return native.threadAlive(pid, tid, (startLo >>> 0) + (startHi >>> 0) * 0x1_0000_0000);
}

/** False when the thread recorded at `base` is gone (or the record holds no thread). */
export function ownerAlive(i32: Int32Array, base: number): boolean {
  return threadAlive(i32[base + OWNER_PID], i32[base + OWNER_TID], i32[base + OWNER_START_LO], i32[base + OWNER_START_HI]);
}

/** "pid P thread T", for error messages. */
export function ownerLabel(i32: Int32Array, base: number): string {
  return `pid ${i32[base + OWNER_PID]} thread ${i32[base + OWNER_TID]}`;
}
