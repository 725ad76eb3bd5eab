/**
 * Host records (rendezvous/hosts.ts): what each rank says about its host, the checks on a
 * peer's record, and the facts every rank derives from the same records (local ranks, hosts
 * with more ranks than cores), which plans rely on to agree without a message.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { decodeRankHost, encodeRankHost, HostMap, type RankHost } from '../../src/rendezvous/hosts.js';

const A = 'a'.repeat(32);
const B = 'b'.repeat(32);
const rec = (hostId: string, cores: number, cpus = ''): RankHost => ({ hostId, hostName: 'node-a', address: '10.0.0.1', cores, cpus });
const text = (s: string) => new TextEncoder().encode(s);

test('a record round-trips, cores and CPU list included; a core count past what a record may say is sent as the most it may', () => {
  for (const h of [rec(A, 48), rec(A, 1, '3'), rec(B, 8, '0-3,8,10-12')]) assert.equal(decodeRankHost(encodeRankHost(h), 1, 0), h);
  assert.is(decodeRankHost(encodeRankHost(rec(A, 5e9)), 1, 0).cores, 1 << 20);
});

test("a peer's malformed record is refused with EPROTO, naming the peer; one from the version before says so", () => {
  const bad: [string, RegExp][] = [
    [`WHS1\n${A}\nnode-a\n10.0.0.1`, /rank 0: the host record of rank 3 is malformed \(a weft version without cores in it: run the same weft on every host\)/],
    [`WHS2\n${A}\nnode-a\n10.0.0.1\n2`, /bad magic or field count/],
    [`WHS2\n${A}\nnode-a\n10.0.0.1\n0\n`, /bad core count/],
    [`WHS2\n${A}\nnode-a\n10.0.0.1\n-2\n`, /bad core count/],
    [`WHS2\n${A}\nnode-a\n10.0.0.1\n1.5\n`, /bad core count/],
    [`WHS2\n${A}\nnode-a\n10.0.0.1\n\n`, /bad core count/],
    [`WHS2\n${A}\nnode-a\n10.0.0.1\n99999999\n`, /bad core count/],
    [`WHS2\n${A}\nnode-a\n10.0.0.1\n2000000\n`, /bad core count/],
    [`WHS2\n${A}\nnode-a\n10.0.0.1\n01\n`, /bad core count/],
    [`WHS2\n${A}\nnode-a\n10.0.0.1\n2\n3-1`, /bad CPU list/],
    [`WHS2\n${A}\nnode-a\n10.0.0.1\n2\n0,,1`, /bad CPU list/],
    [`WHS2\n${A}\nnode-a\n10.0.0.1\n2\n0-99999999`, /bad CPU list/],
    [`WHS2\n${A}\nnode-a\n10.0.0.1\n2\n${'1,'.repeat(200)}1`, /bad CPU list/],
  ];
  for (const [s, why] of bad) {
    try {
      decodeRankHost(text(s), 3, 0);
      assert.unreachable(`accepted ${JSON.stringify(s)}`);
    } catch (err) {
      assert.is((err as { code?: string }).code, 'EPROTO', JSON.stringify(s));
      assert.match((err as Error).message, why);
    }
  }
});

test("a host is oversubscribed when it runs more ranks than its ranks' CPU lists hold together, or than the fewest cores any published without a list", () => {
  // Host A: 2 ranks, one of them told WEFT_CORES=1 (no list); host B: 2 ranks on 2 cores.
  const map = new HostMap([rec(A, 2), rec(B, 2), rec(A, 1), rec(B, 2)]);
  assert.equal(map.hostIds, [A, B]);
  assert.equal(map.localRank, [0, 0, 1, 1]);
  assert.equal(map.oversubscribed, [true, false]);
  assert.equal(new HostMap([rec(A, 2), rec(A, 2), rec(B, 1)]).oversubscribed, [false, false]);
  assert.equal(new HostMap([rec(A, 64), rec(A, 64), rec(A, 64)]).oversubscribed, [false]);
  // A launcher bound each rank to a core of its own: one CPU apiece, four together.
  assert.equal(new HostMap([0, 1, 2, 3].map((c) => rec(A, 1, String(c)))).oversubscribed, [false]);
  // Two ranks on the same single CPU (an emulated host with one core), and three on "0-1".
  assert.equal(new HostMap([rec(A, 1, '0'), rec(A, 1, '0'), rec(B, 2, '0-1'), rec(B, 2, '0-1'), rec(B, 2, '0-1')]).oversubscribed, [true, true]);
  // A record without a usable core count (a JavaScript caller of this class) says nothing.
  assert.equal(new HostMap([rec(A, NaN), rec(A, NaN)]).oversubscribed, [false]);
});

test.run();
