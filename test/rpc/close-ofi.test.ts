/**
 * A closed copyrpc endpoint over libfabric deregisters its rings at once, and its peer, which
 * does not know, goes on writing to them with the key it verified earlier. Over tcp a READ
 * that names a dead key resets the connection that every QP between the two devices shares
 * (docs/nic.md); copyrpc's rings are only ever written by the peer, and such writes are
 * dropped. Two engines in one process, each with its own ofi device, two endpoint pairs
 * between them: one side of one pair closes, its peer's requests land nowhere and time out,
 * and the other pair carries on both ways.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createRpcEngine, type Endpoint } from '../../src/rpc/index.js';
import { native } from '../../src/native/binding.js';

if (!native.ofi.available) {
  console.log('close-ofi: skipped: weft was built without libfabric');
} else {
  test('a closed endpoint over ofi: its peer writes into it, and the other endpoints between the two devices carry on', async () => {
    const A = await createRpcEngine({ provider: 'ofi', label: 'A' });
    const B = await createRpcEngine({ provider: 'ofi', label: 'B' });
    try {
      const pair = (): [Endpoint, Endpoint] => {
        const a = A.createEndpoint({ sendRingSize: 1 << 14, recvRingSize: 1 << 14, peerLabel: 'B' });
        const b = B.createEndpoint({ sendRingSize: 1 << 14, recvRingSize: 1 << 14, peerLabel: 'A' });
        a.connect(b.localInfo());
        b.connect(a.localInfo());
        return [a, b];
      };
      const [a1, b1] = pair();
      const [a2, b2] = pair();
      A.serve((req) => req);
      B.serve((req) => req);
      assert.equal([...(await b2.request(new Uint8Array([1, 2]), { timeoutMs: 10_000 }))], [1, 2]);
      assert.equal([...(await b1.request(new Uint8Array([3]), { timeoutMs: 10_000 }))], [3]);
      a1.close();
      // b1 does not know: its requests land in a1's dead rings and time out.
      const late = await Promise.all(Array.from({ length: 4 }, (_, i) => b1.request(new Uint8Array([i]), { timeoutMs: 500 }).then(() => 'answered', (e: { code: string }) => e.code)));
      assert.equal(late, ['ETIMEDOUT', 'ETIMEDOUT', 'ETIMEDOUT', 'ETIMEDOUT']);
      // The other pair between the same two devices still works, both ways.
      for (let i = 0; i < 20; i++) {
        assert.equal([...(await b2.request(new Uint8Array([i, 7]), { timeoutMs: 10_000 }))], [i, 7]);
        assert.equal([...(await a2.request(new Uint8Array([7, i]), { timeoutMs: 10_000 }))], [7, i]);
      }
      assert.is(b2.state, 'ready');
      assert.is(a2.state, 'ready');
    } finally {
      A.close();
      B.close();
    }
  });
}

test.run();
