/**
 * A client id's life in a shared segment: claiming it (the next never-used id, a fetch_add on
 * the header's counter, else one a departed client released) and reaping it when its thread
 * died. The states are the same in delegationrpc and ipc: 0 free, 1 attached, 2 dead,
 * 3 released, 4 closing, 5 claiming (owner maybe not yet written), 6 reaping (the server
 * holds it for an instant, see reapIfDead).
 */
import { OWNER_PID, OWNER_START_HI, OWNER_START_LO, OWNER_TID, threadAlive } from './owner.js';

export const STATE_FREE = 0;
export const STATE_DEAD = 2;
export const STATE_RELEASED = 3;
export const STATE_CLAIMING = 5;
export const STATE_REAPING = 6;

/** Returns the claimed id (its state word now CLAIMING), or -1 when all `max` are taken. */
export function claimId(i32: Int32Array, counterWord: number, max: number, stateWord: (id: number) => number): number {
  const next = Atomics.add(i32, counterWord, 1);
  if (next >= 0 && next < max && Atomics.compareExchange(i32, stateWord(next), STATE_FREE, STATE_CLAIMING) === STATE_FREE) return next;
  if (next >= max) Atomics.sub(i32, counterWord, 1); // keep the counter from creeping
  for (let c = 0; c < max; c++) {
    if (Atomics.compareExchange(i32, stateWord(c), STATE_RELEASED, STATE_CLAIMING) === STATE_RELEASED) return c;
  }
  return -1;
}

/** What reapIfDead found. */
export const REAP_ALIVE = 0;
export const REAP_DEAD = 1;
export const REAP_RACED = 2;

/**
 * The reaper's step for the id whose line starts at word `line` (state at +0, owner words at
 * +1..4), which the caller saw in state `from`. Returns REAP_DEAD after moving the state to
 * DEAD when the owner's thread is gone; REAP_ALIVE when it lives (or its owner words read
 * pid 0: not yet written, or being cleared); REAP_RACED when the id changed hands meanwhile
 * (left as is).
 *
 * Checking liveness takes microseconds (/proc), during which the owner may release the id
 * and another thread claim it: a plain CAS from→DEAD would then kill the new owner (ABA). So
 * the state is first taken to REAPING (no client moves an id out of it but its live owner's
 * close(), and claimers take only FREE and RELEASED), and the owner words are compared with
 * those found dead: whoever stored `from` wrote its words before, so they are stable now.
 */
export function reapIfDead(i32: Int32Array, line: number, from: number): number {
  const pid = Atomics.load(i32, line + OWNER_PID);
  // pid 0: a claimer that has not written its words yet (ids are released with them cleared,
  // so never a dead predecessor), or an owner clearing them in close(). Both live; and words
  // all 0 would compare equal below while that owner still stores its state.
  if (pid === 0) return REAP_ALIVE;
  const tid = i32[line + OWNER_TID];
  const lo = i32[line + OWNER_START_LO];
  const hi = i32[line + OWNER_START_HI];
  if (threadAlive(pid, tid, lo, hi)) return REAP_ALIVE;
  if (Atomics.compareExchange(i32, line, from, STATE_REAPING) !== from) return REAP_RACED;
  if (Atomics.load(i32, line + OWNER_PID) === pid && i32[line + OWNER_TID] === tid && i32[line + OWNER_START_LO] === lo && i32[line + OWNER_START_HI] === hi) {
    Atomics.store(i32, line, STATE_DEAD); // the dead owner writes nothing more
    return REAP_DEAD;
  }
  // A new owner stored `from`: give it back, unless its close() already moved on.
  Atomics.compareExchange(i32, line, STATE_REAPING, from);
  return REAP_RACED;
}
