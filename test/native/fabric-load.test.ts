/**
 * libfabric is loaded only when a fabric is used, and loading it leaves the process's signal
 * handling alone: libinfinipath (which Debian's libfabric pulls in) installs handlers that
 * call exit() (a SIGTERMed rank exited 1 instead of 143, skipped its launcher's cleanup, and
 * once deadlocked in exit) and writes backtrace files into the working directory.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { native, nativeOrigin } from '../../src/native/binding.js';
import { listFabricSegments, listSegments } from '../../src/nic/index.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const CHILD = path.join(here, 'workers', 'fabric-child.js');
const WEFT = path.resolve(here, '..', '..', '..', 'bin', 'weft.js');

interface Report {
  fabricMapped: boolean;
  before: string;
  after: string;
  noBacktrace?: string;
}

/** Starts the child in a scratch directory; resolves with its first stdout line. */
function start(mode: string, cwd: string): { child: ChildProcess; report: Promise<Report> } {
  const child = spawn(process.execPath, [CHILD, mode], { cwd, stdio: ['ignore', 'pipe', 'inherit'] });
  const report = new Promise<Report>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once('line', (l) => resolve(JSON.parse(l) as Report));
    child.once('exit', (code, signal) => reject(new Error(`child exited (${signal ?? code}) before reporting`)));
  });
  return { child, report };
}

function exited(child: ChildProcess): Promise<{ code: number | null; signal: NodeJS.Signals | null; ms: number }> {
  const t0 = performance.now();
  return new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal, ms: performance.now() - t0 })));
}

test('an shm-only process never maps libfabric', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'weft-fabric-'));
  try {
    const { child, report } = start('shm', dir);
    const r = await report;
    await exited(child);
    assert.is(r.fabricMapped, false);
    assert.is(r.after, r.before, 'the caught-signal mask changed');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

const ofi = native.ofi.available ? test : test.skip;

ofi('loading libfabric keeps the signal handlers; SIGTERM in a wait kills with the signal (143), no backtrace files', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'weft-fabric-'));
  try {
    const { child, report } = start('ofi-wait', dir);
    const r = await report;
    assert.is(r.fabricMapped, true);
    assert.is(r.after, r.before, `loading libfabric changed the caught signals from ${r.before} to ${r.after}`);
    assert.is(r.noBacktrace, '1');
    const ended = exited(child);
    child.kill('SIGTERM');
    const e = await ended;
    assert.is(e.signal, 'SIGTERM', `exit code ${e.code} instead of death by SIGTERM`);
    assert.ok(e.ms < 5000, `took ${e.ms} ms to die`);
    assert.equal(readdirSync(dir).filter((f) => f.endsWith('.btr')), []);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

ofi('weft run over ofi: a rank SIGTERMed inside allreduceSync dies by the signal and the job leaves nothing in /dev/shm', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'weft-fabric-'));
  try {
    const script = path.join(dir, 'rank.mjs');
    writeFileSync(
      script,
      [
        `import { init } from ${JSON.stringify(path.resolve(here, '..', '..', 'src', 'index.js'))};`,
        'const ctx = await init({ timeoutMs: 30_000 });',
        "console.log(`pid ${process.pid}`);",
        // Rank 0 waits in a blocking allreduce that rank 1 never joins.
        'if (ctx.rank === 0) ctx.allreduceSync(new Float32Array(1024), { timeoutMs: 30_000 });',
        'else await new Promise((r) => setTimeout(r, 30_000));',
      ].join('\n'),
    );
    const before = new Set([...listSegments(), ...listFabricSegments().map((s) => s.name)]);
    const run = spawn(process.execPath, [WEFT, 'run', '-n', '2', '--provider', 'ofi', script], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    run.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    const rank0 = await new Promise<number>((resolve) => {
      createInterface({ input: run.stdout! }).on('line', (l) => {
        const m = /^\[rank 0\] pid (\d+)$/.exec(l);
        if (m) resolve(Number(m[1]));
      });
    });
    await new Promise((r) => setTimeout(r, 300)); // let it enter the wait
    const ended = exited(run);
    process.kill(rank0, 'SIGTERM');
    const e = await ended;
    assert.ok(e.ms < 10_000, `the job took ${e.ms} ms to stop`);
    assert.match(err, /rank 0 was killed by SIGTERM/);
    const left = [...listSegments(), ...listFabricSegments().map((s) => s.name)].filter((n) => !before.has(n));
    assert.equal(left, [], `left in /dev/shm: ${left.join(', ')}`);
    assert.equal(readdirSync(dir).filter((f) => f.endsWith('.btr')), []);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// The fabric addon opens libfabric.so.1 itself (native/fabric_library.h): one binary serves
// machines with and without libfabric, and a cross build needs only the headers.
const ofiAddon = path.join(nativeOrigin().dir, 'weft_ofi.node');
const built = existsSync(ofiAddon) ? test : test.skip;

built('the fabric addon does not link libfabric: no DT_NEEDED entry, no undefined fi_* symbol', () => {
  const dynamic = spawnSync('readelf', ['-W', '--dynamic', ofiAddon], { encoding: 'utf8' });
  assert.is(dynamic.status, 0, dynamic.stderr);
  assert.not.match(dynamic.stdout, /NEEDED.*libfabric/);
  const syms = spawnSync('readelf', ['-W', '--dyn-syms', ofiAddon], { encoding: 'utf8' });
  const undefinedFi = syms.stdout.split('\n').filter((l) => /\bUND\b/.test(l) && /\sfi_\w+/.test(l));
  assert.equal(undefinedFi, [], undefinedFi.join('\n'));
});

/** The file the dynamic linker finds for libfabric.so.1 (ldconfig's cache), or undefined. */
function libfabricFile(): string | undefined {
  const cache = spawnSync('ldconfig', ['-p'], { encoding: 'utf8' }).stdout ?? '';
  const m = /libfabric\.so\.1 \([^)]*x86-64[^)]*\) => (\S+)/.exec(cache) ?? /libfabric\.so\.1 \([^)]*\) => (\S+)/.exec(cache);
  return m ? realpathSync(m[1]) : undefined;
}

const hideable = native.ofi.available && process.getuid?.() === 0 && spawnSync('sh', ['-c', 'command -v unshare'], { stdio: 'ignore' }).status === 0 && libfabricFile() !== undefined;
if (!hideable && existsSync(ofiAddon)) console.log('  skipped "without libfabric": needs root, unshare and an installed libfabric to hide in a mount namespace');

(hideable ? test : test.skip)('without libfabric (hidden in a mount namespace) the fabric addon loads and says what to install; shm works', () => {
  const lib = libfabricFile()!;
  const probe = [
    `const { native } = await import(${JSON.stringify(path.resolve(here, '..', '..', 'src', 'native', 'binding.js'))});`,
    'const ofi = native.ofi;',
    "const { createDevice } = await import(" + JSON.stringify(path.resolve(here, '..', '..', 'src', 'nic', 'index.js')) + ");",
    "const dev = await createDevice({ provider: 'shm' }); await dev.close();",
    "let err = ''; try { await createDevice({ provider: 'ofi' }); } catch (e) { err = e.message; }",
    'console.log(JSON.stringify({ available: ofi.available, reason: ofi.reason, err }));',
  ].join('\n');
  // The library's file is covered by an empty one for this child only (a private mount).
  const r = spawnSync('unshare', ['-m', 'sh', '-c', `mount --bind /dev/null "$1" && exec "$2" --input-type=module -e "$3"`, 'sh', lib, process.execPath, probe], { encoding: 'utf8', timeout: 30_000 });
  assert.is(r.status, 0, r.stderr);
  const out = JSON.parse(r.stdout.trim().split('\n').pop()!) as { available: boolean; reason: string; err: string };
  assert.is(out.available, false);
  assert.match(out.reason, /libfabric is not installed .*apt-get install libfabric1/);
  assert.match(out.err, /provider ofi is not available: libfabric is not installed/);
  // A benchmark that needs the fabric says so before it launches ranks (each failed in init).
  const bench = spawnSync('unshare', ['-m', 'sh', '-c', 'mount --bind /dev/null "$1" && shift && exec "$@"', 'sh', lib, process.execPath, WEFT, 'bench', 'kv', '--provider', 'ofi', '--ranks', '1', '--peers', 'none', '--duration', '0.5'], { encoding: 'utf8', timeout: 60_000 });
  assert.is.not(bench.status, 0, bench.stdout);
  assert.match(bench.stderr, /--provider ofi needs libfabric, which this build of weft cannot use: libfabric is not installed/, bench.stderr);
  assert.not.match(bench.stderr, /\[rank 0\]/, 'a rank was launched');
});

test.run();
