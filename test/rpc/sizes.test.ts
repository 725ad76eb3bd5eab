/**
 * Sizes near 2^31 are refused before anything moves. call() and reply() round sizes to 32-byte
 * blocks in 32-bit arithmetic, which wraps there: before the fix a response allowance of about
 * 2^31 came out negative (the endpoint gained 2^31 of credit and the peer failed it with
 * EPROTO), 2^32-1 came out as a 20-byte allowance, and a payload length of 2^31-40 or more
 * moved the ring position backwards. In-process, shm, two connected endpoints of one engine.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createRpcEngine } from '../../src/rpc/index.js';
import type { WeftError } from '../../src/errors.js';

const RING = { sendRingSize: 1 << 14, recvRingSize: 1 << 14 };
const einval = (e: WeftError) => e.code === 'EINVAL';

/** A Uint8Array that claims `n` elements (no 2 GiB allocation): only its length is read before the checks. */
function claiming(n: number): Uint8Array {
  const a = new Uint8Array(8);
  Object.defineProperty(a, 'length', { value: n });
  return a;
}

test('call() refuses response allowances and payload lengths near 2^31; the credit stays as it was', async () => {
  const ctx = await createRpcEngine<unknown>({ provider: 'shm', label: 'sizes' });
  const server = ctx.serve((p) => p.map((b) => b ^ 0x33));
  try {
    const a = ctx.createEndpoint({ ...RING, peerLabel: 'b' });
    const b = ctx.createEndpoint({ ...RING, peerLabel: 'a' });
    a.connect(b.localInfo());
    b.connect(a.localInfo());
    for (const allowance of [2 ** 31 - 43, 2 ** 31, 2 ** 32 - 64, 2 ** 32 - 1]) {
      assert.throws(() => a.call(new Uint8Array(4), 0, allowance), einval, `allowance ${allowance}`);
    }
    for (const len of [2 ** 31 - 43, 2 ** 31 - 1]) {
      assert.throws(() => a.call(claiming(len), 0, 16), einval, `payload length ${len}`);
    }
    assert.is(a.state, 'ready');
    // Nothing was taken: the endpoint works on, its peer never saw a bad header.
    for (let i = 0; i < 20; i++) {
      const resp = await a.request(Uint8Array.of(i, 1, 2), { timeoutMs: 5000 });
      assert.equal([...resp], [i ^ 0x33, 1 ^ 0x33, 2 ^ 0x33]);
    }
    assert.is(b.state, 'ready');
    a.close();
    b.close();
  } finally {
    server.close();
    ctx.close();
  }
});

test('reply() refuses a length near 2^31 (EINVAL naming the allowance); the request can still be answered', async () => {
  const ctx = await createRpcEngine<unknown>({ provider: 'shm', label: 'sizes' });
  try {
    const a = ctx.createEndpoint({ ...RING, peerLabel: 'b' });
    const b = ctx.createEndpoint({ ...RING, peerLabel: 'a' });
    a.connect(b.localInfo());
    b.connect(a.localInfo());
    const pending = a.request(Uint8Array.of(7), { timeoutMs: 5000, responseAllowance: 16 });
    let h = ctx.recv();
    for (let k = 0; !h && k < 1000; k++) {
      ctx.poll();
      h = ctx.recv();
    }
    assert.ok(h, 'the request arrived');
    for (const len of [2 ** 31 - 43, 2 ** 31 - 1]) {
      assert.throws(() => h!.reply(claiming(len)), (e: WeftError) => einval(e) && /exceeds the caller's response allowance/.test(e.message), `reply length ${len}`);
    }
    h.reply(Uint8Array.of(9));
    assert.equal([...(await pending)], [9]);
    a.close();
    b.close();
  } finally {
    ctx.close();
  }
});

test.run();
