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
const rec = (hostId: string, cores: number, hostName = 'node-a'): RankHost => ({ hostId, hostName, address: '10.0.0.1', cores });
const text = (s: string) => new TextEncoder().encode(s);

test('a record round-trips, cores included', () => {
  const h = rec(A, 48);
  assert.equal(decodeRankHost(encodeRankHost(h), 1, 0), h);
});

test("a peer's malformed record is refused with EPROTO, naming the peer; one from the version before says so", () => {
  const bad: [string, RegExp][] = [
    [`WHS1\n${A}\nnode-a\n10.0.0.1`, /rank 0: the host record of rank 3 is malformed \(a weft version without cores in it: run the same weft on every host\)/],
    [`WHS2\n${A}\nnode-a\n10.0.0.1`, /bad magic or field count/],
    [`WHS2\n${A}\nnode-a\n10.0.0.1\n0`, /bad core count/],
    [`WHS2\n${A}\nnode-a\n10.0.0.1\n-2`, /bad core count/],
    [`WHS2\n${A}\nnode-a\n10.0.0.1\n1.5`, /bad core count/],
    [`WHS2\n${A}\nnode-a\n10.0.0.1\n`, /bad core count/],
    [`WHS2\n${A}\nnode-a\n10.0.0.1\n99999999`, /bad core count/],
    [`WHS2\n${A}\nnode-a\n10.0.0.1\n2000000`, /bad core count/],
    [`WHS2\n${A}\nnode-a\n10.0.0.1\n01`, /bad core count/],
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

test('a host is oversubscribed when it runs more ranks than the fewest cores any of its ranks published', () => {
  // Host A: 2 ranks, one of them sees a single core (WEFT_CORES=1 there); host B: 2 ranks on 2 cores.
  const map = new HostMap([rec(A, 2), rec(B, 2), rec(A, 1), rec(B, 2)]);
  assert.equal(map.hostIds, [A, B]);
  assert.equal(map.localRank, [0, 0, 1, 1]);
  assert.equal(map.oversubscribed, [true, false]);
  assert.equal(new HostMap([rec(A, 2), rec(A, 2), rec(B, 1)]).oversubscribed, [false, false]);
  assert.equal(new HostMap([rec(A, 64), rec(A, 64), rec(A, 64)]).oversubscribed, [false]);
});

test.run();
