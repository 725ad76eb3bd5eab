/**
 * Key retirement on the fabric under faults (test/transfer/workers/retire-faults.ts): a peer
 * stopped while its paths time out, more unregisters at once than a peer's ring holds, and
 * engines opened and closed repeatedly. Each was a defect a review reproduced (a reset fabric
 * connection, requests to live buffers failed, one region leaked per open).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { native } from '../../src/native/binding.js';
import { runWeft } from '../../harness/weft-job.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const WORKER = path.join(here, 'workers', 'retire-faults.js');

function run(scenario: string, timeoutMs = 120_000): Promise<{ code: number | null; out: string }> {
  return runWeft(['run', '-n', '2', '--provider', 'ofi', WORKER, scenario], timeoutMs);
}

if (!native.ofi.available) {
  console.log('key-retirement.test: skipped: weft was built without libfabric');
} else {
  for (const [scenario, what] of [
    ['stopped', 'a stopped peer whose paths time out does not confirm: the unregister fails and keeps the key; the connection survives'],
    ['burst', '12 unregisters at once while the peer is stopped for 500 ms: all resolve, no READ of a live buffer fails'],
    ['cycles', '40 engine opens and closes: registered regions do not pile up'],
    ['closing', 'a segment closed right after a READ from it timed out: refused while its slices fly, then the owner unregisters; the connection survives'],
    ['forged', 'a control slot that claims a later record than any whole one (torn or forged): the check returns, transfers go on'],
  ] as const) {
    test(`${what} (ofi)`, async () => {
      const r = await run(scenario);
      assert.is(r.code, 0, r.out.slice(-3000));
      assert.match(r.out, /ok rank 0: /, r.out.slice(-3000));
      assert.match(r.out, /ok rank 1: /, r.out.slice(-3000));
    });
  }
}

test.run();
