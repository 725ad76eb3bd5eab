// The transfer engine across 2 emulated hosts (network namespaces, each with its own hostname
// and /dev/shm; harness/emulated-hosts.ts): 2 ranks on the first host, 1 on the second, so each
// engine's paths mix shared memory (inside a host) and libfabric (between hosts) on one device.
// Random READ/WRITE batches verified byte for byte, and the misuse scenario, as on one host
// (test/transfer/workers/transfer-rank.ts). Needs root and libfabric; elsewhere skipped with one
// line saying why.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { EmulatedHosts } from '../../harness/emulated-hosts.js';
import { runOnHosts, startRedisOn, type HostStore } from '../../harness/host-jobs.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const RANK = path.resolve(here, '..', 'transfer', 'workers', 'transfer-rank.js');
const hasOfi = (await import('../../src/native/binding.js')).native.ofi.available;
const why = EmulatedHosts.unavailable() ?? (hasOfi ? undefined : 'jobs across hosts need libfabric (apt-get install libfabric-dev, then npm rebuild)');

if (why) {
  console.log(`transfer-hosts.test: skipped: ${why}`);
} else {
  let hosts: EmulatedHosts;
  let redis: HostStore;
  test.before(async () => {
    hosts = await EmulatedHosts.create(2);
    redis = await startRedisOn(hosts, 0);
  });
  test.after(async () => {
    await hosts?.destroy();
    const left = EmulatedHosts.leftovers();
    if (left.length) throw new Error(`emulated hosts left namespaces behind: ${left.join(', ')}`);
  });

  const report = (out: string, k: number) => JSON.parse(new RegExp(`ok rank ${k}: (\\{.*\\})`).exec(out)?.[1] ?? 'null');

  test('random READ/WRITE batches among 3 ranks on 2 hosts (shm inside, fabric between), verified byte for byte', async () => {
    const r = await runOnHosts(hosts, { perHost: [2, 1], script: RANK, args: ['random'], store: redis, timeoutMs: 400_000 });
    assert.equal(r.codes, [0, 0], r.out.slice(-3000));
    for (let k = 0; k < 3; k++) {
      const rep = report(r.out, k);
      assert.ok(rep && rep.requests > 60 && rep.checks > 60, r.out.slice(-3000));
      // Every rank has a peer on the other host: slices flew on the fabric, never past pathDepth.
      assert.ok(rep.peak > 0 && rep.peak <= 16, `rank ${k}: peak slices in flight on a path ${rep.peak}`);
    }
    assert.not.match(r.out, /leaked in \/dev\/shm/);
  });

  test('descriptors, INVALID requests, refusals, a late buffer and a broken path, on 2 hosts', async () => {
    const r = await runOnHosts(hosts, { perHost: [2, 1], script: RANK, args: ['misuse'], store: redis, timeoutMs: 200_000 });
    assert.equal(r.codes, [0, 0], r.out.slice(-3000));
    for (let k = 0; k < 3; k++) assert.is(report(r.out, k)?.reasons, 8, r.out.slice(-3000));
  });
}

test.run();
