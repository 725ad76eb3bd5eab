/**
 * One NIC device per process: collectives and copyrpc side by side in the same ranks (the
 * completion router hands each its own completions), and copyrpc reading a `ctx.alloc`
 * array one-sidedly (test/rpc/workers/shared-device.ts), on shm and ofi.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { providers } from './setup.js';
import { runWeft } from '../../harness/weft-job.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const RANK = path.join(here, 'workers', 'shared-device.js');

const run = (provider: string) => runWeft(['run', '-n', '2', '--provider', provider, RANK], 120_000);

for (const provider of providers) {
  test(`collectives and copyrpc share one device (${provider}): 200 rounds of allreduce while 2,000 requests run, and an rdmaRead of a ctx.alloc array`, async () => {
    const r = await run(provider);
    assert.is(r.code, 0, r.out.slice(-3000));
    const report = (k: number) => JSON.parse(new RegExp(`ok rank ${k}: (\\{.*\\})`).exec(r.out)?.[1] ?? 'null') as { checks: number; answered: number; served: number; readOk: boolean } | null;
    const [r0, r1] = [report(0), report(1)];
    assert.ok(r0 && r1, r.out.slice(-3000));
    assert.is(r0.checks, 400);
    assert.is(r1.checks, 400);
    assert.is(r0.answered, 2000);
    assert.is(r1.served, 2001);
    assert.ok(r0.readOk);
  });
}

test.run();
