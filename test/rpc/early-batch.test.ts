/**
 * Batches that reach an endpoint before its connect() (test/rpc/workers/early.ts, scenario
 * earlyBatch): rank 1 serves (so its context is polled) and has created its endpoint, but
 * connects it only ~400 ms after rank 0 connected and flushed several requests, each in its
 * own batch and of a distinct length. Those batches must be kept and decoded, in order, at
 * connect(): every early request is answered correctly, and later requests both ways too.
 * Before the fix they were dropped without advancing the parse position, so the early
 * requests were never answered and later batches were decoded at the wrong offset.
 *
 * On ofi the NIC layer must deliver a remote write to a QP that is not connected yet (it
 * dropped them before; providers with 4-byte CQ data still cannot attribute them).
 */
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { runScenario } from '../../harness/local-group.js';
import { WORKER, providers } from './setup.js';

interface Rank0 { ok: number; earlyOk: number; wrong: string[]; batchesSentEarly: number; state: string }
interface Rank1 {
  ok: number;
  wrong: string[];
  before: { state: string; requests: number; batches: number };
  atConnect: { requests: number; batches: number };
  state: string;
}

for (const provider of providers) {
  const test = suite(`copyrpc batches before connect (${provider})`);
  test('requests that reach a served endpoint before its connect() are all answered, in order', async () => {
    const early = 6;
    const late = 4;
    const { results } = await runScenario('earlyBatch', {
      n: 2, provider, worker: WORKER, timeoutMs: 60_000,
      args: { early, late, delayMs: 400, timeoutMs: 5000 },
      onEvent: (rank, event, children) => {
        if (rank === 0 && event === 'sent') children[1].send({ type: 'sent' });
      },
    });
    const r0 = results[0] as Rank0;
    const r1 = results[1] as Rank1;
    assert.equal(r0.wrong, [], 'rank 0');
    assert.equal(r1.wrong, [], 'rank 1');
    assert.ok(r0.batchesSentEarly >= early, `rank 0 flushed ${r0.batchesSentEarly} batches before rank 1 connected`);
    assert.is(r0.earlyOk, early, 'early requests answered');
    assert.is(r0.ok, early + late, 'rank 0: answers');
    assert.is(r1.ok, late, 'rank 1: answers');
    // Nothing was decoded before connect(); everything rank 0 had sent was decoded inside it.
    assert.equal(r1.before, { state: 'init', requests: 0, batches: 0 });
    assert.is(r1.atConnect.requests, early, 'requests decoded at connect');
    assert.ok(r1.atConnect.batches >= early, `batches decoded at connect: ${r1.atConnect.batches}`);
    assert.is(r0.state, 'ready');
    assert.is(r1.state, 'ready');
  });
  test.run();
}
