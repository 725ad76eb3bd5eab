/**
 * RedisStore specifics against real redis-server processes: auth, ACL users and db numbers,
 * expiry, purge, push-based waits (no polling), command counts, and a server that goes away.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { WeftError } from '../../src/errors.js';
import { RedisStore, redactUrl } from '../../src/rendezvous/stores/redis/store.js';
import { PrefixStore } from '../../src/rendezvous/prefix-store.js';
import { openStore } from '../../src/rendezvous/open.js';
import { dec, enc, failure, freshPrefix, redisUrl, runChild } from './backends.js';


function withAuth(user: string, password: string, db?: number): string {
  const u = new URL(redisUrl());
  u.username = user;
  u.password = password;
  if (db !== undefined) u.pathname = `/${db}`;
  return u.toString();
}

test('the URL in messages never carries the password', () => {
  assert.is(redactUrl('redis://user:secret@h:6379/3'), 'redis://user@h:6379/3');
  assert.is(redactUrl('rediss://:secret@h:6380'), 'rediss://h:6380');
  assert.not.match(redactUrl(redisUrl()), new URL(redisUrl()).password);
});

test('a wrong password fails at once with a clear EINVAL, without the password', async () => {
  const t0 = performance.now();
  const e = await failure(RedisStore.connect(withAuth('', 'not-the-password'), { timeoutMs: 10_000 }));
  assert.is(e.code, 'EINVAL');
  assert.match(e.message, /refused the credentials/);
  assert.match(e.message, /check the user and password in the URL/);
  assert.not.match(e.message, /not-the-password/);
  assert.ok(performance.now() - t0 < 5000, 'no retry loop until the timeout');
  const none = await failure(RedisStore.connect(withAuth('', ''), { timeoutMs: 10_000 }));
  assert.is(none.code, 'EINVAL');
});

test('ACL user and db number from the URL', async () => {
  const admin = new Redis(redisUrl());
  const user = `weft-${process.pid}`;
  try {
    await admin.call('ACL', 'SETUSER', user, 'on', '>pw-of-user', '~*', '&*', '+@all');
    const store = await RedisStore.connect(withAuth(user, 'pw-of-user', 3));
    const key = freshPrefix('acl');
    await store.set(key, enc('in db 3'));
    await admin.select(3);
    assert.is(await admin.get(key), 'in db 3');
    assert.ok((await admin.ttl(key)) > 86_000, 'keys expire after 24 h by default');
    await admin.select(0);
    assert.is(await admin.exists(key), 0, 'not in db 0');
    await store.close();
    const wrong = await failure(RedisStore.connect(withAuth(user, 'nope', 3)));
    assert.match(wrong.message, new RegExp(`redis://${user}@`));
  } finally {
    await admin.call('ACL', 'DELUSER', user).catch(() => {});
    admin.disconnect();
  }
});

/** Runs `fn` with WEFT_STORE_PASSWORD(_FILE) set as given (undefined: unset), then restores them. */
async function withPasswordEnv<T>(vars: { WEFT_STORE_PASSWORD?: string; WEFT_STORE_PASSWORD_FILE?: string }, fn: () => Promise<T>): Promise<T> {
  const names = ['WEFT_STORE_PASSWORD', 'WEFT_STORE_PASSWORD_FILE'] as const;
  const saved = names.map((n) => process.env[n]);
  names.forEach((n) => (vars[n] === undefined ? delete process.env[n] : (process.env[n] = vars[n])));
  try {
    return await fn();
  } finally {
    names.forEach((n, i) => (saved[i] === undefined ? delete process.env[n] : (process.env[n] = saved[i])));
  }
}

test('no password in the URL: it comes from WEFT_STORE_PASSWORD or WEFT_STORE_PASSWORD_FILE', async () => {
  const password = decodeURIComponent(new URL(redisUrl()).password);
  const bare = withAuth('', ''); // the URL without any credentials, as WEFT_STORE would hold it
  const dir = mkdtempSync(path.join(tmpdir(), 'weft-redis-pw-'));
  const admin = new Redis(redisUrl());
  const user = `weft-env-${process.pid}`;
  const prefix = freshPrefix('envpw');
  try {
    await withPasswordEnv({ WEFT_STORE_PASSWORD: password }, async () => {
      const store = await RedisStore.connect(bare, { timeoutMs: 10_000 });
      // A wait subscribes on a second connection: it authenticates with the same password.
      const later = store.get(`${prefix}/late`, { timeoutMs: 10_000 });
      await store.set(`${prefix}/late`, enc('from env'));
      assert.is(dec(await later), 'from env');
      await store.close();
      // Through openStore, as a rank with WEFT_STORE=<bare URL> does.
      const viaOpen = await openStore(`${bare}?prefix=${prefix}`, { timeoutMs: 10_000 });
      assert.is(dec(await viaOpen.get('late')), 'from env');
      await viaOpen.close();
    });
    const file = path.join(dir, 'password');
    writeFileSync(file, `${password}\n`);
    chmodSync(file, 0o600);
    await withPasswordEnv({ WEFT_STORE_PASSWORD_FILE: file }, async () => {
      const store = await RedisStore.connect(bare, { timeoutMs: 10_000 });
      assert.is(dec(await store.get(`${prefix}/late`)), 'from env');
      await store.close();
    });
    // An ACL user named in the URL, its password from the environment.
    await admin.call('ACL', 'SETUSER', user, 'on', '>pw-from-env', '~*', '&*', '+@all');
    await withPasswordEnv({ WEFT_STORE_PASSWORD: 'pw-from-env' }, async () => {
      const store = await RedisStore.connect(withAuth(user, ''), { timeoutMs: 10_000 });
      assert.is(await store.add(`${prefix}/n`, 2), 2);
      await store.close();
    });
    // A password in the URL wins; a wrong one from the environment is a clear EINVAL, not echoed.
    await withPasswordEnv({ WEFT_STORE_PASSWORD: 'wrong-env-password' }, async () => {
      const store = await RedisStore.connect(redisUrl(), { timeoutMs: 10_000 });
      await store.close();
      const e = await failure(RedisStore.connect(bare, { timeoutMs: 10_000 }));
      assert.is(e.code, 'EINVAL');
      assert.match(e.message, /refused the credentials.*WEFT_STORE_PASSWORD/);
      assert.not.match(e.message, /wrong-env-password/);
    });
    const unreadable = await withPasswordEnv({ WEFT_STORE_PASSWORD_FILE: path.join(dir, 'missing') }, () => failure(RedisStore.connect(bare)));
    assert.match(unreadable.message, /cannot read WEFT_STORE_PASSWORD_FILE=/);
  } finally {
    await admin.call('ACL', 'DELUSER', user).catch(() => {});
    await admin.del(`${prefix}/late`, `${prefix}/n`);
    admin.disconnect();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('ttlSeconds sets the expiry of every write; purge deletes only the prefix', async () => {
  const admin = new Redis(redisUrl());
  const store = await RedisStore.connect(redisUrl(), { ttlSeconds: 60 });
  const [job, other] = [freshPrefix('purge'), freshPrefix('keep')];
  try {
    await store.multiSet([[`${job}/a`, enc('1')], [`${job}/b/c`, enc('2')], [job, enc('3')], [`${job}x/d`, enc('4')], [`${other}/a`, enc('5')]]);
    await store.add(`${job}/n`, 1);
    for (const k of [`${job}/a`, `${job}/n`]) {
      const ttl = await admin.ttl(k);
      assert.ok(ttl > 0 && ttl <= 60, `${k} ttl ${ttl}`);
    }
    assert.is(await store.purge(job), 4);
    assert.is(await admin.exists(`${job}/a`, `${job}/b/c`, job, `${job}/n`), 0);
    assert.is(await admin.exists(`${job}x/d`, `${other}/a`), 2, 'a longer prefix and another job survive');
    assert.is((await failure(store.purge(''))).code, 'EINVAL');
    assert.is((await failure(store.close({ purge: true }))).code, 'EINVAL');
    // Glob characters in a prefix are literal.
    await store.set('we*rd/1', enc('x'));
    await store.set('weXrd/1', enc('y'));
    assert.is(await store.purge('we*rd'), 1);
    assert.is(await store.purge('weXrd'), 1);
  } finally {
    await store.purge(other);
    await store.close();
    admin.disconnect();
  }
});

test('waits are pushed, not polled: with the safety poll at 20 s a set in another process still wakes the waiter', async () => {
  const store = await RedisStore.connect(redisUrl(), { pollFirstMs: 20_000, pollMaxMs: 20_000 });
  const prefix = freshPrefix('push');
  try {
    const before = { ...store.stats };
    const t0 = performance.now();
    const child = runChild(`${redisUrl()}?prefix=${prefix}`, 'set', 'k', 'pushed', '300');
    const [v] = await store.multiGet([`${prefix}/k`], { timeoutMs: 15_000 });
    const waited = performance.now() - t0;
    assert.is(dec(v), 'pushed');
    assert.ok(waited < 10_000, `woken by the notification after ${waited} ms`);
    // MGET, SUBSCRIBE, MGET, then the value arrives pushed; UNSUBSCRIBE needs no answer.
    assert.equal({ commands: store.stats.commands - before.commands, roundTrips: store.stats.roundTrips - before.roundTrips }, { commands: 4, roundTrips: 3 });
    assert.is((await child).code, 0);
  } finally {
    await store.purge(prefix);
    await store.close();
  }
});

test('connect-like pattern: 8 ranks, set once + multiGet of the 7 others, constant commands per rank', async () => {
  const n = 8;
  const prefix = freshPrefix('mesh');
  const ranks = await Promise.all([...Array(n)].map(() => RedisStore.connect(redisUrl()).then((s) => new PrefixStore(prefix, s))));
  await Promise.all(ranks.map(async (s, r) => {
    // Stagger the arrivals, as real ranks start at different times.
    await new Promise((res) => setTimeout(res, r * 20));
    await s.set(`mesh/${r}`, enc(`addr-${r}`), { once: true });
    const others = [...Array(n).keys()].filter((p) => p !== r).map((p) => `mesh/${p}`);
    const blobs = await s.multiGet(others, { timeoutMs: 10_000 });
    assert.equal(blobs.map(dec), others.map((k) => `addr-${k.split('/')[1]}`));
  }));
  const per = ranks.map((s) => ({ ...s.stats }));
  console.log(`  redis connect pattern, ${n} ranks, per rank {commands, roundTrips}: ${JSON.stringify(per)}`);
  for (const s of per) assert.ok(s.roundTrips <= 6, `O(1) round trips per rank: ${JSON.stringify(s)}`);
  assert.equal(per[n - 1], { commands: 2, roundTrips: 2 }, 'the last rank finds everything: SET + MGET');
  await ranks[0].purge();
  for (const s of ranks) await s.close();
});

// ------------------------------------------------------------------ a server that goes away

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
    srv.on('error', reject);
  });
}

async function startRedis(port: number, dir: string): Promise<ChildProcess> {
  const proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--requirepass', 'pw2'], { stdio: 'ignore' });
  for (let i = 0; i < 100; i++) {
    const up = await new Promise<boolean>((resolve) => {
      const s = new Socket();
      s.once('error', () => resolve(false));
      s.connect(port, '127.0.0.1', () => (s.destroy(), resolve(true)));
    });
    if (up) return proc;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('redis-server did not start');
}

test('a lost server: operations fail within the timeout naming URL, operation and key; then it recovers', async () => {
  const port = await freePort();
  const dir = mkdtempSync(path.join(tmpdir(), 'weft-redis-lost-'));
  let proc = await startRedis(port, dir);
  const url = `redis://:pw2@127.0.0.1:${port}/0`;
  const store = await RedisStore.connect(url, { opTimeoutMs: 800 });
  try {
    await store.set('k', enc('v'));
    proc.kill('SIGKILL');
    await new Promise((r) => proc.once('exit', r));
    const t0 = performance.now();
    const e = await failure(store.set('rank/7', enc('x')));
    assert.is(e.code, 'ETIMEDOUT');
    assert.match(e.message, `redis://127.0.0.1:${port}/0`);
    assert.match(e.message, /set\('rank\/7'/);
    assert.match(e.message, /could not reach Redis/);
    assert.not.match(e.message, /pw2/);
    assert.ok(performance.now() - t0 < 5000);
    const w = await failure(store.get('rank/1', { timeoutMs: 500 }));
    assert.is(w.code, 'ETIMEDOUT');
    assert.match(w.message, /rank\/1/);
    // The server comes back (empty: no persistence); the store reconnects by itself.
    proc = await startRedis(port, dir);
    const later = store.get('back', { timeoutMs: 10_000 });
    await store.set('back', enc('again'));
    assert.is(dec(await later), 'again');
  } finally {
    await store.close();
    proc.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a URL that is not redis is EINVAL', async () => {
  assert.is((await failure(RedisStore.connect('http://x'))).code, 'EINVAL');
});

test.run();
