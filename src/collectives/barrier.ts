/** barrier: nobody leaves before everybody arrived (dissemination: ceil(log2 n) rounds of 0-byte messages). */
import { makeComm, runAsync, runSync, type Algorithm, type CollectiveOptions, type Comm, type Group } from './comm.js';

const EMPTY = new Uint8Array(0);

function* dissemination(c: Comm): Algorithm {
  const n = c.size;
  for (let k = 1; k < n; k <<= 1) yield [c.recv((c.rank - k + n) % n, EMPTY), c.send((c.rank + k) % n, EMPTY)];
}

/**
 * @example
 * await barrier(ctx);   // every rank got here
 */
export async function barrier(g: Group, options: CollectiveOptions = {}): Promise<void> {
  const c = makeComm(g, 'barrier', options);
  await runAsync(c, dissemination(c));
}

export function barrierSync(g: Group, options: CollectiveOptions = {}): void {
  const c = makeComm(g, 'barrier', options);
  runSync(c, dissemination(c));
}
