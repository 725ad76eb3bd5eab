#!/usr/bin/env node
// Runs every compiled test file (dist/test/**/*.test.js) in its own process, with a real
// redis-server on a free loopback port for the tests that need one (password-protected;
// WEFT_TEST_REDIS_URL carries the password), then checks that no
// shared-memory segment leaked. Ends with the line "N passed, N failed".
// Usage: node scripts/run-tests.mjs [filter]    (WEFT_SOAK=1 for the long variants)
import { spawn, spawnSync } from 'node:child_process';
import { readdirSync, statSync, readdirSync as ls, mkdtempSync, rmSync } from 'node:fs';
import { createServer, Socket } from 'node:net';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const filter = process.argv[2];
const FILE_TIMEOUT_MS = Number(process.env.WEFT_TEST_FILE_TIMEOUT_MS ?? 600_000);

function findTests(dir) {
  const out = [];
  for (const name of readdirSync(dir)) {
    const p = path.join(dir, name);
    if (statSync(p).isDirectory()) out.push(...findTests(p));
    else if (name.endsWith('.test.js')) out.push(p);
  }
  return out.sort();
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
    srv.on('error', reject);
  });
}

async function startRedis() {
  if (spawnSync('sh', ['-c', 'command -v redis-server']).status !== 0) return undefined;
  const port = await freePort();
  const dir = mkdtempSync(path.join(tmpdir(), 'weft-redis-'));
  // A password, as production servers have one: the tests then cover authentication too.
  const password = randomBytes(12).toString('hex');
  const proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--requirepass', password], { stdio: 'ignore' });
  for (let i = 0; i < 100; i++) {
    const ok = await new Promise((resolve) => {
      const s = new Socket();
      s.once('error', () => resolve(false));
      s.connect(port, '127.0.0.1', () => (s.destroy(), resolve(true)));
    });
    if (ok) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  return { url: `redis://:${password}@127.0.0.1:${port}`, stop: () => (proc.kill('SIGTERM'), rmSync(dir, { recursive: true, force: true })) };
}

function shmSegments() {
  try {
    // weft's segments, and libfabric shm's regions (`<pid>:<domain>:<ep>`, ofi:shm tests).
    return ls('/dev/shm').filter((n) => n.startsWith('weft.') || /^\d+:\d+:\d+$/.test(n));
  } catch {
    return [];
  }
}

function runFile(file, env) {
  return new Promise((resolve) => {
    const started = Date.now();
    const child = spawn(process.execPath, [file], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (process.stdout.write(d), (out += d)));
    child.stderr.on('data', (d) => process.stderr.write(d));
    const timer = setTimeout(() => child.kill('SIGKILL'), FILE_TIMEOUT_MS);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      // uvu prints "Total: N / Passed: N / Skipped: N" per file.
      const clean = out.replace(/\x1b\[[0-9;]*m/g, '');
      const total = [...clean.matchAll(/Total:\s+(\d+)/g)].reduce((a, m) => a + Number(m[1]), 0);
      const passed = [...clean.matchAll(/Passed:\s+(\d+)/g)].reduce((a, m) => a + Number(m[1]), 0);
      const skipped = [...clean.matchAll(/Skipped:\s+(\d+)/g)].reduce((a, m) => a + Number(m[1]), 0);
      let failed = total - passed - skipped;
      if ((code !== 0 || signal) && failed === 0) failed = 1;
      resolve({ file, passed, failed, skipped, seconds: (Date.now() - started) / 1000, code, signal });
    });
  });
}

const files = findTests(path.join(root, 'dist', 'test')).filter((f) => !filter || f.includes(filter));
const suiteStarted = Date.now();
const before = new Set(shmSegments());
const redis = await startRedis();
const env = { ...process.env, ...(redis ? { WEFT_TEST_REDIS_URL: redis.url } : {}) };
const results = [];
try {
  for (const file of files) {
    console.log(`\n# ${path.relative(root, file)}`);
    results.push(await runFile(file, env));
  }
} finally {
  redis?.stop();
}
let passed = results.reduce((a, r) => a + r.passed, 0);
let failed = results.reduce((a, r) => a + r.failed, 0);
const skipped = results.reduce((a, r) => a + r.skipped, 0);
const leaked = shmSegments().filter((n) => !before.has(n));
console.log('\nper file:');
for (const r of results) console.log(`  ${r.failed ? 'FAIL' : 'ok  '} ${path.relative(root, r.file)}  ${r.passed} passed, ${r.failed} failed  (${r.seconds.toFixed(1)} s)${r.signal ? ` killed by ${r.signal}` : ''}`);
if (leaked.length) {
  console.log(`FAIL: the suite leaked shared-memory segments: ${leaked.join(', ')}`);
  failed++;
} else {
  console.log('ok   no /dev/shm segment leaked');
  passed++;
}
// npm test must stay under 15 minutes with its build (the soak variants sit behind WEFT_SOAK=1).
const minutes = (Date.now() - suiteStarted) / 60_000;
console.log(`\nthe test files took ${minutes.toFixed(1)} minutes`);
console.log(`\n${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
process.exit(failed ? 1 : 0);
