/**
 * connectRpcMesh through a real rendezvous store (test/rpc/workers/store-mesh.ts, scenario
 * storeMesh): three processes open the runner's password-protected redis-server under a fresh
 * prefix, connect one endpoint toward every other rank, serve, and request every other rank;
 * every answer names its responder and carries the request reversed. Ranks or sizes outside
 * [0, size) reject with EINVAL before any endpoint is created. Rank 0 purges the prefix at
 * the end.
 */
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { runScenario } from '../../harness/local-group.js';
import { openStore } from '../../src/rendezvous/open.js';
import type { PrefixStore } from '../../src/rendezvous/prefix-store.js';
import { freshPrefix, redisUrl } from '../rendezvous/backends.js';
import { WORKER, providers } from './setup.js';

interface RankResult {
  ok: number;
  wrong: string[];
  negative: { rank: number; size: number; outcome: string }[];
  endpointsAfterNegative: number;
  connectMs: number;
  eps: ({ state: string; peerLabel: string } | null)[];
}

for (const provider of providers) {
  const test = suite(`copyrpc connectRpcMesh over redis (${provider})`);
  test('3 ranks connect through the store and request each other', async () => {
    const n = 3;
    const perPeer = 20;
    const u = new URL(redisUrl());
    u.searchParams.set('prefix', freshPrefix(`rpc-mesh-${provider}`));
    const { results } = await runScenario('storeMesh', { n, provider, worker: WORKER, timeoutMs: 60_000, args: { url: u.toString(), perPeer } });
    const rs = results as RankResult[];
    for (const [rank, r] of rs.entries()) {
      assert.equal(r.wrong, [], `rank ${rank}`);
      assert.is(r.ok, (n - 1) * perPeer, `rank ${rank}: answers`);
      assert.equal(
        r.eps,
        [...Array(n).keys()].map((p) => (p === rank ? null : { state: 'ready', peerLabel: `rank ${p}` })),
        `rank ${rank}: endpoints`,
      );
      assert.is(r.endpointsAfterNegative, 0, `rank ${rank}: a rejected connectRpcMesh left endpoints behind`);
    }
    const neg = rs[0].negative;
    assert.is(neg.length, 4);
    for (const x of neg) assert.match(x.outcome, /^EINVAL: connectRpcMesh: /, `rank ${x.rank}, size ${x.size}: ${x.outcome}`);
    assert.match(neg[0].outcome, /rank 3 is outside \[0, 3\)/);
    assert.match(neg[1].outcome, /rank -1 is outside \[0, 3\)/);
    assert.match(neg[2].outcome, /rank 1.5 is outside \[0, 3\)/);
    assert.match(neg[3].outcome, /world size must be a positive integer, got 0/);
    // Rank 0 purged the job's keys once everyone was done.
    const store = (await openStore(u.toString(), { timeoutMs: 5000 })) as PrefixStore;
    try {
      assert.is(await store.purge(), 0, 'keys left under the prefix');
    } finally {
      await store.close();
    }
  });
  test.run();
}
