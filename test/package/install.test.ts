// weftjs as a user gets it: the prebuilt binaries made by scripts/prebuild.mjs (this
// machine's architecture, from the checkout's build in npm test; compiled, and arm64 too where
// the cross compiler is installed, with WEFT_SOAK=1), `npm pack`, then
// `npm install` of the tarball into an empty CommonJS project (npm init -y) in a temporary
// directory, and the commands a user runs from there: --version, info, demo, run with a .mjs
// and a .ts rank, and the benchmarks' quick runs (results in the project directory, never in
// node_modules; a missing development dependency named in one line). The install must use the
// prebuilt binary (nothing compiled), and a second install without install scripts (as pnpm
// 10 does by default) must run too. Needs npm and the registry (for the dependencies).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

function sh(cmd: string, args: string[], cwd: string, timeoutMs = 240_000) {
  const t0 = performance.now();
  const r = spawnSync(cmd, args, { cwd, encoding: 'utf8', timeout: timeoutMs, env: { ...process.env, NO_COLOR: '1', npm_config_loglevel: 'error', XDG_CACHE_HOME: path.join(work, 'cache') } });
  return { code: r.status, out: r.stdout ?? '', err: r.stderr ?? '', ms: performance.now() - t0, signal: r.signal };
}

const work = mkdtempSync(path.join(tmpdir(), 'weft-install-'));
const project = path.join(work, 'app');
let tarball = '';
// The arm64 cross build costs 15 s of npm test's 15 minutes: it runs with WEFT_SOAK=1 (and
// `npm run check:arm64` builds and runs it under qemu).
const soak = process.env.WEFT_SOAK === '1';
const hasCross = soak && process.arch === 'x64' && sh('sh', ['-c', 'command -v aarch64-linux-gnu-g++'], root).code === 0;
const arches = [process.arch, ...(hasCross ? ['arm64'] : [])];
if (!soak) console.log('  the arm64 prebuilt binary is built in the soak run (WEFT_SOAK=1) and by npm run check:arm64');
else if (!hasCross) console.log('  the arm64 prebuilt binary is not built here: aarch64-linux-gnu-g++ is missing (apt-get install g++-aarch64-linux-gnu)');

test.before(() => {
  // npm test takes this machine's binaries from the checkout's build (npm ci compiled them from
  // the same sources); the soak run compiles them in a staging copy, as a release does.
  const pre = sh(process.execPath, [path.join(root, 'scripts', 'prebuild.mjs'), '--arch', arches.join(','), ...(soak ? [] : ['--from-build'])], root, 900_000);
  assert.is(pre.code, 0, pre.out + pre.err);
  console.log(`  prebuilt ${arches.join(', ')} in ${(pre.ms / 1000).toFixed(1)} s`);
  // The build is there (npm test builds first): no prepare script in the middle of the run.
  const pack = sh('npm', ['pack', '--ignore-scripts', '--pack-destination', work], root);
  assert.is(pack.code, 0, pack.err);
  tarball = path.join(work, readdirSync(work).find((f) => f.endsWith('.tgz'))!);
  mkdirSync(project);
  assert.is(sh('npm', ['init', '-y'], project).code, 0);
  const install = sh('npm', ['install', '--foreground-scripts', tarball], project, 600_000);
  assert.is(install.code, 0, install.err.slice(-3000));
  assert.match(install.out, /weftjs: using the prebuilt binary for linux-/);
  console.log(`  ${path.basename(tarball)}: ${(statSync(tarball).size / 2 ** 20).toFixed(2)} MiB; installed in ${(install.ms / 1000).toFixed(1)} s`);
});
test.after(() => rmSync(work, { recursive: true, force: true }));

const weft = (args: string[], timeoutMs?: number) => sh(process.execPath, [path.join(project, 'node_modules', 'weftjs', 'bin', 'weft.js'), ...args], project, timeoutMs);

test('the tarball holds what a user needs and nothing pointing at unshipped files', () => {
  const pkg = path.join(project, 'node_modules', 'weftjs');
  for (const f of ['LICENSE', 'README.md', 'examples', 'docs/getting-started.md', 'docs/api/README.md', 'dist/src/index.js', 'dist/src/index.d.ts', 'bin/weft.js']) assert.ok(existsSync(path.join(pkg, f)), `${f} missing`);
  for (const arch of arches) {
    for (const f of ['weft.node', 'weft_ofi.node']) assert.ok(existsSync(path.join(pkg, 'prebuilds', `linux-${arch}`, f)), `prebuilds/linux-${arch}/${f} missing`);
    const manifest = JSON.parse(readFileSync(path.join(pkg, 'prebuilds', `linux-${arch}`, 'manifest.json'), 'utf8')) as { arch: string; glibc: string };
    assert.is(manifest.arch, arch);
    assert.match(manifest.glibc, /^2\.\d+$/);
  }
  assert.not.ok(existsSync(path.join(pkg, 'build')), 'the install compiled the addon instead of using the prebuilt binary');
  const maps = sh('sh', ['-c', `find ${pkg} -name '*.map' | head -3`], project).out.trim();
  assert.is(maps, '', `source maps shipped: ${maps}`);
});

test('publint --strict and arethetypeswrong (ESM-only profile) find nothing in the tarball', () => {
  const lint = sh(process.execPath, [path.join(root, 'node_modules', 'publint', 'src', 'cli.js'), '--strict', root], root);
  assert.is(lint.code, 0, lint.out + lint.err);
  assert.match(lint.out, /All good/);
  const attw = sh(process.execPath, [path.join(root, 'node_modules', '@arethetypeswrong', 'cli', 'dist', 'index.js'), tarball, '--profile', 'esm-only', '--format', 'ascii'], root);
  assert.is(attw.code, 0, attw.out + attw.err);
});

test('--version, info, demo', () => {
  const v = weft(['--version']);
  assert.is(v.code, 0, v.err);
  assert.match(v.out.trim(), /^\d+\.\d+\.\d+$/);
  const info = weft(['info']);
  assert.is(info.code, 0, info.err);
  assert.match(info.out, /providers/);
  assert.match(info.out, /binary +prebuilt/);
  const demo = weft(['demo', '-n', '2', '--laps', '100', '--blocks', '8']);
  assert.is(demo.code, 0, demo.out + demo.err);
  assert.match(demo.out, /allreduce of .* \(checked\)/);
  // and its few seconds of benchkv, every backend verified (the bench binary from the tarball)
  for (const backend of ['meta', 'delegation', 'direct']) assert.match(demo.out, new RegExp(`^${backend} +\\d`, 'm'), demo.out.slice(-3000));
});

test('run with a .mjs and a .ts rank in the CommonJS project', () => {
  const body = ['const ctx = await init();', 'const x = new Float32Array(4).fill(ctx.rank + 1);', 'await ctx.allreduce(x);', 'console.log(`rank ${ctx.rank}: ${x[0]}`);', 'await ctx.close();'];
  writeFileSync(path.join(project, 'app.mjs'), ["import { init } from 'weftjs';", ...body].join('\n'));
  writeFileSync(path.join(project, 'app.ts'), ["import { init } from 'weftjs';", ...body].join('\n'));
  for (const script of ['app.mjs', 'app.ts']) {
    const r = weft(['run', '-n', '2', script]);
    assert.is(r.code, 0, `${script}: ${r.out}${r.err}`);
    assert.match(r.out, /\[rank 0\] rank 0: 3/);
    assert.match(r.out, /\[rank 1\] rank 1: 3/);
  }
});

test('every benchmark and the daemon-loop model run --quick from the installed package; results go into the project, never into node_modules', () => {
  for (const b of ['nic', 'rpc', 'reduce', 'rendezvous', 'collectives', 'peers', 'ipc', 'transfer']) {
    // What is checked here is that each benchmark runs from the installed package, not its
    // numbers (test/bench has those): the slow ones run a small part of their quick run. nic:
    // shm only (with its memcpy ceiling); ipc: one client, threads, weft's systems; transfer:
    // one point (its quick run is 8 trials of fresh processes); rpc: shm, one run; reduce: a
    // short time budget per task; collectives: 2 ranks, allreduce, two sizes, peers included.
    const extra =
      b === 'nic' ? ['--provider', 'shm']
      : b === 'rpc' ? ['--provider', 'shm', '--runs', '1']
      : b === 'reduce' ? ['--time', '10']
      : b === 'collectives' ? ['--np', '2', '--ops', 'allreduce', '--sizes', '8,1M']
      : b === 'ipc' ? ['--clients', '1', '--qd', '1', '--placements', 'threads', '--systems', 'floor,delegation,ipc,flux']
      : b === 'transfer' ? ['--provider', 'shm', '--op', 'read', '--block', '64K', '--seconds', '0.1']
      : [];
    const started = Date.now();
    const r = weft(['bench', b, '--quick', ...extra], 300_000);
    console.log(`  bench ${b}: ${((Date.now() - started) / 1000).toFixed(1)} s`);
    assert.is(r.code, 0, `${b}: ${r.out.slice(-2000)}${r.err.slice(-2000)}`);
    // Plots need vega (a development dependency): skipped, and said so.
    if (b === 'nic' || b === 'rpc') assert.match(r.err, /plots? skipped .*/);
  }
  const sim = weft(['sim', 'daemon-loop', '--quick', '--no-recovery'], 300_000);
  assert.is(sim.code, 0, `sim: ${sim.out.slice(-2000)}${sim.err.slice(-2000)}`);
  assert.match(sim.out, /NP +controller/);
  assert.match(sim.err, /plots skipped/);
  const results = readdirSync(path.join(project, 'weft-bench-results'));
  assert.ok(results.includes('sim-daemon-loop.json'), `no sim results in ${results.join(', ')}`);
  for (const b of ['nic', 'rpc', 'reduce', 'rendezvous', 'collectives', 'ipc', 'transfer']) assert.ok(results.some((f) => f.startsWith(`${b}-`)), `no ${b} results in ${results.join(', ')}`);
  assert.not.ok(existsSync(path.join(project, 'node_modules', 'weftjs', 'bench', 'results')));
  assert.not.ok(existsSync(path.join(project, 'node_modules', 'weftjs', 'build')), 'the peers were compiled into node_modules');
});

test('installed without install scripts (pnpm 10 runs none by default): the prebuilt binary loads', () => {
  const bare = path.join(work, 'bare');
  mkdirSync(bare);
  assert.is(sh('npm', ['init', '-y'], bare).code, 0);
  const install = sh('npm', ['install', '--ignore-scripts', tarball], bare, 600_000);
  assert.is(install.code, 0, install.err.slice(-3000));
  const probe = ["const { init } = require('weftjs');", "console.log(typeof init);"].join('\n');
  writeFileSync(path.join(bare, 'probe.cjs'), probe);
  const r = sh(process.execPath, ['probe.cjs'], bare);
  assert.is(r.code, 0, r.err);
  assert.is(r.out.trim(), 'function');
  const info = sh(process.execPath, [path.join(bare, 'node_modules', 'weftjs', 'bin', 'weft.js'), 'info'], bare);
  assert.is(info.code, 0, info.err);
  assert.match(info.out, /binary +prebuilt/);
  assert.match(info.out, /yes +ofi/);
});

test.run();
