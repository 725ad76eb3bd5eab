/**
 * The convenience layer between real processes: await ep.request() against ctx.serve()
 * with async handlers, a throwing handler (empty response), and an aborted request.
 */
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { runScenario } from '../../harness/local-group.js';
import { WORKER, providers } from './setup.js';

for (const provider of providers) {
  const test = suite(`copyrpc request/serve (${provider})`);
  test('concurrent requests against an async server, errors and aborts', async () => {
    const count = provider === 'shm' ? 5000 : 1000;
    const { results } = await runScenario('request', { n: 2, provider, worker: WORKER, args: { count, concurrency: 16 }, timeoutMs: 120_000 });
    const r = results[0] as { ok: number; wrong: string[]; refusedLength: number; abortCode: string };
    assert.equal(r.wrong, []);
    assert.is(r.ok, count);
    assert.is(r.refusedLength, 0);
    assert.is(r.abortCode, 'EABORTED');
  });
  test.run();
}
