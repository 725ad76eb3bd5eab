// The set-up of `npm test` (scripts/prepare-tests.mjs) on a machine that lacks a package: run
// with redis-server hidden from PATH (a PATH of links to every other command) and installing
// turned off, it stops within seconds with the command to run and what the tests would skip;
// WEFT_TEST_ALLOW_MISSING=1 lets the tests go on. With everything present it says nothing.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const SCRIPT = path.join(root, 'scripts', 'prepare-tests.mjs');
const hasRedis = spawnSync('sh', ['-c', 'command -v redis-server'], { stdio: 'ignore' }).status === 0;

/** A PATH directory with links to every command on PATH but `hidden`. */
function pathWithout(hidden: string): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'weft-path-'));
  for (const d of (process.env.PATH ?? '').split(':')) {
    if (!d || !existsSync(d)) continue;
    for (const name of readdirSync(d)) {
      if (name === hidden || existsSync(path.join(dir, name))) continue;
      symlinkSync(path.join(d, name), path.join(dir, name));
    }
  }
  return dir;
}

function prepare(env: NodeJS.ProcessEnv) {
  const t0 = performance.now();
  const r = spawnSync(process.execPath, [SCRIPT], { env: { ...process.env, ...env }, encoding: 'utf8', timeout: 60_000 });
  return { code: r.status, out: r.stdout, err: r.stderr, ms: performance.now() - t0 };
}

if (!hasRedis) {
  console.log('prepare-tests.test: skipped: redis-server is not installed here (the case hides it)');
} else {
  test('redis-server hidden, installing off: one line naming the command, one listing what would be skipped', () => {
    const dir = pathWithout('redis-server');
    try {
      const r = prepare({ PATH: dir, WEFT_TEST_NO_INSTALL: '1' });
      assert.is(r.code, 1, r.out + r.err);
      const lines = r.err.trim().split('\n');
      assert.is(lines.length, 2, r.err);
      assert.match(lines[0], /^npm test: missing system packages; run: (sudo )?apt-get install -y redis-server && npm rebuild/);
      assert.match(lines[1], /^npm test: without them the tests skip: the Redis store tests$/);
      const allowed = prepare({ PATH: dir, WEFT_TEST_NO_INSTALL: '1', WEFT_TEST_ALLOW_MISSING: '1' });
      assert.is(allowed.code, 0, allowed.err);
      assert.match(allowed.err, /without them the tests skip/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  // CI installs every package first; a developer machine may lack some: then the case is
  // skipped, saying which, instead of passing without its assertion.
  const present = prepare({ WEFT_TEST_NO_INSTALL: '1' });
  if (present.code !== 0) console.log(`prepare-tests.test: skipped "everything present": ${present.err.trim().split('\n')[0]}`);
  (present.code === 0 ? test : test.skip)('everything present: nothing to do, nothing printed', () => {
    assert.is(present.out + present.err, '');
  });
}

test.run();
