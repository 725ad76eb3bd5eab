/**
 * Claiming a client id in a shared segment: the next never-used id (a fetch_add on the
 * header's counter), else one a departed client released. The states are the same in
 * delegationrpc and ipc: 0 free, 3 released, 5 claiming (owner not yet written).
 */
export const STATE_FREE = 0;
export const STATE_RELEASED = 3;
export const STATE_CLAIMING = 5;

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
