/**
 * The RDMA READ fallback for a stale consumer position, between real processes
 * (test/rpc/workers/onesided.ts, scenario readFallback). Rank 0 calls rank 1 with 1 KiB
 * payloads over 32 KiB rings as fast as it can, one batch per call; rank 1 takes requests
 * with recv() but holds every reply, so the only batches it sends are metadata-only reports
 * of its consumer position, one per quarter ring consumed. Rank 1 takes requests only when
 * rank 0 has flagged (by an rdmaWrite into rank 1's memory) that it met RING_FULL, and then
 * six at a time: less than a quarter ring, so after such a chunk rank 0's piggybacked view of
 * the consumer position is stale and only the READ of rank 1's consumer word that a call
 * meeting RING_FULL posts lets it go on. A round ends when rank 0 has used all the credit rank
 * 1 granted (no grants while replies are held); the parent relays rank 0's 'release-round'
 * event to rank 1, which then answers the round newest first. Every response is checked
 * against its call, exactly once.
 */
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { runScenario } from '../../harness/local-group.js';
import { INSUFFICIENT_CREDIT, type EndpointStats } from '../../src/rpc/index.js';
import type { FallbackRound } from './workers/onesided.js';
import { WORKER, providers } from './setup.js';

interface Rank0 {
  perRound: number;
  total: number;
  answered: number;
  missing: number;
  errors: string[];
  rounds: FallbackRound[];
  stats: EndpointStats;
  state: string;
  rawFailed: number;
}

for (const provider of providers) {
  const test = suite(`copyrpc READ fallback (${provider})`);
  test('calls go on past RING_FULL through READs of the consumer word while the callee holds every reply', async () => {
    const rounds = 3;
    const { results } = await runScenario('readFallback', {
      n: 2, provider, worker: WORKER, timeoutMs: 60_000,
      args: { rounds, ring: 32768, payload: 1024, allowance: 16, phaseMs: 15_000 },
      onEvent: (rank, event, children, data) => {
        if (rank === 0 && event === 'release-round') children[1].send({ type: 'release-round', data });
      },
    });
    const r = results[0] as Rank0;
    const r1 = results[1] as { got: number; heldPerRound: number[]; errors: string[]; episodes: number };
    assert.equal(r.errors, [], 'rank 0');
    assert.equal(r1.errors, [], 'rank 1');
    // 32 KiB rings: rank 1's reservation ceiling is 8 KiB, a call with a 16-byte allowance
    // takes 64 bytes of credit, so 128 calls (135 KiB of payload, four ring cycles) per round.
    assert.is(r.perRound, 128);
    assert.is(r.total, rounds * r.perRound);
    assert.is(r.answered, r.total, 'every call was answered');
    assert.is(r.missing, 0, 'no response missing');
    assert.is(r1.got, r.total, 'rank 1 received every request');
    assert.equal(r1.heldPerRound, new Array(rounds).fill(r.perRound), 'rank 1 held a whole round before answering');
    assert.is(r.state, 'ready');
    assert.is(r.rawFailed, 0, 'a flag write failed');
    assert.ok(r.stats.ringFull >= 1, `ringFull ${r.stats.ringFull}`);
    assert.ok(r.stats.reads >= 1, `reads ${r.stats.reads}`);
    for (const [k, round] of r.rounds.entries()) {
      assert.is(round.issued, r.perRound, `round ${k}: calls issued while rank 1 held its replies`);
      assert.is(round.earlyResponses, 0, `round ${k}: a response arrived while rank 1 held them all`);
      assert.is(round.extraCall, INSUFFICIENT_CREDIT, `round ${k}: one more call must find the credit used up`);
      assert.ok(round.ringFull >= 1, `round ${k}: the ring never filled (${JSON.stringify(round)})`);
      assert.ok(round.reads >= 1, `round ${k}: no consumer READ completed (${JSON.stringify(round)})`);
      // The READ itself, with no batch from rank 1 since the ring filled, let calls through.
      assert.ok(round.unblockedByRead >= 1, `round ${k}: no RING_FULL streak ended on a READ alone (${JSON.stringify(round)})`);
    }
    assert.ok(r1.episodes >= rounds, `rank 1 saw ${r1.episodes} RING_FULL flags`);
    console.log(`    ${provider}: ${r.rounds.map((x, k) => `round ${k}: ${x.ringFull} ring full, ${x.reads} READs, ${x.streaks} RING_FULL streaks of which ${x.unblockedByRead} ended on a READ alone, ${x.batchesReceived} batches from rank 1`).join('; ')}`);
  });
  test.run();
}
