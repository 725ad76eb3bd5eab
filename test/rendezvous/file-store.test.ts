/**
 * FileStore specifics: safe file names for any key, atomic files, stale-lock recovery,
 * waits woken by fs.watch rather than the poll, and a directory only its user can use
 * (files 0600, directory 0700; someone else's or a writable-by-others one refused, also the
 * predictable mpirun fallback directory).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { chmodSync, chownSync, lchownSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { FileStore } from '../../src/rendezvous/stores/file/store.js';
import { rankFromEnv } from '../../src/rendezvous/env.js';
import { openStore } from '../../src/rendezvous/open.js';
import { failure, runChild } from './backends.js';

const mode = (p: string) => statSync(p).mode & 0o7777;
const uid = process.getuid!();
/** A user id that is not ours (root can hand files to it; others cannot). */
const OTHER = uid === 0 ? 65534 : undefined;

const enc = (s: string) => new TextEncoder().encode(s);
const dec = (b: Uint8Array) => new TextDecoder().decode(b);

let dir = '';
test.before.each(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'weft-filestore-'));
});
test.after.each(() => rmSync(dir, { recursive: true, force: true }));

test('any key maps to one safe file name; no temporaries or locks are left behind', async () => {
  const s = new FileStore(dir);
  const keys = ['../../etc/passwd', 'a/b/c', 'ünï cödé ✓', '.', 'x'.repeat(150), 'CaSe', 'case'];
  for (const k of keys) await s.set(k, enc(k), { once: true });
  await s.add('n', 3);
  await s.compareSet('c', new Uint8Array(0), enc('1'));
  assert.equal((await s.multiGet(keys)).map(dec), keys);
  const files = readdirSync(dir);
  assert.is(files.length, keys.length + 2, files.join(' '));
  for (const f of files) assert.match(f, /^v\.[A-Za-z0-9_-]+$/);
  await s.set('y'.repeat(300), enc('')).then(
    () => assert.unreachable(),
    (e) => assert.match(e.message, /too long/),
  );
  await s.close();
});

test('a lock left by a dead process is recovered', async () => {
  const s = new FileStore(dir, { opTimeoutMs: 10_000 });
  const name = `l.${Buffer.from('counter').toString('base64url')}`;
  // A pid that cannot be alive (above pid_max).
  writeFileSync(path.join(dir, name), `${hostname()} 99999999 0`);
  assert.is(await s.add('counter', 7), 7);
  assert.not.ok(readdirSync(dir).includes(name));
  // A live holder's lock is respected until it times out.
  writeFileSync(path.join(dir, name), `${hostname()} ${process.pid} ${Date.now()}`);
  const short = new FileStore(dir, { opTimeoutMs: 200 });
  await short.add('counter', 1).then(
    () => assert.unreachable(),
    (e) => (assert.is(e.code, 'ETIMEDOUT'), assert.match(e.message, /lock file/)),
  );
  await s.close();
  await short.close();
});

test('a dead process\'s lock met by many contenders at once: one of them breaks it, no update is lost', async () => {
  // Contenders that all judged the lock stale each unlinked "it": the second unlink removed the
  // first breaker's fresh lock, and two adds ran at once, one lost (until 2026-11-27).
  const stores = [...Array(8)].map(() => new FileStore(dir, { opTimeoutMs: 10_000 }));
  const name = `l.${Buffer.from('n').toString('base64url')}`;
  let want = 0;
  for (let round = 0; round < 40; round++) {
    writeFileSync(path.join(dir, name), `${hostname()} 99999999 ${round}`);
    await Promise.all(stores.map((s) => s.add('n', 1)));
    want += stores.length;
    assert.is(dec(await stores[0].get('n')), String(want), `round ${round}: updates lost`);
  }
  assert.equal(readdirSync(dir).filter((f) => !f.startsWith('v.')), [], 'lock files left behind');
  for (const s of stores) await s.close();
});

test('waits are woken by fs.watch, not the poll (poll set to 20 s), across processes', async () => {
  const s = new FileStore(dir, { pollFirstMs: 20_000, pollMaxMs: 20_000 });
  const t0 = performance.now();
  const child = runChild(pathToFileURL(dir).toString(), 'set', 'k', 'watched', '300');
  assert.is(dec(await s.get('k', { timeoutMs: 15_000 })), 'watched');
  assert.ok(performance.now() - t0 < 10_000, 'woken by the directory watch');
  assert.is((await child).code, 0);
  await s.close();
});

test('files are created 0600 and a missing directory 0700, whatever the umask', async () => {
  const old = process.umask(0); // the most permissive umask: the modes must come from FileStore
  try {
    const sub = path.join(dir, 'a', 'b');
    const s = new FileStore(sub);
    assert.is(mode(sub), 0o700);
    await s.set('mesh/0', enc('addr'), { once: true });
    await s.set('plain', enc('v'));
    await s.multiSet([['m/1', enc('1')], ['m/2', enc('2')]], { once: true });
    await s.add('n', 1);
    await s.compareSet('c', new Uint8Array(0), enc('x'));
    const files = readdirSync(sub);
    assert.is(files.length, 6, files.join(' '));
    for (const f of files) assert.is(mode(path.join(sub, f)), 0o600, f);
    await s.close();
  } finally {
    process.umask(old);
  }
});

test('a directory others can write, or someone else\'s, is refused with EINVAL naming it and the fix', async () => {
  const refused = (d: string, why: RegExp) => {
    try {
      new FileStore(d);
    } catch (e) {
      assert.is((e as { code?: string }).code, 'EINVAL');
      assert.match((e as Error).message, `FileStore ${d}: refusing the directory`);
      assert.match((e as Error).message, why);
      assert.match((e as Error).message, /WEFT_STORE/);
      return;
    }
    assert.unreachable(`${d} was accepted`);
  };
  chmodSync(dir, 0o777);
  refused(dir, /writable by its group and every user \(mode 0777\).*chmod go-w/);
  chmodSync(dir, 0o770);
  refused(dir, /writable by its group \(mode 0770\)/);
  chmodSync(dir, 0o1777);
  refused(dir, /every user \(mode 1777\).*shared directory \(like \/tmp\): use a subdirectory/);
  chmodSync(dir, 0o755); // readable is fine: the files are 0600
  await new FileStore(dir).close();
  chmodSync(dir, 0o700);
  // A file in the directory's place.
  writeFileSync(path.join(dir, 'f'), '');
  assert.throws(() => new FileStore(path.join(dir, 'f')), /cannot create the directory/);
  // Someone else's: the directory, or a link they own (which they can re-point).
  if (OTHER !== undefined) {
    const theirs = path.join(dir, 'theirs');
    mkdirSync(theirs, { mode: 0o700 });
    chownSync(theirs, OTHER, OTHER);
    refused(theirs, new RegExp(`belongs to uid ${OTHER}, not to this process's user \\(uid ${uid}\\)`));
    const mine = path.join(dir, 'mine');
    mkdirSync(mine, { mode: 0o700 });
    const link = path.join(dir, 'link');
    symlinkSync(mine, link);
    await new FileStore(link).close(); // our own link to our own directory
    lchownSync(link, OTHER, OTHER);
    refused(link, new RegExp(`symbolic link owned by uid ${OTHER}`));
  } else {
    refused('/', /belongs to uid 0/); // not root: root's directory is someone else's
  }
});

test('the mpirun fallback directory: per user and job, created 0700, refused when someone prepared it', async () => {
  const job = `fs-test-${process.pid}-${Date.now().toString(36)}`;
  const env = { OMPI_COMM_WORLD_RANK: '0', OMPI_COMM_WORLD_SIZE: '1', OMPI_MCA_ess_base_jobid: job };
  const url = rankFromEnv(env).store;
  const fallback = path.join(tmpdir(), `weft-store-${uid}-${job}`);
  assert.is(url, `file://${fallback}`);
  try {
    // Someone made it first, writable by all (or theirs): the ranks refuse it, naming it and WEFT_STORE.
    mkdirSync(fallback);
    chmodSync(fallback, 0o777);
    const e = await failure(openStore(url));
    assert.is(e.code, 'EINVAL');
    assert.match(e.message, fallback);
    assert.match(e.message, /set WEFT_STORE/);
    if (OTHER !== undefined) {
      chmodSync(fallback, 0o700);
      chownSync(fallback, OTHER, OTHER);
      assert.match((await failure(openStore(url))).message, `belongs to uid ${OTHER}`);
      // A link of theirs in its place, pointing at a directory of ours, is refused too.
      rmSync(fallback, { recursive: true, force: true });
      symlinkSync(dir, fallback);
      lchownSync(fallback, OTHER, OTHER);
      assert.match((await failure(openStore(url))).message, /symbolic link owned by uid/);
    }
    rmSync(fallback, { recursive: true, force: true });
    // Nobody did: created 0700, and it works.
    const s = await openStore(url);
    assert.is(mode(fallback), 0o700);
    await s.set('k', enc('v'));
    assert.is(mode(path.join(fallback, readdirSync(fallback)[0])), 0o600);
    await s.close();
  } finally {
    rmSync(fallback, { recursive: true, force: true });
  }
});

test.run();
