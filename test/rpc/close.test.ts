/**
 * Closing an engine fails its outstanding requests at once (ECLOSED), instead of leaving
 * them to their timeouts; in-process over shm, two endpoints of one engine connected to each
 * other, nobody serving.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createRpcEngine } from '../../src/rpc/index.js';
import { WeftError } from '../../src/errors.js';

test('close() rejects outstanding requests with ECLOSED, long before their timeout', async () => {
  const rpc = await createRpcEngine({ provider: 'shm', label: 'close' });
  const a = rpc.createEndpoint({ sendRingSize: 1 << 14, recvRingSize: 1 << 14, peerLabel: 'b' });
  const b = rpc.createEndpoint({ sendRingSize: 1 << 14, recvRingSize: 1 << 14, peerLabel: 'a' });
  a.connect(b.localInfo());
  b.connect(a.localInfo());
  const pending = Array.from({ length: 5 }, (_, i) => a.request(new Uint8Array([i]), { timeoutMs: 30_000 }).then(
    () => 'answered',
    (e: WeftError) => e.code,
  ));
  await new Promise((r) => setTimeout(r, 50));
  const t0 = performance.now();
  rpc.close();
  assert.equal(await Promise.all(pending), ['ECLOSED', 'ECLOSED', 'ECLOSED', 'ECLOSED', 'ECLOSED']);
  assert.ok(performance.now() - t0 < 1000);
});

test.run();
