/**
 * A peer SIGKILLed while requests toward it are pending: they reject within the timeout
 * (peer death is detected by the NIC layer, usually well before it), naming the endpoint.
 */
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { runScenario } from '../../harness/local-group.js';
import { WORKER, providers } from './setup.js';

for (const provider of providers) {
  const test = suite(`copyrpc dead peer (${provider})`);
  test('pending requests toward a SIGKILLed peer reject within the timeout', async () => {
    const timeoutMs = 8000;
    const { results } = await runScenario('kill', {
      n: 2, provider, worker: WORKER, args: { timeoutMs }, mayDie: [1], timeoutMs: 60_000,
      onEvent: (rank, event, children) => event === 'kill-me' && children[rank].exitCode === null && children[rank].kill('SIGKILL'),
    });
    const r = results[0] as { outcomes: { ok: boolean; code?: string; ms: number; msg: string }[]; late: string; state: string };
    assert.is(r.outcomes.length, 8);
    for (const o of r.outcomes) {
      assert.not.ok(o.ok, 'a request toward the dead peer resolved');
      assert.ok(o.code === 'EPEERDEAD' || o.code === 'ETIMEDOUT', `${o.code}: ${o.msg}`);
      assert.ok(o.ms < timeoutMs + 1000, `rejected after ${o.ms} ms`);
      assert.match(o.msg, /rank 0: endpoint 0 \(toward rank 1\)/);
    }
    assert.match(r.late, /^(EPEERDEAD|ETIMEDOUT|ECLOSED): rank 0: endpoint 0 \(toward rank 1\)/);
    assert.is(r.state, 'failed');
  });
  test.run();
}
