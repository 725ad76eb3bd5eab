/**
 * copyrpc cases where progress stopped, or went wrong, with two healthy peers (found by a
 * review of the protocol; each case failed before its fix):
 * - credit a full ring kept back was never offered again once the ring drained, so a caller
 *   that had reported everything could not ask again: INSUFFICIENT_CREDIT forever;
 * - an endpoint that received batches before connect() never got its receive credits back;
 * - a metadata-only batch that had to wrap broke in_flight + 2R <= C by its own 32 bytes,
 *   and the engine's flush list was left broken by the exception (debug mode);
 * - rdmaRead / rdmaWrite queued on an endpoint that closed stayed in rawPending forever;
 * - the request driver retried its backlog only up to the first refusal, so a silent peer
 *   held back requests toward a healthy one until they timed out;
 * - a response callback that polled the device again (a blocking call inside it) made the
 *   router hand out part of a completion batch twice and lose the rest;
 * - serve(): a handler still running when its server closed wrote its reply and the driver
 *   stopped without sending it; a reply made through the handle after an await waited, unsent,
 *   until the handler's promise settled (the driver slept through it).
 * Two engines in one process, on shared memory.
 */
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { createRpcEngine, INSUFFICIENT_CREDIT, type Endpoint, type RpcEngine } from '../../src/rpc/index.js';

const test = suite('copyrpc progress');

async function pair(size: number, debug = false, opTimeoutMs?: number): Promise<{ A: RpcEngine<unknown>; B: RpcEngine<unknown>; a: Endpoint<unknown>; b: Endpoint<unknown> }> {
  const A = await createRpcEngine({ provider: 'shm', label: 'A', debug });
  const B = await createRpcEngine({ provider: 'shm', label: 'B', debug, opTimeoutMs });
  const a = A.createEndpoint({ sendRingSize: size, recvRingSize: size, peerLabel: 'B' });
  const b = B.createEndpoint({ sendRingSize: size, recvRingSize: size, peerLabel: 'A' });
  return { A, B, a, b };
}

test('credit a nearly full ring held back is offered once the ring drains', async () => {
  const { A, B, a, b } = await pair(4096, true);
  a.connect(b.localInfo());
  b.connect(a.localInfo());
  try {
    // A spends most of its credit on one call; B answers it and, in the same batch, fills its
    // ring toward A with three large calls, so that batch can grant A almost nothing.
    assert.ok(a.call(new Uint8Array(8), 'a1', 900) >= 0);
    A.poll();
    B.poll();
    B.recv()!.reply(new Uint8Array(900));
    for (let i = 0; i < 3; i++) assert.ok(b.call(new Uint8Array(b.maxPayload), `b${i}`, 0) >= 0);
    B.poll();
    // A answers B's calls; its batch tells B everything is consumed. A has nothing more to report.
    A.poll();
    for (let h = A.recv(); h; h = A.recv()) h.reply(new Uint8Array(0));
    for (let i = 0; i < 4; i++) {
      A.poll();
      B.poll();
    }
    let r = -1;
    for (let tries = 0; tries < 1000 && r < 0; tries++) {
      r = a.call(new Uint8Array(8), 'a2', 900);
      if (r >= 0) break;
      assert.is(r, INSUFFICIENT_CREDIT);
      A.poll();
      B.poll();
    }
    assert.ok(r >= 0, `A's call still lacks credit: A ${JSON.stringify(a.debugState())} B ${JSON.stringify(b.debugState())}`);
  } finally {
    A.close();
    B.close();
  }
});

test('an endpoint that received batches before connect() gets its receive credits back', async () => {
  const { A, B, a, b } = await pair(1 << 16, false, 2000);
  b.connect(a.localInfo());
  try {
    assert.ok(b.call(Uint8Array.of(0), 0, 8) >= 0);
    B.flush();
    A.poll(); // A's engine polls before a.connect(): the batch waits for connect
    a.connect(b.localInfo());
    // Three times the endpoint's receive credits, one batch each.
    const rounds = 3 * a.recvCredits;
    let answered = 0;
    for (let i = 1; i <= rounds; i++) {
      while (b.call(Uint8Array.of(i & 255), i, 8) < 0) B.poll();
      B.flush();
      // The early call is answered too: i + 1 answers after call i.
      for (let spin = 0; answered <= i && spin < 100_000; spin++) {
        A.poll();
        for (let h = A.recv(); h; h = A.recv()) h.reply(Uint8Array.of(1));
        B.poll(() => answered++);
        assert.is(b.state, 'ready', b.error?.message);
      }
      assert.is(answered, i + 1, `call ${i} unanswered; A's endpoint: ${a.consumedCredits} credits consumed, not reposted; B: ${b.qp.pendingOps} operations waiting for credit`);
    }
  } finally {
    A.close();
    B.close();
  }
});

test('a metadata-only batch that wraps keeps the credit invariant (debug mode)', async () => {
  const { A, B, a, b } = await pair(4096, true);
  a.connect(b.localInfo());
  b.connect(a.localInfo());
  try {
    // B takes A's whole response reservation; A answers (R falls to 0) and fills its ring
    // with four large calls, ending 32 bytes short of the cycle.
    assert.ok(b.call(new Uint8Array(4), 'b0', b.maxResponseAllowance) >= 0);
    B.poll();
    A.poll();
    A.recv()!.reply(new Uint8Array(40));
    for (let i = 0; i < 4; i++) assert.ok(a.call(new Uint8Array(a.maxPayload), `a${i}`, 0) >= 0);
    A.poll();
    B.poll();
    B.recv()!.reply(new Uint8Array(0)); // B takes only the first request
    B.poll();
    B.poll();
    A.poll();
    // A refused call makes A's flush send a metadata-only batch, which must wrap first.
    assert.ok(a.call(new Uint8Array(4), 'x', 900) < 0);
    A.poll();
    assert.is(a.state, 'ready', a.error?.message);
    A.poll();
  } finally {
    A.close();
    B.close();
  }
});

test('rdmaRead queued on an endpoint that closes no longer counts in rawPending', async () => {
  const { A, B, a, b } = await pair(1 << 16);
  a.connect(b.localInfo());
  b.connect(a.localInfo());
  try {
    const region = B.allocate(4096);
    // B never polls: past its receive credits A's batches queue, and the READ behind them.
    for (let i = 0; i < a.recvCredits + 6; i++) {
      assert.ok(a.call(new Uint8Array(4), i, 0) >= 0);
      A.flush();
    }
    a.rdmaRead(A.allocate(4096), 0, a.importRegion(region.descriptor()), 0, 64);
    assert.ok(a.qp.pendingOps > 0, 'the READ is queued');
    assert.is(A.rawPending, 1);
    a.close();
    for (let i = 0; i < 100; i++) A.poll();
    assert.is(A.rawPending, 0);
    assert.is(A.rawFailed, 1);
    assert.match(A.rawError?.message ?? '', /in flight when the endpoint closed/);
  } finally {
    A.close();
    B.close();
  }
});

test('a silent peer holds back only its own parked requests', async () => {
  const A = await createRpcEngine({ provider: 'shm', label: 'A' });
  const B = await createRpcEngine({ provider: 'shm', label: 'B (silent)' });
  const C = await createRpcEngine({ provider: 'shm', label: 'C (serving)' });
  const size = { sendRingSize: 1 << 16, recvRingSize: 1 << 16 };
  const x = A.createEndpoint({ ...size, peerLabel: 'B' });
  const bx = B.createEndpoint({ ...size, peerLabel: 'A' });
  const y = A.createEndpoint({ ...size, peerLabel: 'C' });
  const cy = C.createEndpoint({ ...size, peerLabel: 'A' });
  x.connect(bx.localInfo());
  bx.connect(x.localInfo());
  y.connect(cy.localInfo());
  cy.connect(y.localInfo());
  const server = C.serve((p) => p);
  try {
    // Toward B: more requests than its credit takes; the last one is parked for good.
    const toB = Array.from({ length: 4 }, () => x.request(new Uint8Array(8), { timeoutMs: 20_000 }).catch((e: Error) => e));
    await new Promise((r) => setTimeout(r, 50));
    // Toward C: more than its credit takes at once; the rest are parked behind B's.
    const toC = await Promise.all(Array.from({ length: 20 }, (_, i) => y.request(Uint8Array.of(i), { timeoutMs: 10_000 }).then((r) => r[0], (e: Error) => e.message)));
    assert.equal(toC, Array.from({ length: 20 }, (_, i) => i));
    server.close();
    A.close();
    for (const r of await Promise.all(toB)) assert.instance(r, Error);
  } finally {
    server.close();
    A.close();
    B.close();
    C.close();
  }
});

test('a response callback that polls the device again: every response once, in order', async () => {
  const { A, B, a, b } = await pair(1 << 16);
  a.connect(b.localInfo());
  b.connect(a.localInfo());
  // Another owner on A's device, as in a job (collectives beside copyrpc): A's poll then goes
  // through the router's dispatch, which the nested poll re-enters.
  const other = A.device.createQueuePair();
  const sink = { take: () => undefined };
  A.router.attach(other.qpn, sink);
  try {
    const N = 16;
    for (let k = 0; k < N; k++) assert.ok(a.call(Uint8Array.of(k), k, 512) >= 0);
    A.flush();
    B.poll();
    const handles: NonNullable<ReturnType<typeof B.recv>>[] = [];
    for (let h = B.recv(); h; h = B.recv()) handles.push(h);
    assert.is(handles.length, N);
    // One batch per response, of distinct lengths; half now, half while A is in its callback.
    const answer = (k: number) => {
      handles[k]!.reply(new Uint8Array(16 * (k + 1)).fill(k));
      B.flush();
    };
    for (let k = 0; k < N / 2; k++) answer(k);
    const got: (number | string)[] = [];
    let nested = false;
    const onResponse = (k: unknown, buf: Uint8Array, off: number, len: number) => {
      const n = k as number;
      got.push(len === 16 * (n + 1) && buf.subarray(off, off + len).every((v) => v === n) ? n : `${n}: wrong bytes (${len} B)`);
      if (!nested) {
        nested = true;
        for (let j = N / 2; j < N; j++) answer(j);
        A.router.poll(); // what a blocking collective or recvSync does inside the callback
      }
    };
    for (let i = 0; i < 100 && got.length < N && a.state === 'ready'; i++) A.poll(onResponse);
    assert.is(a.state, 'ready', a.error?.message);
    assert.equal(got, Array.from({ length: N }, (_, k) => k));
  } finally {
    A.router.detach(other.qpn, sink);
    other.close();
    A.close();
    B.close();
  }
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test('serve: a handler still running when its server closes gets its reply out', async () => {
  const { A, B, a, b } = await pair(1 << 16);
  a.connect(b.localInfo());
  b.connect(a.localInfo());
  try {
    let go: () => void = () => {};
    const gate = new Promise<void>((r) => (go = r));
    let started = false;
    const server = B.serve(async (p) => {
      started = true;
      await gate;
      return p;
    });
    const answer = a.request(Uint8Array.of(7), { timeoutMs: 3000 });
    for (let i = 0; i < 300 && !started; i++) await sleep(10);
    assert.ok(started, 'the handler never ran');
    server.close();
    go();
    assert.equal([...(await answer)], [7]);
  } finally {
    A.close();
    B.close();
  }
});

test('serve: a reply made through the handle after an await goes out while the handler runs on', async () => {
  const { A, B, a, b } = await pair(1 << 16);
  a.connect(b.localInfo());
  b.connect(a.localInfo());
  let release: () => void = () => {};
  const held = new Promise<void>((r) => (release = r));
  try {
    const server = B.serve(async (p, h) => {
      await sleep(10);
      h.reply(p);
      await held; // the handler goes on after its reply
      return undefined;
    });
    // The driver sleeps meanwhile (nothing else to do): the reply must wake it.
    assert.equal([...(await a.request(Uint8Array.of(1, 2, 3), { timeoutMs: 2000 }))], [1, 2, 3]);
    server.close();
  } finally {
    release();
    A.close();
    B.close();
  }
});

test.run();
