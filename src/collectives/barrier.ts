/**
 * barrier: nobody leaves before everybody arrived. On one host over shm (untagged calls), an
 * empty call on the board: every rank publishes a sequence number and waits for everyone's,
 * one cache line per peer. Otherwise dissemination: ceil(log2 n) rounds of 0-byte messages.
 */
import { agreement, CHECK_CALLS } from './agreement.js';
import { beginCall, driveAsync, driveSync, refused, runAsync, runSync, type Algorithm, type CollectiveOptions, type CollectiveCall, type Group } from './call.js';

const EMPTY = new Uint8Array(0);

function* dissemination(c: CollectiveCall): Algorithm {
  const n = c.size;
  for (let k = 1; k < n; k <<= 1) yield [c.recv((c.rank - k + n) % n, EMPTY), c.send((c.rank + k) % n, EMPTY)];
}

/**
 * The job's board when this barrier may use it (see allreduce: board calls pair up in call
 * order, so not for tagged calls). A host board is the hierarchical barrier's (hierarchical.ts).
 */
function boardFor(g: Group, options: CollectiveOptions) {
  if (g.size <= 1 || options.tag) return undefined;
  return g.transport.board;
}

/**
 * @example
 * await barrier(ctx);   // every rank got here
 */
function begin(g: Group, options: CollectiveOptions): CollectiveCall {
  try {
    return beginCall(g, 'barrier', options);
  } catch (err) {
    throw refused(g, err);
  }
}

export async function barrier(g: Group, options: CollectiveOptions = {}): Promise<void> {
  const c = begin(g, options);
  const board = boardFor(g, options);
  if (!board) return runAsync(c, dissemination(c));
  if (CHECK_CALLS) await driveAsync(c, agreement(c));
  await board.exchangeAsync(EMPTY, c.sig, c);
  c.device.markFinished(c.slot, c.call);
}

export function barrierSync(g: Group, options: CollectiveOptions = {}): void {
  const c = begin(g, options);
  const board = boardFor(g, options);
  if (!board) return runSync(c, dissemination(c));
  if (CHECK_CALLS) driveSync(c, agreement(c));
  board.exchangeSync(EMPTY, c.sig, c);
  c.device.markFinished(c.slot, c.call);
}
