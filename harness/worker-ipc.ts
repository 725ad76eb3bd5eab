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

/**
 * Runs a worker's `main` and reports for runScenario: its result (then exits once the parent
 * releases every rank, so no rank takes its memory away from a peer still reading it), or its
 * error.
 *
 * @example
 * runWorker(rank, async () => ({ gbps: await measure() }));
 */
export function runWorker(rank: number, main: () => Promise<unknown>): void {
  const released = new Promise<void>((resolve) => process.on('message', (m: { type: string }) => m.type === 'release' && resolve()));
  main()
    .then(async (result) => {
      sendResult(rank, result);
      await released;
      process.exit(0);
    })
    .catch((err: Error) => process.send!({ type: 'error', rank, message: err.stack ?? String(err) }, () => process.exit(1)));
}
