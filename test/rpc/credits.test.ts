/**
 * Receive credits go back to the context when an endpoint closes (in-process, shm): with the
 * default srqSize (1024) and recvCredits (64) a context holds 16 endpoints at once, and
 * creating and closing endpoints (unconnected, connected to a peer in the same context, or
 * failed first) 40 times in a row must keep working. Before the fix only failed endpoints
 * gave their share back, so the 17th createEndpoint threw "endpoints already hold 1024 of the
 * 1024 shared receive credits". A failed endpoint closed afterwards gives its share back once.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createRpcEngine, type RpcEngine } from '../../src/rpc/index.js';
import { WeftError } from '../../src/errors.js';
import { listSegments } from '../../src/host/segments.js';

const RING = { sendRingSize: 1 << 14, recvRingSize: 1 << 14 };

/** Fills the context to its 1024 credits, checks the next createEndpoint throws, closes them. */
function checkFull(ctx: RpcEngine<unknown>, where: string): void {
  const eps = Array.from({ length: 16 }, () => ctx.createEndpoint(RING));
  assert.throws(() => ctx.createEndpoint(RING), (e: WeftError) => e.code === 'EINVAL' && /already hold 1024 of the 1024 shared receive credits/.test(e.message), `${where}: a 17th endpoint`);
  for (const ep of eps) ep.close();
}

test('endpoints created and closed without connect give their credits back', async () => {
  const ctx = await createRpcEngine<unknown>({ provider: 'shm', label: 'credits' });
  try {
    assert.is(ctx.srqSize, 1024);
    for (let i = 0; i < 40; i++) {
      const ep = ctx.createEndpoint(RING);
      assert.is(ep.state, 'init');
      ep.close();
      assert.is(ep.state, 'closed');
      ep.close(); // a second close is a no-op, not a second refund
    }
    checkFull(ctx, 'after 40 unconnected cycles');
    checkFull(ctx, 'again');
  } finally {
    ctx.close();
  }
});

test('connected endpoints give their credits back on close', async () => {
  const ctx = await createRpcEngine<unknown>({ provider: 'shm', label: 'credits' });
  const server = ctx.serve((p) => p.map((b) => b ^ 0x5a));
  try {
    for (let i = 0; i < 40; i++) {
      const a = ctx.createEndpoint({ ...RING, peerLabel: `a${i}` });
      const b = ctx.createEndpoint({ ...RING, peerLabel: `b${i}` });
      a.connect(b.localInfo());
      b.connect(a.localInfo());
      if (i % 8 === 0) {
        const payload = new Uint8Array(10 + i).map((_, j) => (i + j) & 255);
        const resp = await a.request(payload, { timeoutMs: 5000 });
        assert.equal([...resp], [...payload].map((x) => x ^ 0x5a), `cycle ${i}`);
      }
      a.close();
      b.close();
    }
  } finally {
    server.close();
  }
  try {
    checkFull(ctx, 'after 40 connected pairs');
  } finally {
    ctx.close();
  }
});

test('a failed endpoint gives its credits back once, not again at close', async () => {
  const ctx = await createRpcEngine<unknown>({ provider: 'shm', label: 'credits' });
  try {
    for (let i = 0; i < 40; i++) {
      const a = ctx.createEndpoint(RING);
      const b = ctx.createEndpoint(RING);
      a.connect(b.localInfo());
      b.connect(a.localInfo());
      a.fail(new WeftError('EPROTO', `test: endpoint failed on purpose (cycle ${i})`));
      assert.is(a.state, 'failed');
      ctx.poll(); // reports the failure
      a.close();
      b.close();
    }
    // Exactly 16 fit: a double refund would let a 17th through.
    checkFull(ctx, 'after 40 failed cycles');
  } finally {
    ctx.close();
  }
});

test('refused engine options (srqSize, peerTimeoutMs) throw EINVAL and leave no device behind', async () => {
  const mine = () => listSegments().filter((n) => n.includes(`.${process.pid}.`) || n.includes(`-${process.pid}-`));
  const before = mine();
  for (const [opts, re] of [
    [{ srqSize: 2 }, /srqSize must be an integer >= 4/],
    [{ peerTimeoutMs: 0 }, /peerTimeoutMs must be a positive number of milliseconds/],
    [{ peerTimeoutMs: Number.NaN }, /peerTimeoutMs must be a positive number/],
  ] as [Record<string, number>, RegExp][]) {
    const err = await createRpcEngine({ provider: 'shm', label: 'options', ...opts }).then(() => undefined, (e: WeftError) => e);
    assert.ok(err, JSON.stringify(opts));
    assert.is(err!.code, 'EINVAL');
    assert.match(err!.message, re);
  }
  assert.equal(mine(), before, 'a refused engine left its device\'s segments');
  const ok = await createRpcEngine({ provider: 'shm', label: 'options', peerTimeoutMs: 5000 });
  assert.is(ok.peerTimeoutMs, 5000);
  ok.close();
  const fromDevice = await createRpcEngine({ provider: 'shm', label: 'options', opTimeoutMs: 7000 });
  assert.is(fromDevice.peerTimeoutMs, 7000, 'the device\'s opTimeoutMs is the default');
  fromDevice.close();
});

test.run();
