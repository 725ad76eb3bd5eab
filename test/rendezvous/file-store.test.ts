/**
 * FileStore specifics: safe file names for any key, atomic files, stale-lock recovery, and
 * waits woken by fs.watch rather than the poll.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { FileStore } from '../../src/rendezvous/stores/file/store.js';
import { runChild } from './backends.js';

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

test('waits are woken by fs.watch, not the poll (poll set to 20 s), across processes', async () => {
  const s = new FileStore(dir, { pollFirstMs: 20_000, pollMaxMs: 20_000 });
  const t0 = performance.now();
  const child = runChild(pathToFileURL(dir).toString(), 'set', 'k', 'watched', '300');
  assert.is(dec(await s.get('k', { timeoutMs: 15_000 })), 'watched');
  assert.ok(performance.now() - t0 < 10_000, 'woken by the directory watch');
  assert.is((await child).code, 0);
  await s.close();
});

test.run();
