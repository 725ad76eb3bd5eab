/**
 * What a runScenario worker (harness/local-group.ts) says to the parent over IPC, and the
 * one-turn pause worker loops use to let the parent's messages in.
 */

/** An event the test process can react to (relay to another rank, SIGKILL this one, ...). */
export function sendEvent(rank: number, event: string, data?: unknown): void {
  process.send!({ type: 'event', rank, event, data });
}

/** This rank's result: the scenario's return value for the test. */
export function sendResult(rank: number, result: unknown): void {
  process.send!({ type: 'result', rank, result });
}

/** Yields one event-loop turn. */
export const tick = () => new Promise<void>((r) => setImmediate(r));
