/**
 * Randomized stress between real processes: every rank calls every other rank with payloads
 * of 0..4 KiB, answers in random order with random delays, over 32 KiB rings that wrap and
 * run out of credit all the time. Every response is checked byte for byte against its call,
 * exactly once; the credit invariant is checked on every batch (debug mode). WEFT_SOAK=1
 * (npm run test:soak) runs 10^6 calls per rank.
 */
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { runScenario } from '../../harness/local-group.js';
import { WORKER, providers } from './setup.js';

const soak = process.env.WEFT_SOAK === '1';

interface Result {
  issued: number; answered: number; errors: string[]; ringFull: number; noCredit: number; wrapsSent: number; wrapsReceived: number;
  reads: number; invariantChecks: number; failed: string[]; seconds: number; emptyBatches: number; batches: number;
}

const COUNTS: Record<string, Record<number, number>> = soak
  ? { shm: { 2: 1_000_000, 4: 1_000_000 }, ofi: { 2: 1_000_000, 4: 1_000_000 } }
  : { shm: { 2: 100_000, 4: 20_000 }, ofi: { 2: 20_000, 4: 4_000 } };

for (const provider of providers) {
  const test = suite(`copyrpc stress (${provider})`);
  for (const n of [2, 4]) {
    const count = COUNTS[provider][n];
    test(`${n} processes, ${count} calls each, random sizes, random reply order and delays, 32 KiB rings`, async () => {
      const { results } = await runScenario('stress', { n, provider, worker: WORKER, args: { count, qd: 48, ring: 32768, debug: true }, timeoutMs: soak ? 3_600_000 : 300_000 });
      const rs = results as Result[];
      for (const [rank, r] of rs.entries()) {
        assert.equal(r.errors, [], `rank ${rank}`);
        assert.equal(r.failed, [], `rank ${rank}: endpoints failed`);
        assert.is(r.answered, count, `rank ${rank}: answered`);
        assert.ok(r.invariantChecks > count, `rank ${rank}: the invariant was checked ${r.invariantChecks} times`);
      }
      const sum = (f: (r: Result) => number) => rs.reduce((a, r) => a + f(r), 0);
      assert.ok(sum((r) => r.wrapsSent) > 10, 'the rings never wrapped');
      // (Counts are snapshots taken when each rank finished its own calls, so sent and
      // received need not be equal yet.)
      assert.ok(sum((r) => r.wrapsReceived) > 10, 'no wrap marker was received');
      assert.ok(sum((r) => r.ringFull + r.noCredit) > 10, 'calls never met RING_FULL or INSUFFICIENT_CREDIT');
      const line = rs.map((r, k) => `rank ${k}: ${r.seconds.toFixed(1)} s, ${r.batches} batches, ${r.wrapsSent} wraps, ${r.ringFull} ring full, ${r.noCredit} no credit, ${r.reads} READs, ${r.emptyBatches} empty`).join('; ');
      console.log(`    ${provider} n=${n}: ${line}`);
    });
  }
  test.run();
}
