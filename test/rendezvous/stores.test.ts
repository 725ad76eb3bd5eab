/**
 * The Store contract, run against every backend (real redis-server, a temp directory, a
 * TcpStoreServer), including real child processes for concurrency and cross-process wakeups.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { WeftError } from '../../src/errors.js';
import { dec, enc, startBackends, freshPrefix, runChild, type Backend, type StatStore } from './backends.js';

const code = (c: string) => (e: unknown) => e instanceof WeftError && e.code === c;

async function rejects(p: Promise<unknown>, c: string, ...parts: (string | RegExp)[]): Promise<WeftError> {
  try {
    await p;
  } catch (e) {
    assert.ok(code(c)(e), `expected ${c}, got ${(e as Error).stack}`);
    for (const part of parts) assert.match((e as Error).message, part);
    return e as WeftError;
  }
  assert.unreachable(`expected ${c}`);
  throw new Error('unreachable');
}

let backends: Backend[] = [];
test.before(async () => {
  backends = await startBackends();
});
test.after(async () => {
  for (const b of backends) await b.close();
});

type Case = (b: Backend, s: StatStore) => Promise<void>;
const cases: [string, Case][] = [];
const each = (name: string, fn: Case) => cases.push([name, fn]);

each('set/get/delete round trip bytes exactly', async (_b, s) => {
  const bin = new Uint8Array([0, 255, 10, 13, 0, 128]);
  await s.set('bin', bin);
  assert.equal([...(await s.get('bin'))], [...bin]);
  await s.set('empty', new Uint8Array(0));
  assert.is((await s.get('empty')).byteLength, 0);
  await s.set('bin', enc('overwritten'));
  assert.is(dec(await s.get('bin')), 'overwritten');
  assert.is(await s.delete('bin'), true);
  assert.is(await s.delete('bin'), false);
  await rejects(s.get('bin', { timeoutMs: 0 }), 'ETIMEDOUT', /'.*bin'/);
});

each('timeoutMs 0 looks once: an existing key is found, a missing one fails at once', async (_b, s) => {
  await s.set('there', enc('yes'));
  assert.is(dec(await s.get('there', { timeoutMs: 0 })), 'yes');
  assert.equal((await s.multiGet(['there'], { timeoutMs: 0 })).map(dec), ['yes']);
  await s.wait(['there'], { timeoutMs: 0 });
  await rejects(s.get('absent', { timeoutMs: 0 }), 'ETIMEDOUT', /'.*absent'/);
});

each('multiSet/multiGet keep order; wait resolves when all exist', async (_b, s) => {
  const keys = [...Array(8).keys()].map((i) => `rank/${i}`);
  await s.multiSet(keys.map((k, i) => [k, enc(`addr-${i}`)]));
  assert.equal((await s.multiGet([...keys].reverse())).map(dec), keys.map((_, i) => `addr-${7 - i}`));
  await s.wait(keys, { timeoutMs: 1000 });
  assert.equal(await s.multiGet([]), []);
  await s.wait([]);
});

each('get, wait and multiGet block until another call sets the keys', async (_b, s) => {
  const got = s.multiGet(['late/a', 'late/b'], { timeoutMs: 10_000 });
  const one = s.get('late/b', { timeoutMs: 10_000 });
  const all = s.wait(['late/a', 'late/b'], { timeoutMs: 10_000 });
  setTimeout(() => void s.set('late/a', enc('A')), 30);
  setTimeout(() => void s.multiSet([['late/b', enc('B')]]), 60);
  assert.equal((await got).map(dec), ['A', 'B']);
  assert.is(dec(await one), 'B');
  await all;
});

each('add is atomic from zero, takes negatives, and the counter reads as decimal', async (_b, s) => {
  assert.is(await s.add('n', 1), 1);
  assert.is(await s.add('n', 41), 42);
  assert.is(await s.add('n', -2), 40);
  assert.is(dec(await s.get('n')), '40');
  const all = await Promise.all([...Array(50)].map(() => s.add('m', 2)));
  assert.equal([...all].sort((a, b) => a - b), [...Array(50).keys()].map((i) => 2 * (i + 1)));
  await s.set('text', enc('not a number'));
  await rejects(s.add('text', 1), 'EINVAL', /not a counter/);
  await rejects(s.add('n', 1.5), 'EINVAL', /safe integer/);
});

each('compareSet: absent with empty expected, match, mismatch', async (_b, s) => {
  assert.is(dec(await s.compareSet('c', new Uint8Array(0), enc('v1'))), 'v1');
  assert.is(dec(await s.compareSet('c', enc('wrong'), enc('v2'))), 'v1');
  assert.is(dec(await s.compareSet('c', enc('v1'), enc('v2'))), 'v2');
  assert.is(dec(await s.get('c')), 'v2');
  assert.is((await s.compareSet('absent', enc('x'), enc('y'))).byteLength, 0, 'absent + non-empty expected: nothing stored');
  await rejects(s.get('absent', { timeoutMs: 0 }), 'ETIMEDOUT');
});

each('write-once: the second writer gets EEXIST naming the key and both values', async (_b, s) => {
  await s.set('rank/3', enc('host-a:1234'), { once: true });
  const e = await rejects(s.set('rank/3', enc('host-b:999'), { once: true }), 'EEXIST', /'.*rank\/3'/, /host-a:1234/, /host-b:999/, /fresh prefix/);
  assert.not.match(e.message, /undefined/);
  await rejects(s.set('rank/3', enc('host-a:1234'), { once: true }), 'EEXIST', /same value/);
  assert.is(dec(await s.get('rank/3')), 'host-a:1234');
  // multiSet once is all or none where the backend allows, and at least reports the key.
  await rejects(s.multiSet([['fresh/1', enc('1')], ['rank/3', enc('x')]], { once: true }), 'EEXIST', /rank\/3/);
  await rejects(s.get('fresh/1', { timeoutMs: 0 }), 'ETIMEDOUT');
  // A plain set overwrites, as in torch.
  await s.set('rank/3', enc('replaced'));
  assert.is(dec(await s.get('rank/3')), 'replaced');
});

each('wait timeout lists exactly the missing keys, promptly', async (_b, s) => {
  await s.multiSet([['rank/0', enc('a')], ['rank/2', enc('c')]]);
  const t0 = performance.now();
  const e = await rejects(s.wait(['rank/0', 'rank/1', 'rank/2', 'rank/3'], { timeoutMs: 150 }), 'ETIMEDOUT', /2 of 4 keys still missing/, /rank\/1'/, /rank\/3'/, /150 ms/);
  assert.not.match(e.message, /rank\/0'|rank\/2'/);
  assert.ok(performance.now() - t0 < 5000, 'the timeout fires near its time');
  await rejects(s.multiGet(['rank/0', 'rank/9'], { timeoutMs: 50 }), 'ETIMEDOUT', /1 of 2 keys still missing: '.*rank\/9'/);
  await rejects(s.get('rank/5', { timeoutMs: 0 }), 'ETIMEDOUT', /rank\/5/);
});

each('an AbortSignal ends a wait promptly with EABORTED naming the missing keys', async (_b, s) => {
  const ac = new AbortController();
  const t0 = performance.now();
  setTimeout(() => ac.abort(new Error('job cancelled')), 50);
  await rejects(s.multiGet(['never/1', 'never/2'], { timeoutMs: 30_000, signal: ac.signal }), 'EABORTED', /never\/1/, /never\/2/);
  assert.ok(performance.now() - t0 < 5000, 'abort is prompt');
  await rejects(s.wait(['never/3'], { signal: AbortSignal.abort() }), 'EABORTED', /never\/3/);
  // The store still works after an aborted wait.
  await s.set('after', enc('ok'));
  assert.is(dec(await s.get('after', { timeoutMs: 1000 })), 'ok');
});

each('bad arguments are EINVAL before anything is sent', async (_b, s) => {
  const before = s.stats.commands;
  await rejects(s.set('', enc('x')), 'EINVAL', /non-empty/);
  await rejects(s.set('k', 'text' as unknown as Uint8Array), 'EINVAL', /Uint8Array/);
  await rejects(s.get(42 as unknown as string), 'EINVAL');
  await rejects(s.multiGet('k' as unknown as string[]), 'EINVAL');
  await rejects(s.get('k', { timeoutMs: -1 }), 'EINVAL', /timeoutMs/);
  assert.is(s.stats.commands, before);
});

each('a waiter in another process is woken by a set here, and the reverse', async (b, s) => {
  const prefix = freshPrefix('xproc');
  const child = runChild(b.urlFor(prefix), 'get', 'handoff', '15000');
  await new Promise<void>((r) => child.child.once('message', () => r())); // the child is waiting
  const here = await b.open(prefix);
  await new Promise((r) => setTimeout(r, 100));
  await here.set('handoff', enc('from parent'));
  const res = await child;
  assert.is(res.code, 0);
  assert.equal(res.messages.at(-1), { value: 'from parent' });
  // Reverse: we wait, a child sets.
  const setter = runChild(b.urlFor(prefix), 'set', 'back', 'from child', '200');
  assert.is(dec(await here.get('back', { timeoutMs: 15_000 })), 'from child');
  assert.is((await setter).code, 0);
  await here.close();
});

// The FileStore's adds go through a lock file (a few ms each with 8 contenders on 2 cores):
// 250 per process there keep 8-way contention at a quarter of the time.
each('8 processes x 1000 adds (FileStore: x 250) on one counter give exactly 8 x that', async (b, s) => {
  const prefix = freshPrefix('adds');
  const per = b.name === 'file' && process.env.WEFT_SOAK !== '1' ? 250 : 1000;
  const kids = [...Array(8)].map(() => runChild(b.urlFor(prefix), 'add', 'counter', String(per)));
  const results = await Promise.all(kids);
  for (const r of results) assert.is(r.code, 0);
  const store = await b.open(prefix);
  assert.is(dec(await store.get('counter')), String(8 * per));
  const lasts = results.map((r) => (r.messages.at(-1) as { last: number }).last);
  assert.ok(lasts.includes(8 * per), `one process made the last add: ${lasts}`);
  await store.close();
});

each('two jobs with different prefixes never see each other', async (b) => {
  const [pa, pb] = [freshPrefix('jobA'), freshPrefix('jobB')];
  const a = await b.open(pa);
  const bb = await b.open(pb);
  await a.set('rank/0', enc('A'), { once: true });
  await bb.set('rank/0', enc('B'), { once: true }); // no EEXIST: another namespace
  assert.is(dec(await a.get('rank/0')), 'A');
  assert.is(dec(await bb.get('rank/0')), 'B');
  await a.set('only-a', enc('1'));
  await rejects(bb.wait(['only-a'], { timeoutMs: 100 }), 'ETIMEDOUT', new RegExp(`${pb}/only-a`));
  assert.is(await a.add('n', 5), 5);
  assert.is(await bb.add('n', 1), 1);
  await a.close({ purge: true }); // purges only job A
  assert.is(dec(await bb.get('rank/0')), 'B');
  const a2 = await b.open(pa);
  await rejects(a2.get('rank/0', { timeoutMs: 0 }), 'ETIMEDOUT');
  await a2.close();
  await bb.close({ purge: true });
});

each('multiGet of 8 present keys: counted commands and round trips', async (b, s) => {
  const keys = [...Array(8).keys()].map((i) => `mg/${i}`);
  await s.multiSet(keys.map((k) => [k, enc(k)]));
  const before = { ...s.stats };
  await s.multiGet(keys);
  const d = { commands: s.stats.commands - before.commands, roundTrips: s.stats.roundTrips - before.roundTrips };
  if (b.name === 'file') assert.equal(d, { commands: 8, roundTrips: 1 });
  else assert.equal(d, { commands: 1, roundTrips: 1 });
});

each('connect pattern: 8 ranks publish one blob and multiGet the others; counts per rank', async (b) => {
  const n = 8;
  const prefix = freshPrefix('mesh');
  const ranks = await Promise.all([...Array(n)].map(() => b.open(prefix)));
  await Promise.all(ranks.map(async (s, r) => {
    await new Promise((res) => setTimeout(res, r * 20)); // ranks arrive at different times
    await s.set(`mesh/${r}`, enc(`addr-${r}`), { once: true });
    const others = [...Array(n).keys()].filter((p) => p !== r).map((p) => `mesh/${p}`);
    assert.equal((await s.multiGet(others, { timeoutMs: 10_000 })).map(dec), others.map((k) => `addr-${k.slice(5)}`));
  }));
  const per = ranks.map((s) => `${s.stats.commands}/${s.stats.roundTrips}`);
  console.log(`  [${b.name}] connect pattern, ${n} ranks, commands/roundTrips per rank: ${per.join(' ')}`);
  // TcpStore: one SET, one held MGET, whatever the arrival order.
  if (b.name === 'tcp') for (const s of ranks) assert.equal(s.stats, { commands: 2, roundTrips: 2 });
  for (const s of ranks) await s.close();
});

each('a write whose AbortSignal has aborted fails with EABORTED and sends nothing; a bad timeoutMs is EINVAL', async (_b, s) => {
  await s.set('k', enc('v'));
  await s.set('n', enc('5'));
  const before = s.stats.commands;
  const signal = AbortSignal.abort();
  await rejects(s.set('k', enc('w'), { signal }), 'EABORTED', /set/);
  await rejects(s.multiSet([['k', enc('w')]], { signal }), 'EABORTED', /multiSet/);
  await rejects(s.add('n', 1, { signal }), 'EABORTED', /add/);
  await rejects(s.delete('k', { signal }), 'EABORTED', /delete/);
  await rejects(s.compareSet('k', enc('v'), enc('w'), { signal }), 'EABORTED', /compareSet/);
  assert.is(s.stats.commands, before, 'an aborted write reached the backend');
  await rejects(s.add('n', 1, { timeoutMs: -1 }), 'EINVAL', /timeoutMs/);
  assert.is(dec(await s.get('k')), 'v');
  assert.is(await s.add('n', 1, { timeoutMs: 5000, signal: new AbortController().signal }), 6);
});

each('operations after close fail with ECLOSED', async (b) => {
  const s = await b.open(freshPrefix('closed'));
  await s.close();
  await rejects(s.set('k', enc('v')), 'ECLOSED');
  await rejects(s.get('k'), 'ECLOSED');
});

for (const [name, fn] of cases) {
  for (const kind of ['redis', 'file', 'tcp'] as const) {
    test(`[${kind}] ${name}`, async () => {
      const b = backends.find((x) => x.name === kind) as Backend;
      const s = await b.open(freshPrefix(kind));
      try {
        await fn(b, s);
      } finally {
        await s.close({ purge: true }).catch(() => {});
      }
    });
  }
}

test.run();
