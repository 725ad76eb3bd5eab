/** The shm provider's API contract: bad input gets a clear error, waits time out and abort. */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createDevice, CompletionBatch, listSegments, Opcode, Status, type Device, type QueuePair, type MemoryRegion, type RemoteRegion } from '../../src/nic/index.js';
import { WeftError } from '../../src/errors.js';

const job = `apitest${process.pid}`;

async function pair(): Promise<{ a: Device; b: Device; qa: QueuePair; qb: QueuePair; ma: MemoryRegion; mb: MemoryRegion; rb: RemoteRegion }> {
  const a = await createDevice({ provider: 'shm', label: 'rank 0', job });
  const b = await createDevice({ provider: 'shm', label: 'rank 1', job });
  const ma = a.allocate(4096);
  const mb = b.allocate(4096);
  const qa = a.createQueuePair({ peerLabel: 'rank 1' });
  const qb = b.createQueuePair({ peerLabel: 'rank 0' });
  qa.connect(qb.address());
  qb.connect(qa.address());
  return { a, b, qa, qb, ma, mb, rb: qa.importRegion(mb.descriptor()) };
}

const code = (c: string) => (e: unknown) => e instanceof WeftError && e.code === c;

test('unknown provider and bad sizes are EINVAL', async () => {
  await createDevice({ provider: 'carrier-pigeon' }).then(
    () => assert.unreachable(),
    (e) => assert.ok(code('EINVAL')(e)),
  );
  const d = await createDevice({ provider: 'shm', job });
  try {
    assert.throws(() => d.allocate(0), code('EINVAL'));
    assert.throws(() => d.allocate(1.5), code('EINVAL'));
    assert.throws(() => d.allocate('10' as unknown as number), code('EINVAL'));
    assert.throws(() => d.register(new Uint8Array(16)), /only register memory obtained from device.allocate/);
    const mr = d.allocate(100);
    const sub = d.register(mr.bytes.subarray(10, 50));
    assert.is(sub.byteLength, 40);
    assert.throws(() => d.createQueuePair({ recvCredits: 1 << 20 }), /cqDepth/);
  } finally {
    d.close();
  }
});

test('posting with bad arguments throws before anything moves', async () => {
  const { a, b, qa, ma, mb, rb } = await pair();
  try {
    assert.throws(() => qa.postWrite(mb, 0, rb, 0, 8, 1, true), /registered MemoryRegion of this device/);
    assert.throws(() => qa.postWrite(ma, 4090, rb, 0, 8, 1, true), /outside the 4096-byte region/);
    assert.throws(() => qa.postWrite(ma, -1, rb, 0, 8, 1, true), code('EINVAL'));
    assert.throws(() => qa.postWrite(ma, 0, rb, 0.5, 8, 1, true), /remoteOffset/);
    assert.throws(() => qa.postWrite(ma, 0, {} as RemoteRegion, 0, 8, 1, true), /importRegion on this QP/);
    const fresh = a.createQueuePair({ peerLabel: 'rank 9' });
    assert.throws(() => fresh.postWrite(ma, 0, rb, 0, 8, 1, true), /before connect|importRegion/);
    assert.throws(() => fresh.importRegion(mb.descriptor()), /not connected/);
  } finally {
    a.close();
    b.close();
  }
});

test('a WRITE_IMM in place completes like a copied one, over the bytes stored through direct', async () => {
  const { a, b, qa, mb, rb } = await pair();
  try {
    const direct = rb.direct as Uint8Array;
    assert.is(direct.length, 4096);
    direct.set([1, 2, 3, 4, 5], 100);
    qa.postWriteImmInPlace!(rb, 100, 5, 77, 9, true);
    const out = new CompletionBatch(8);
    assert.is(b.cq.poll(out), 1);
    assert.equal([out.opcode[0], out.imm[0], out.byteLength[0]], [Opcode.RECV_WRITE_IMM, 77, 5]);
    assert.equal([...mb.bytes.subarray(100, 105)], [1, 2, 3, 4, 5]);
    assert.is(a.cq.poll(out), 1);
    assert.equal([out.opcode[0], out.wrId[0], out.byteLength[0]], [Opcode.WRITE_IMM, 9, 5]);
    // Past the target region: refused at the target, as a copied WRITE_IMM would be.
    qa.postWriteImmInPlace!(rb, 4094, 5, 0, 1, true);
    assert.is(a.cq.poll(out), 1);
    assert.is(out.status[0], Status.REMOTE_ACCESS);
    assert.match(String(out.errors[0]), /exceeds the 4096-byte region/);
    assert.is(b.cq.poll(out), 0);
    assert.throws(() => qa.postWriteImmInPlace!({} as RemoteRegion, 0, 5, 0, 1, true), /importRegion on this QP/);
    const fresh = a.createQueuePair({ peerLabel: 'rank 9' });
    assert.throws(() => fresh.postWriteImmInPlace!(rb, 0, 5, 0, 1, true), /importRegion on this QP|before connect/);
  } finally {
    a.close();
    b.close();
  }
});

test('copyNow moves bytes at once without a completion, and does nothing where a post would fail or queue', async () => {
  const { a, b, qa, qb, ma, mb, rb } = await pair();
  const out = new CompletionBatch(8);
  try {
    ma.bytes.set([1, 2, 3, 4, 5, 6, 7], 10);
    assert.ok(qa.copyNow!(false, ma, 10, rb, 200, 7));
    assert.equal([...mb.bytes.subarray(200, 207)], [1, 2, 3, 4, 5, 6, 7]);
    mb.bytes.set([9, 8, 7], 3000);
    assert.ok(qa.copyNow!(true, ma, 1000, rb, 3000, 3));
    assert.equal([...ma.bytes.subarray(1000, 1003)], [9, 8, 7]);
    assert.is(a.cq.poll(out), 0, 'no completion at the initiator');
    assert.is(b.cq.poll(out), 0, 'nothing at the target');
    // Each of these is refused by post (it throws, or completes with an error): copyNow does
    // nothing and leaves it to post. Sources hold non-zero bytes, so a wrong copy would show.
    // Sources hold non-zero bytes ([3000, 3100) and [4000, 4096) on both sides); destinations
    // are in [3900, 4000), which must stay zero: a wrong copy would show.
    for (const m of [ma, mb]) {
      m.bytes.fill(5, 3000, 3100);
      m.bytes.fill(6, 4000);
    }
    const wrote = () => mb.bytes.subarray(3900, 4000).some((x) => x !== 0) || ma.bytes.subarray(3900, 4000).some((x) => x !== 0);
    // a's region imported on b's QP (toward a): a region of another QP's peer.
    const mine = a.allocate(64);
    mine.bytes.fill(7);
    const foreign = qb.importRegion(mine.descriptor());
    const gone = a.allocate(4096);
    gone.bytes.fill(9);
    gone.deregister();
    for (const read of [false, true]) {
      // (local offset, remote offset) with the source at `src` and the destination at `dst`.
      const at = (src: number, dst: number): [number, number] => (read ? [dst, src] : [src, dst]);
      const run = (what: string, local: MemoryRegion, remote: RemoteRegion, [lOff, rOff]: [number, number], len = 8, qp: QueuePair = qa) => {
        assert.not.ok(qp.copyNow!(read, local, lOff, remote, rOff, len), `${read ? 'READ' : 'WRITE'}: ${what}`);
        assert.not.ok(wrote(), `${read ? 'READ' : 'WRITE'}: ${what}: bytes moved`);
      };
      run('past the target region', ma, rb, read ? [3950, 4090] : [4000, 4090]);
      run('past the local region', ma, rb, read ? [4090, 4000] : [4090, 3950]);
      run("another device's region as the local one", mb, rb, at(4000, 3950));
      run('a deregistered local region', gone, rb, at(0, 3950));
      run('a region not imported on this QP', ma, {} as RemoteRegion, at(3000, 3950));
      run('a region imported on another QP', ma, foreign, read ? [3950, 0] : [3000, 0]);
      assert.ok(mine.bytes.every((x) => x === 7), 'a region imported on another QP: bytes moved');
      run('a fractional local offset', ma, rb, read ? [3950.5, 3000] : [3000.5, 3950]);
      run('a fractional remote offset', ma, rb, read ? [3950, 3000.5] : [3000, 3950.5]);
      run('a fractional length', ma, rb, at(3000, 3950), 7.5);
      run('a negative length', ma, rb, at(3000, 3950), -8);
      run('a QP not connected', ma, rb, at(3000, 3950), 8, a.createQueuePair({ peerLabel: 'rank 9' }));
    }
    assert.is(a.cq.poll(out), 0);
    // Operations queued ahead (a WRITE_IMM waiting for a receive credit) keep their order.
    const c = await createDevice({ provider: 'shm', label: 'rank 2', job });
    try {
      const qac = a.createQueuePair({ peerLabel: 'rank 2' });
      const qca = c.createQueuePair({ peerLabel: 'rank 0', recvCredits: 0 });
      qac.connect(qca.address());
      qca.connect(qac.address());
      const mc = c.allocate(4096);
      const rc = qac.importRegion(mc.descriptor());
      qac.postWriteImm(ma, 0, rc, 0, 4, 1, 5, true);
      assert.is(qac.pendingOps, 1);
      assert.not.ok(qac.copyNow!(false, ma, 0, rc, 100, 4), 'behind a queued WRITE_IMM');
      qca.postRecv(1);
      for (let k = 0; k < 100 && qac.pendingOps > 0; k++) a.cq.poll(out);
      assert.is(qac.pendingOps, 0);
      assert.ok(qac.copyNow!(false, ma, 0, rc, 100, 4), 'once the queue drained');
    } finally {
      c.close();
    }
    // A deregistered key, and a closed QP.
    mb.deregister();
    assert.not.ok(qa.copyNow!(false, ma, 0, rb, 0, 8), 'a deregistered key');
    const rb2 = qa.importRegion(b.allocate(64).descriptor());
    qa.close();
    assert.not.ok(qa.copyNow!(false, ma, 0, rb2, 0, 8), 'a closed QP');
  } finally {
    a.close();
    b.close();
  }
});

test('malformed addresses and descriptors are EPROTO, foreign ones EINVAL', async () => {
  const { a, b, qa, ma } = await pair();
  try {
    const q = a.createQueuePair({ peerLabel: 'rank 2' });
    assert.throws(() => q.connect(new Uint8Array(10)), code('EPROTO'));
    assert.throws(() => q.connect(new Uint8Array(200).fill(7)), code('EPROTO'));
    const addr = b.createQueuePair().address();
    assert.throws(() => q.connect(addr.subarray(0, addr.length - 1)), code('EPROTO'));
    assert.throws(() => qa.connect(addr), /create a new QP/);
    assert.throws(() => qa.importRegion(new Uint8Array(56)), code('EPROTO'));
    assert.throws(() => qa.importRegion(new Uint8Array(3)), code('EPROTO'));
    // Our own region imported on the QP toward rank 1: it belongs to another process.
    assert.throws(() => qa.importRegion(ma.descriptor()), code('EINVAL'));
  } finally {
    a.close();
    b.close();
  }
});

test('wait times out naming the rank, and aborts promptly', async () => {
  const d = await createDevice({ provider: 'shm', label: 'rank 5', job });
  try {
    const t0 = performance.now();
    await d.cq.wait({ timeoutMs: 150 }).then(
      () => assert.unreachable(),
      (e) => {
        assert.ok(code('ETIMEDOUT')(e));
        assert.match((e as Error).message, /rank 5/);
      },
    );
    assert.ok(performance.now() - t0 >= 140);
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 100);
    const t1 = performance.now();
    await d.cq.wait({ timeoutMs: 10_000, signal: ac.signal }).then(
      () => assert.unreachable(),
      (e) => assert.ok(code('EABORTED')(e)),
    );
    assert.ok(performance.now() - t1 < 2000, 'abort was not prompt');
    assert.throws(() => d.cq.waitSync({ timeoutMs: 50 }), code('ETIMEDOUT'));
  } finally {
    d.close();
  }
});

test('a write wakes a sleeping waiter', async () => {
  const { a, b, qa, ma, rb } = await pair();
  try {
    const waiting = b.cq.wait({ timeoutMs: 5000 });
    await new Promise((r) => setTimeout(r, 30));
    ma.bytes[0] = 9;
    qa.postWriteImm(ma, 0, rb, 0, 1, 1234, 0, false);
    await waiting;
    const batch = new CompletionBatch(4);
    assert.is(b.cq.poll(batch), 1);
    assert.is(batch.opcode[0], Opcode.RECV_WRITE_IMM);
    assert.is(batch.imm[0], 1234);
  } finally {
    a.close();
    b.close();
  }
});

test('close unlinks every segment; use after close is ECLOSED', async () => {
  const { a, b, qa, ma, rb } = await pair();
  a.close();
  b.close();
  assert.equal(listSegments().filter((s) => s.includes(`.${job}.`)), []);
  assert.throws(() => a.allocate(10), code('ECLOSED'));
  // Regions of a closed device are deregistered: posting with one is a caller bug.
  assert.throws(() => qa.postWrite(ma, 0, rb, 0, 8, 3, true), code('EINVAL'));
});

test.run();
