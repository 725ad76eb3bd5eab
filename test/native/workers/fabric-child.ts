/**
 * Child of fabric-load.test: `fabric-child.js <mode>`, run in a scratch directory.
 *   shm        imports weft, opens an shm device; reports whether libfabric got mapped
 *   ofi-wait   opens an ofi device, reports the caught-signal mask, then blocks in waitSync
 * Reports one JSON line on stdout.
 */
import { readFileSync } from 'node:fs';

function caughtSignals(): string {
  return /SigCgt:\s*(\w+)/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? '?';
}

function fabricMapped(): boolean {
  return readFileSync('/proc/self/maps', 'utf8').includes('libfabric');
}

const mode = process.argv[2];
const before = caughtSignals();
const { createDevice } = await import('../../../src/index.js');
if (mode === 'shm') {
  const dev = await createDevice({ provider: 'shm', label: 'child' });
  console.log(JSON.stringify({ fabricMapped: fabricMapped(), before, after: caughtSignals() }));
  dev.close();
} else if (mode === 'ofi-wait') {
  const dev = await createDevice({ provider: 'ofi:tcp', label: 'child' });
  dev.createQueuePair({ peerLabel: 'nobody' });
  console.log(JSON.stringify({ fabricMapped: fabricMapped(), before, after: caughtSignals(), noBacktrace: process.env.IPATH_NO_BACKTRACE }));
  dev.cq.waitSync({ timeoutMs: 60_000 });
} else {
  throw new Error(`unknown mode ${mode}`);
}
