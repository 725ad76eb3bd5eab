// benchkv across 2 emulated hosts (network namespaces, each with its own hostname and
// /dev/shm; harness/emulated-hosts.ts), 2 ranks per host: shared memory inside a host and
// libfabric between hosts, in every thread's own copyrpc engine; every backend with --verify.
// The bench command runs on each host with --nnodes 2 --node-rank R --store, as on a cluster.
// Needs root and libfabric; elsewhere skipped with one line saying why.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { fileURLToPath } from 'node:url';
import { rmSync } from 'node:fs';
import { EmulatedHosts } from '../../harness/emulated-hosts.js';
import { startRedisOn } from '../../harness/host-jobs.js';

const BENCH = fileURLToPath(new URL('../../bench/kv/index.js', import.meta.url));
const hasOfi = (await import('../../src/native/binding.js')).native.ofi.available;
const why = EmulatedHosts.unavailable() ?? (hasOfi ? undefined : 'jobs across hosts need libfabric (apt-get install libfabric-dev, then npm rebuild)');

if (why) {
  console.log(`kv-hosts.test: skipped: ${why}`);
} else {
  let hosts: EmulatedHosts;
  test.before(async () => {
    hosts = await EmulatedHosts.create(2);
  });
  test.after(async () => {
    await hosts?.destroy();
    const left = EmulatedHosts.leftovers();
    if (left.length) throw new Error(`emulated hosts left namespaces behind: ${left.join(', ')}`);
  });

  test('benchkv on 2 hosts x 2 ranks: meta, delegation and direct with --verify clean', async () => {
    const redis = await startRedisOn(hosts, 0);
    const outs = ['', ''];
    const codes = await Promise.all(
      [0, 1].map((h) => {
        const args = [BENCH, '--ranks', '2', '--nnodes', '2', '--node-rank', String(h), '--store', redis.url, '--prefix', 'kvhosts', '--quick', '--verify', '--json', '--peers', 'none', '--daemons', '2', '--clients', '2', '--out', `/tmp/weft-kv-hosts-${h}`];
        // Both hosts share this machine's cores: say so, so the ranks know they are oversubscribed.
        const child = hosts.spawn(h, process.execPath, args, { env: { ...process.env, WEFT_STORE_PASSWORD: redis.password, WEFT_CORES: '2' } });
        child.stdout!.on('data', (d) => (outs[h] += d));
        child.stderr!.on('data', (d) => (outs[h] += d));
        return new Promise<number | null>((resolve) => {
          const timer = setTimeout(() => process.kill(-child.pid!, 'SIGKILL'), 300_000);
          child.on('exit', (code) => {
            clearTimeout(timer);
            resolve(code);
          });
        });
      }),
    );
    for (const h of [0, 1]) rmSync(`/tmp/weft-kv-hosts-${h}`, { recursive: true, force: true });
    const all = outs.map((o, i) => `--- host ${i} ---\n${o}`).join('\n');
    assert.equal(codes, [0, 0], all.slice(-4000));
    const rows = outs[0].split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));
    assert.equal(rows.map((r) => r.system), ['meta', 'delegation', 'direct'], all.slice(-4000));
    for (const r of rows) {
      assert.is(r.hosts, 2);
      assert.is(r.ranks, 4);
      assert.is(r.fabric, 'shm+ofi', 'shared memory inside a host, libfabric between hosts');
      assert.is(r.mismatches, 0);
      assert.ok(r.mops > 0);
    }
  });
}

test.run();
