/** benchkv's pure parts: the shard, the workload generator, the histogram, the links, the messages. */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { KvShard, preload } from '../../bench/kv/shard.js';
import { generate, zipfian, uniformRandom } from '../../bench/kv/workload.js';
import { BUCKETS, bucketOf, quantile, record, valueOf } from '../../bench/kv/histogram.js';
import { endsOf, links } from '../../bench/kv/topology.js';
import { GET_NOT_FOUND, GET_OK, KvMessage, KvWriter, OP_GET, OP_PUT, PUT_OK } from '../../bench/kv/messages.js';

test('shard: put, overwrite, get, not found, u64 keys, full table refused', () => {
  const s = new KvShard(100);
  preload(s, 300, 3, 1); // keys 1, 4, 7, ...
  assert.is(s.size, 100);
  assert.ok(s.get(7, 0));
  assert.equal([s.lo, s.hi], [7, 0]);
  assert.not.ok(s.get(8, 0));
  s.put(7, 0, 11, 22);
  assert.ok(s.get(7, 0));
  assert.equal([s.lo, s.hi], [11, 22]);
  s.put(7, 5, 1, 2); // same low half, other high half: another key
  assert.ok(s.get(7, 5));
  assert.equal([s.lo, s.hi], [1, 2]);
  assert.ok(s.get(7, 0));
  assert.is(s.lo, 11);
  const small = new KvShard(4);
  assert.throws(() => {
    for (let k = 0; k < 100; k++) small.put(k, 0, k, 0);
  }, /size the shard/);
});

test('messages: a request and a response survive the codec; the shard answers them', () => {
  const w = new KvWriter();
  const m = new KvMessage();
  const s = new KvShard(16);
  const slot = new Uint8Array(40);
  slot.set(w.setRequest(OP_PUT, 3, 9, 1, 1234, 5678), 5); // unaligned, as a channel slot may be
  assert.ok(m.readRequest(slot, 5));
  assert.equal([m.op, m.rank, m.keyLo, m.keyHi, m.valueLo, m.valueHi], [OP_PUT, 3, 9, 1, 1234, 5678]);
  assert.ok(m.readResponse(s.handle(m, w)));
  assert.is(m.kind, PUT_OK);
  m.readRequest(w.setRequest(OP_GET, 3, 9, 1, 0, 0));
  m.readResponse(s.handle(m, w));
  assert.equal([m.kind, m.respLo, m.respHi], [GET_OK, 1234, 5678]);
  m.readRequest(w.setRequest(OP_GET, 3, 10, 0, 0, 0));
  m.readResponse(s.handle(m, w));
  assert.is(m.kind, GET_NOT_FOUND);
  assert.not.ok(m.readRequest(new Uint8Array(24))); // op 0: malformed
});

test('workload: seeded, read ratio, zipfian skew (theta 0.99 and 1.0), locality, partitions', () => {
  const base = { keys: 1000, readRatio: 0.95, distribution: { kind: 'uniform' as const }, ranks: 4, rank: 1, seed: 7, length: 20000 };
  const a = generate(base);
  const b = generate(base);
  assert.equal(a.key, b.key);
  const reads = a.read.reduce((x, y) => x + y, 0) / a.read.length;
  assert.ok(Math.abs(reads - 0.95) < 0.02, String(reads));
  const counts = (ks: Uint32Array) => {
    const c = new Map<number, number>();
    for (const k of ks) c.set(k, (c.get(k) ?? 0) + 1);
    return Math.max(...c.values()) / ks.length;
  };
  assert.ok(counts(a.key) < 0.01);
  for (const theta of [0.99, 1.0]) {
    const z = generate({ ...base, distribution: { kind: 'zipfian', theta } });
    assert.ok(counts(z.key) > 0.1, `theta ${theta}: hottest key ${counts(z.key)}`);
  }
  // P(rank 0) of zipf(1.0) over 1000 keys is 1/H(1000) = 0.1336.
  const draw = zipfian(1000, 1.0, uniformRandom(3));
  let zeros = 0;
  for (let i = 0; i < 50000; i++) if (draw() === 0) zeros++;
  assert.ok(Math.abs(zeros / 50000 - 0.1336) < 0.01, String(zeros / 50000));
  const local = generate({ ...base, locality: 0.8 });
  const own = local.target.filter((t) => t === 1).length / local.target.length;
  assert.ok(Math.abs(own - 0.8) < 0.02, String(own));
  const part = generate({ ...base, partition: { index: 5, count: 8 } });
  assert.ok(part.key.every((k) => k % 8 === 5 && k < 1000));
});

test('histogram: quantiles within 1/32 of the value, counts mergeable by summing', () => {
  const h = new Float64Array(BUCKETS);
  for (let v = 1; v <= 100000; v++) record(h, v * 100);
  for (const q of [0.5, 0.9, 0.99, 0.999]) {
    const exact = q * 100000 * 100;
    assert.ok(Math.abs(quantile(h, q) - exact) / exact < 1 / 32, `q${q}: ${quantile(h, q)} vs ${exact}`);
  }
  for (const v of [0, 5, 31, 32, 33, 1000, 123456789]) assert.ok(Math.abs(valueOf(bucketOf(v)) - v) <= Math.max(1, v / 32), String(v));
  assert.ok(Number.isNaN(quantile(new Float64Array(BUCKETS), 0.5)));
});

test('links: meta spreads endpoints by rank % K, delegation puts them in daemon 0, direct in clients', () => {
  const meta = links('meta', 4, 2, 3);
  assert.is(meta.length, 6);
  assert.equal(endsOf(meta, 0, { role: 'daemon', index: 1 }).map((e) => e.peerRank), [1, 3]);
  assert.equal(endsOf(meta, 0, { role: 'daemon', index: 0 }).map((e) => e.peerRank), [2]);
  const deleg = links('delegation', 4, 2, 3);
  assert.equal(endsOf(deleg, 2, { role: 'daemon', index: 0 }).map((e) => e.peerRank), [0, 1, 3]);
  assert.equal(endsOf(deleg, 2, { role: 'daemon', index: 1 }), []);
  const direct = links('direct', 3, 2, 3);
  assert.equal(endsOf(direct, 1, { role: 'client', index: 2 }).map((e) => e.peerRank), [0, 2]);
  // Every link appears exactly once on each of its two ranks.
  for (const l of direct) assert.is(endsOf(direct, l.aRank, l.a).filter((e) => e.peerRank === l.bRank && e.peer.index === l.b.index && e.peer.role === l.b.role).length, 1);
});

test.run();
