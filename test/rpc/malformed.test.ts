/**
 * A peer that sends malformed batches (test/rpc/workers/wire-peer.ts MALFORMED): each kind
 * fails the endpoint it arrived on with a clear EPROTO naming the endpoint, the pending call
 * on it is reported failed, the process stays up, and another endpoint keeps working.
 */
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { runScenario } from '../../harness/local-group.js';
import { MALFORMED } from './workers/wire-peer.js';
import { WORKER, providers } from './setup.js';

for (const provider of providers) {
  const test = suite(`copyrpc malformed peer (${provider})`);
  test('every malformed batch fails only its endpoint; the process and other endpoints live on', async () => {
    const { results } = await runScenario('malformed', { n: 3, provider, worker: WORKER, args: { count: 1000 }, timeoutMs: 90_000 });
    const r = results[0] as { outcomes: { state: string; code: string; message: string }[]; failedCalls: string[]; echoed: number; goodState: string };
    MALFORMED.forEach((m, k) => {
      const o = r.outcomes[k];
      assert.is(o.state, 'failed', `${m.name}: endpoint state`);
      assert.is(o.code, 'EPROTO', `${m.name}: ${o.message}`);
      assert.match(o.message, m.expect, `${m.name}: ${o.message}`);
      assert.match(o.message, new RegExp(`^rank 0: endpoint ${k + 1} \\(toward rank 2 \\(${m.name}\\)\\) received a malformed batch`), o.message);
    });
    assert.equal(r.failedCalls.sort(), MALFORMED.map((_, k) => `pending ${k}: EPROTO`).sort(), 'each pending call reported failed once');
    assert.is(r.goodState, 'ready');
    assert.is(r.echoed, 1000, 'the good endpoint kept working');
  });
  test.run();
}
