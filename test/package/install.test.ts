// weft as a user gets it: `npm pack`, then `npm install` of the tarball into an empty
// CommonJS project (npm init -y) in a temporary directory, and the commands a user runs from
// there: --version, info, demo, run with a .mjs and a .ts rank, and the benchmarks' quick runs
// (results in the project directory, never in node_modules; a missing development dependency
// named in one line). Needs npm and the registry (the package's dependencies are installed).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

function sh(cmd: string, args: string[], cwd: string, timeoutMs = 240_000) {
  const t0 = performance.now();
  const r = spawnSync(cmd, args, { cwd, encoding: 'utf8', timeout: timeoutMs, env: { ...process.env, NO_COLOR: '1', npm_config_loglevel: 'error' } });
  return { code: r.status, out: r.stdout ?? '', err: r.stderr ?? '', ms: performance.now() - t0, signal: r.signal };
}

const work = mkdtempSync(path.join(tmpdir(), 'weft-install-'));
const project = path.join(work, 'app');
let tarball = '';

test.before(() => {
  // The build is there (npm test builds first): no prepare script in the middle of the run.
  const pack = sh('npm', ['pack', '--ignore-scripts', '--pack-destination', work], root);
  assert.is(pack.code, 0, pack.err);
  tarball = path.join(work, readdirSync(work).find((f) => f.endsWith('.tgz'))!);
  mkdirSync(project);
  assert.is(sh('npm', ['init', '-y'], project).code, 0);
  const install = sh('npm', ['install', tarball], project, 600_000);
  assert.is(install.code, 0, install.err.slice(-3000));
  console.log(`  installed ${path.basename(tarball)} in ${(install.ms / 1000).toFixed(1)} s`);
});
test.after(() => rmSync(work, { recursive: true, force: true }));

const weft = (args: string[], timeoutMs?: number) => sh(process.execPath, [path.join(project, 'node_modules', 'weft', 'bin', 'weft.js'), ...args], project, timeoutMs);

test('the tarball holds what a user needs and nothing pointing at unshipped files', () => {
  const pkg = path.join(project, 'node_modules', 'weft');
  for (const f of ['LICENSE', 'README.md', 'examples', 'dist/src/index.js', 'dist/src/index.d.ts', 'bin/weft.js']) assert.ok(existsSync(path.join(pkg, f)), `${f} missing`);
  const maps = sh('sh', ['-c', `find ${pkg} -name '*.map' | head -3`], project).out.trim();
  assert.is(maps, '', `source maps shipped: ${maps}`);
});

test('--version, info, demo', () => {
  const v = weft(['--version']);
  assert.is(v.code, 0, v.err);
  assert.match(v.out.trim(), /^\d+\.\d+\.\d+$/);
  const info = weft(['info']);
  assert.is(info.code, 0, info.err);
  assert.match(info.out, /providers/);
  const demo = weft(['demo', '-n', '2', '--laps', '100', '--blocks', '8']);
  assert.is(demo.code, 0, demo.out + demo.err);
  assert.match(demo.out, /allreduce of .* \(checked\)/);
});

test('run with a .mjs and a .ts rank in the CommonJS project', () => {
  const body = ['const ctx = await init();', 'const x = new Float32Array(4).fill(ctx.rank + 1);', 'await ctx.allreduce(x);', 'console.log(`rank ${ctx.rank}: ${x[0]}`);', 'await ctx.close();'];
  writeFileSync(path.join(project, 'app.mjs'), ["import { init } from 'weft';", ...body].join('\n'));
  writeFileSync(path.join(project, 'app.ts'), ["import { init } from 'weft';", ...body].join('\n'));
  for (const script of ['app.mjs', 'app.ts']) {
    const r = weft(['run', '-n', '2', script]);
    assert.is(r.code, 0, `${script}: ${r.out}${r.err}`);
    assert.match(r.out, /\[rank 0\] rank 0: 3/);
    assert.match(r.out, /\[rank 1\] rank 1: 3/);
  }
});

test('benchmarks: quick runs write into the project, never into node_modules; a missing development dependency is one line', () => {
  for (const b of ['nic', 'rpc']) {
    const r = weft(['bench', b, '--quick'], 300_000);
    assert.is(r.code, 0, `${b}: ${r.out.slice(-2000)}${r.err.slice(-2000)}`);
  }
  const results = readdirSync(path.join(project, 'weft-bench-results'));
  assert.ok(results.some((f) => f.startsWith('nic-')) && results.some((f) => f.startsWith('rpc-')), results.join(', '));
  assert.not.ok(existsSync(path.join(project, 'node_modules', 'weft', 'bench', 'results')));
  const reduce = weft(['bench', 'reduce', '--quick']);
  assert.is(reduce.code, 1);
  assert.match(reduce.err.trim(), /^weft bench reduce needs the package 'tinybench', a development dependency of weft: install it beside weft/);
  assert.is(reduce.err.trim().split('\n').length, 1, reduce.err);
});

test.run();
