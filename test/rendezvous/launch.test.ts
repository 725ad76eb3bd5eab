/** `weft run` and init(): full meshes over every store, failure propagation, no orphans. */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { localPlacement, hostCores } from '../../src/host/placement.js';
import { openStore } from '../../src/rendezvous/open.js';
import { rankFromEnv } from '../../src/rendezvous/env.js';
import { native } from '../../src/native/binding.js';
import { launch } from '../../src/launch/run.js';
import { EventEmitter } from 'node:events';
import { PassThrough } from 'node:stream';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const WEFT = path.join(root, 'bin', 'weft.js');
const RANK = path.join(root, 'test', 'rendezvous', 'workers', 'mesh-rank.mjs');
const SECRET_RANK = path.join(root, 'test', 'rendezvous', 'workers', 'secret-rank.mjs');
const BLAME_RANK = path.join(root, 'test', 'rendezvous', 'workers', 'blame-rank.mjs');
const PLACEMENT_RANK = path.join(root, 'test', 'rendezvous', 'workers', 'placement-rank.mjs');
const CLOSE_PENDING_RANK = path.join(root, 'test', 'rendezvous', 'workers', 'close-pending-rank.mjs');
const PASSWORD_WARNING = /weft run: warning: the --store URL carries a password/;

interface Run {
  code: number | null;
  out: string;
  err: string;
  ms: number;
}

/**
 * Runs `weft run args`. `group`: in its own process group, signalled as a whole (a terminal's
 * Ctrl-C reaches the launcher and every rank).
 */
function weftRun(args: string[], opts: { killAfterMs?: number; signal?: NodeJS.Signals; env?: NodeJS.ProcessEnv; cwd?: string; group?: boolean } = {}): Promise<Run> {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const child = spawn(process.execPath, [WEFT, 'run', ...args], { env: { ...process.env, NO_COLOR: '1', ...opts.env }, stdio: ['ignore', 'pipe', 'pipe'], cwd: opts.cwd, detached: opts.group });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const kill = (signal: NodeJS.Signals) => (opts.group ? process.kill(-child.pid!, signal) : child.kill(signal));
    if (opts.killAfterMs) setTimeout(() => kill(opts.signal ?? 'SIGTERM'), opts.killAfterMs);
    const guard = setTimeout(() => kill('SIGKILL'), 60_000);
    child.on('exit', (code) => {
      clearTimeout(guard);
      resolve({ code, out, err, ms: performance.now() - t0 });
    });
  });
}

/** Live processes still running the fixture (orphans). */
function orphans(): string[] {
  const r = spawnSync('pgrep', ['-af', 'mesh-rank.mjs'], { encoding: 'utf8' });
  return r.stdout.split('\n').filter((l) => l.trim() && !l.includes('pgrep'));
}

function checkMesh(r: Run, n: number): void {
  assert.is(r.code, 0, `weft run failed: ${r.err}`);
  for (let rank = 0; rank < n; rank++) {
    const others = [...Array(n).keys()].filter((p) => p !== rank).join(',');
    assert.ok(r.out.includes(`[rank ${rank}] ok rank ${rank} heard ${others}`), `rank ${rank} line missing in:\n${r.out}\n${r.err}`);
  }
}

test('8 ranks connect a full mesh over the launcher-hosted TcpStore', async () => {
  checkMesh(await weftRun(['-n', '8', RANK]), 8);
});

test('the launcher-hosted TcpStore: a per-job secret in the ranks\' environment, not their command line; no secret, no entry', async () => {
  // A secret the launcher inherited (in a variable or a file) must not replace the job's own.
  const r = await weftRun(['-n', '2', SECRET_RANK], { env: { WEFT_STORE_SECRET: 'inherited', WEFT_STORE_SECRET_FILE: '/nonexistent' } });
  assert.is(r.code, 0, r.err);
  for (const rank of [0, 1]) assert.ok(r.out.includes(`[rank ${rank}] ok rank ${rank} store secret`), r.out + r.err);
});

test('8 ranks connect over Redis (with a password) and leave no keys behind', async () => {
  const url = process.env.WEFT_TEST_REDIS_URL;
  if (!url) {
    console.log('  (skipped: no redis-server)');
    return;
  }
  const r = await weftRun(['-n', '8', '--store', url, '--prefix', `launchtest${process.pid}`, RANK]);
  checkMesh(r, 8);
  // The password was on weft run's command line: it says so, once.
  assert.is(r.err.split('\n').filter((l) => PASSWORD_WARNING.test(l)).length, 1, r.err);
  assert.match(r.err, /WEFT_STORE_PASSWORD/);
});

test('Redis from the environment: WEFT_STORE without a password plus WEFT_STORE_PASSWORD, nothing on a command line', async () => {
  const url = process.env.WEFT_TEST_REDIS_URL;
  if (!url) {
    console.log('  (skipped: no redis-server)');
    return;
  }
  const u = new URL(url);
  const password = decodeURIComponent(u.password);
  u.password = '';
  const r = await weftRun(['-n', '3', '--prefix', `launchenv${process.pid}`, RANK], { env: { WEFT_STORE: u.toString(), WEFT_STORE_PASSWORD: password } });
  checkMesh(r, 3);
  assert.not.match(r.err, PASSWORD_WARNING);
});

test('8 ranks connect over a FileStore directory', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'weft-fs-'));
  try {
    checkMesh(await weftRun(['-n', '8', '--store', `file://${dir}`, RANK]), 8);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a failing rank stops the job within 5 s with a summary naming it; no orphans', async () => {
  const r = await weftRun(['-n', '4', RANK, '2', 'hang']);
  assert.is.not(r.code, 0);
  // The summary names the rank that failed, not a peer that failed because of it.
  assert.ok(/weft run: rank 2 exited with status 1/.test(r.err), `summary should name rank 2:\n${r.err}`);
  assert.ok(/\[rank 2\] .*rank 2 fails on purpose/.test(r.err), `rank 2's error should be relayed:\n${r.err}`);
  assert.ok(r.ms < 15_000, `took ${r.ms} ms`);
  await new Promise((res) => setTimeout(res, 200));
  assert.equal(orphans(), []);
});

test('the summary names the rank that failed, not one that exited first of its death (EPEERDEAD)', async () => {
  const r = await weftRun(['-n', '3', BLAME_RANK]);
  assert.is(r.code, 1, r.err);
  assert.match(r.err, /weft run: rank 2 exited with status 1/);
  assert.match(r.err, /\[rank 0\] .*EPEERDEAD/);
  await new Promise((res) => setTimeout(res, 200));
  assert.equal(orphans(), []);
});

test('SIGTERM to the launcher stops every rank; no orphans', async () => {
  const r = await weftRun(['-n', '3', RANK, '-1', 'hang'], { killAfterMs: 2500 });
  assert.is.not(r.code, 0);
  assert.match(r.err, /interrupted by SIGTERM/);
  await new Promise((res) => setTimeout(res, 200));
  assert.equal(orphans(), []);
});

test('Ctrl-C (SIGINT to the whole process group) exits 130 and leaves no ranks and no segments of the job', async () => {
  const before = new Set(readdirSync('/dev/shm'));
  const r = await weftRun(['-n', '3', RANK, '-1', 'hang'], { group: true, killAfterMs: 2500, signal: 'SIGINT' });
  assert.is(r.code, 130, r.err);
  assert.match(r.err, /interrupted by SIGINT/);
  await new Promise((res) => setTimeout(res, 200));
  assert.equal(orphans(), []);
  const left = readdirSync('/dev/shm').filter((n) => !before.has(n));
  assert.equal(left, [], `left in /dev/shm: ${left.join(', ')}`);
});

test('a rank that cannot be started (spawn fails with EAGAIN, no exit event): the launch ends with an error naming it, within seconds', async () => {
  const failingSpawn = (() => {
    const child = Object.assign(new EventEmitter(), { pid: undefined, stdout: null, stderr: null, kill: () => false });
    process.nextTick(() => child.emit('error', Object.assign(new Error('spawn EAGAIN'), { code: 'EAGAIN' })));
    return child;
  }) as unknown as typeof spawn;
  const err = new PassThrough();
  let text = '';
  err.on('data', (d) => (text += d));
  // The race only stops a hang from holding the suite: a launch that never ends fails the test.
  const code = await Promise.race([
    launch({ ranks: 2, script: RANK, args: ['-1'], spawnRank: failingSpawn, out: new PassThrough(), err, graceMs: 200, failGraceMs: 100 }),
    new Promise<string>((r) => setTimeout(() => r('still waiting after 10 s'), 10_000)),
  ]);
  assert.is.not(code, 0, text);
  assert.ok(typeof code === 'number', String(code));
  assert.match(text, /rank \d could not start: spawn EAGAIN/);
});

test('bad arguments are refused before any rank starts, in one line: an unknown provider, a missing script', async () => {
  const bad = await weftRun(['-n', '2', '--provider', 'foo', RANK, '-1']);
  assert.is(bad.code, 1);
  assert.match(bad.err, /^weft run: --provider: unknown provider "foo"/);
  assert.is(bad.err.trim().split('\n').length, 1, bad.err);
  assert.not.match(bad.out + bad.err, /\[rank/);
  // A job prefix with '/': ending job "team" would delete job "team/a"'s keys.
  const nested = await weftRun(['-n', '2', '--prefix', 'team/a', RANK, '-1']);
  assert.is(nested.code, 1, nested.err);
  assert.match(nested.err, /^weft run --prefix: the job prefix "team\/a" contains '\/'/);
  assert.not.match(nested.out + nested.err, /\[rank/);
  const missing = await weftRun(['-n', '2', path.join(root, 'no-such-script.mjs')]);
  assert.is(missing.code, 1);
  assert.match(missing.err, /^weft run: script .*no-such-script\.mjs not found/);
  assert.is(missing.err.trim().split('\n').length, 1, missing.err);
});

test('weft run app.ts in a CommonJS project (npm init -y): the .ts ranks run as ES modules, top-level await works', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'weft-cjs-'));
  try {
    writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', type: 'commonjs' }));
    mkdirSync(path.join(dir, 'node_modules'));
    symlinkSync(root, path.join(dir, 'node_modules', 'weftjs'));
    writeFileSync(path.join(dir, 'half.ts'), 'export const half = (x: number): number => x / 2;\n');
    writeFileSync(path.join(dir, 'app.ts'), [
      "import { init } from 'weftjs';",
      "import { half } from './half';",
      'const ctx = await init();',
      'const x = new Float32Array(4).fill(ctx.rank + 1);',
      'await ctx.allreduce(x);',
      'console.log(`rank ${ctx.rank}: ${half(x[0])}`);',
      'await ctx.close();',
    ].join('\n'));
    const r = await weftRun(['-n', '2', 'app.ts'], { cwd: dir });
    assert.is(r.code, 0, r.err);
    assert.match(r.out, /\[rank 0\] rank 0: 1.5/);
    assert.match(r.out, /\[rank 1\] rank 1: 1.5/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('NODE_DEBUG=weft: each rank says which device it opened and how long connecting took', async () => {
  const r = await weftRun(['-n', '2', RANK, '-1'], { env: { NODE_DEBUG: 'weft' } });
  assert.is(r.code, 0, r.err);
  for (const k of [0, 1]) {
    assert.match(r.err, new RegExp(`\\[rank ${k}\\] WEFT \\d+: rank ${k} of 2: job .*; device shm`));
    assert.match(r.err, new RegExp(`\\[rank ${k}\\] WEFT \\d+: rank ${k}: connected to 1 peers in \\d+ ms`));
  }
});

test('weft --version prints the package version', () => {
  const r = spawnSync(process.execPath, [WEFT, '--version'], { encoding: 'utf8' });
  assert.is(r.status, 0, r.stderr);
  assert.is(r.stdout.trim(), JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')).version);
});

// Its benchkv part (10 s) is the package test's: there the demo runs whole, from the tarball.
test('weft demo (the README\'s first command) runs ranks that really exchange data', async () => {
  const r = spawnSync(process.execPath, [WEFT, 'demo', '-n', '3', '--laps', '100', '--blocks', '8', '--no-kv'], { encoding: 'utf8', timeout: 60_000, env: { ...process.env, NO_COLOR: '1' } });
  assert.is(r.status, 0, r.stderr);
  for (let rank = 0; rank < 3; rank++) assert.match(r.stdout, new RegExp(`\\[rank ${rank}\\] read "hello from rank ${(rank + 2) % 3} \\(pid \\d+\\)" from rank ${(rank + 2) % 3}`));
  assert.match(r.stdout, /3 ranks over shm: token ring [\d.]+ us per hop/);
});

test('rank settings from each launcher style', () => {
  assert.equal(rankFromEnv({ WEFT_RANK: '1', WEFT_WORLD_SIZE: '4', WEFT_STORE: 'tcp://h:1', WEFT_PREFIX: 'j' }), { rank: 1, size: 4, store: 'tcp://h:1', serve: false, prefix: 'j', style: 'weft' });
  const torch = rankFromEnv({ RANK: '0', WORLD_SIZE: '2', MASTER_ADDR: '10.0.0.1', MASTER_PORT: '29500' });
  assert.equal([torch.rank, torch.size, torch.store, torch.serve, torch.style], [0, 2, 'tcp://10.0.0.1:29500', true, 'torchrun']);
  assert.is(rankFromEnv({ RANK: '1', WORLD_SIZE: '2', MASTER_ADDR: 'x', MASTER_PORT: '1' }).serve, false);
  const ompi = rankFromEnv({ OMPI_COMM_WORLD_RANK: '3', OMPI_COMM_WORLD_SIZE: '4', OMPI_MCA_ess_base_jobid: '77' });
  assert.equal([ompi.rank, ompi.size, ompi.style], [3, 4, 'ompi']);
  assert.match(ompi.store, new RegExp(`^file://.*weft-store-${process.getuid!()}-77$`));
  const pmi = rankFromEnv({ PMI_RANK: '0', PMI_SIZE: '1', WEFT_STORE: 'redis://r:1' });
  assert.equal([pmi.rank, pmi.store, pmi.style], [0, 'redis://r:1', 'pmi']);
  assert.throws(() => rankFromEnv({}), /does not know its rank/);
  // Slurm: rank, size, the job and step as the prefix; a store from MASTER_ADDR/PORT (rank 0 hosts).
  const slurm = rankFromEnv({ SLURM_PROCID: '5', SLURM_NTASKS: '8', SLURM_JOB_ID: '4242', SLURM_STEP_ID: '0', SLURM_NNODES: '2', MASTER_ADDR: '10.1.0.1', MASTER_PORT: '29501' });
  assert.equal([slurm.rank, slurm.size, slurm.style, slurm.prefix, slurm.store, slurm.serve], [5, 8, 'slurm', 'slurm-4242.0', 'tcp://10.1.0.1:29501', false]);
  assert.is(rankFromEnv({ SLURM_PROCID: '0', SLURM_NTASKS: '8', SLURM_JOB_ID: '1', MASTER_ADDR: 'a', MASTER_PORT: '1' }).serve, true);
  // ... but no private directory for a job the launcher says spans hosts.
  assert.throws(() => rankFromEnv({ SLURM_PROCID: '1', SLURM_NTASKS: '4', SLURM_NNODES: '2', SLURM_JOB_ID: '9' }), /spans hosts.*WEFT_STORE=redis/);
  assert.throws(() => rankFromEnv({ OMPI_COMM_WORLD_RANK: '0', OMPI_COMM_WORLD_SIZE: '4', OMPI_COMM_WORLD_LOCAL_SIZE: '2' }), /2 of 4 ranks on this host/);
  const pmix = rankFromEnv({ PMIX_RANK: '2', OMPI_COMM_WORLD_SIZE: '3', PMIX_NAMESPACE: 'ns7', WEFT_STORE: 'redis://r:1' });
  assert.equal([pmix.rank, pmix.size, pmix.style, pmix.prefix], [2, 3, 'pmix', 'ns7']);
  assert.throws(() => rankFromEnv({ PMIX_RANK: '0' }), /no world size/);
  // torchrun on a shared store: its default run id 'none' (or none at all) names no job.
  assert.throws(() => rankFromEnv({ RANK: '0', WORLD_SIZE: '2', WEFT_STORE: 'redis://h:1', TORCHELASTIC_RUN_ID: 'none' }), /needs a job prefix no other job uses: set WEFT_PREFIX/);
  assert.throws(() => rankFromEnv({ RANK: '0', WORLD_SIZE: '2', WEFT_STORE: 'redis://h:1', MASTER_PORT: '29500' }), /TORCHELASTIC_RUN_ID is unset/);
  assert.is(rankFromEnv({ RANK: '0', WORLD_SIZE: '2', WEFT_STORE: 'redis://h:1', TORCHELASTIC_RUN_ID: 'job-5' }).prefix, 'job-5');
  assert.is(rankFromEnv({ RANK: '0', WORLD_SIZE: '2', WEFT_STORE: 'redis://h:1', WEFT_PREFIX: 'p' }).prefix, 'p');
  // A rank outside the world is init()'s to refuse: it tells the other ranks first (join.test).
  assert.is(rankFromEnv({ WEFT_RANK: '4', WEFT_WORLD_SIZE: '4', WEFT_STORE: 'x' }).rank, 4);
  assert.throws(() => rankFromEnv({ WEFT_RANK: '0', WEFT_WORLD_SIZE: '0', WEFT_STORE: 'x' }), /at least 1/);
  assert.throws(() => rankFromEnv({ WEFT_RANK: 'a', WEFT_WORLD_SIZE: '4' }), /WEFT_RANK/);
  assert.throws(() => rankFromEnv({ WEFT_RANK: '0', WEFT_WORLD_SIZE: '4' }), /WEFT_STORE/);
});

test('local rank and size from each launcher, Slurm\'s task lists included; WEFT_CORES', () => {
  assert.equal(localPlacement({ SLURM_LOCALID: '1', SLURM_TASKS_PER_NODE: '2(x3),1', SLURM_NODEID: '3' }), { rank: 1, size: 1 });
  assert.equal(localPlacement({ SLURM_LOCALID: '0', SLURM_TASKS_PER_NODE: '2(x3),1', SLURM_NODEID: '2' }), { rank: 0, size: 2 });
  assert.equal(localPlacement({ MPI_LOCALRANKID: '3', MPI_LOCALNRANKS: '4' }), { rank: 3, size: 4 });
  assert.equal(localPlacement({ WEFT_LOCAL_RANK: '1', WEFT_LOCAL_WORLD_SIZE: '2', SLURM_LOCALID: '7' }), { rank: 1, size: 2 });
  assert.is(hostCores({ WEFT_CORES: '3' }), 3);
  assert.is(hostCores({ WEFT_CORES: 'x' }), hostCores({}));
});

test('as many ranks as cores: each is pinned to its own core and its device still sees a host that is not oversubscribed (shm and ofi)', async () => {
  const cores = availableParallelism();
  if (cores < 2) return void console.log('  skipped: one core');
  for (const provider of ['shm', ...(native.ofi.available ? ['ofi'] : [])]) {
    const r = await weftRun(['-n', String(cores), PLACEMENT_RANK], { env: { WEFT_PROVIDER: provider } });
    assert.is(r.code, 0, r.err);
    const cpus = new Set<string>();
    for (let rank = 0; rank < cores; rank++) {
      const m = new RegExp(`placement rank ${rank} cpus (\\S+) oversubscribed (\\w+)`).exec(r.out);
      assert.ok(m, `rank ${rank} did not report over ${provider}:\n${r.out}\n${r.err}`);
      assert.match(m![1], /^\d+$/, `rank ${rank} over ${provider} runs on cpus ${m![1]}, expected one core`);
      cpus.add(m![1]);
      // A device created after the pinning read the pinned mask as the host's cores (1) and took
      // 2 ranks on 2 cores for an oversubscribed host: its waits yielded instead of spinning.
      assert.is(m![2], 'false', `rank ${rank} over ${provider} takes ${cores} ranks on ${cores} cores for oversubscribed`);
    }
    assert.is(cpus.size, cores, `ranks share cores over ${provider}: ${[...cpus].join(' ')}`);
  }
  // One rank more than cores: nobody is pinned, and the devices know the host is oversubscribed.
  const r = await weftRun(['-n', String(cores + 1), PLACEMENT_RANK]);
  assert.is(r.code, 0, r.err);
  for (let rank = 0; rank <= cores; rank++) assert.match(r.out, new RegExp(`placement rank ${rank} cpus \\S*[-,]\\S* oversubscribed true`));
});

test('close() with an async wait pending: the wait fails with ECLOSED, the process goes on (shm and ofi)', async () => {
  for (const provider of ['shm', ...(native.ofi.available ? ['ofi'] : [])]) {
    const r = await weftRun(['-n', '2', CLOSE_PENDING_RANK], { env: { WEFT_PROVIDER: provider } });
    assert.is(r.code, 0, `over ${provider}:\n${r.out}\n${r.err}`);
    for (const rank of [0, 1]) assert.match(r.out, new RegExp(`close rank ${rank}: ECLOSED`), `over ${provider}:\n${r.out}`);
  }
});

test('a rank hosting the TcpStore on an address other hosts reach refuses to without a secret', async () => {
  const err = await openStore('tcp://0.0.0.0:0', { serve: true, tcp: { secret: null }, timeoutMs: 2000 }).then(
    (s) => (s.close(), undefined),
    (e: Error) => e,
  );
  assert.match(err?.message ?? 'no error', /without a secret: anyone on the network/);
});

test('torchrun-style environment: rank 0 hosts the TcpStore on MASTER_PORT, with WEFT_STORE_SECRET', async () => {
  const port = 20000 + (process.pid % 20000);
  const secret = `torch-secret-${process.pid}`;
  const env = (rank: number) => ({ ...process.env, RANK: String(rank), WORLD_SIZE: '3', MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(port), WEFT_PREFIX: `torch${process.pid}`, WEFT_STORE_SECRET: secret });
  const runs = [0, 1, 2].map(
    (rank) =>
      new Promise<string>((resolve) => {
        const c = spawn(process.execPath, [RANK], { env: env(rank), stdio: ['ignore', 'pipe', 'inherit'] });
        let out = '';
        c.stdout.on('data', (d) => (out += d));
        c.on('exit', () => resolve(out));
      }),
  );
  const outs = await Promise.all(runs);
  assert.ok(outs[0].includes('ok rank 0 heard 1,2'), outs.join('|'));
  assert.ok(outs[2].includes('ok rank 2 heard 0,1'), outs.join('|'));
});

test('mpirun -np 4 node app.js: ranks from Open MPI, a FileStore named by the MPI job', async () => {
  if (spawnSync('sh', ['-c', 'command -v mpirun']).status !== 0) {
    console.log('  (skipped: no mpirun; apt-get install openmpi-bin)');
    return;
  }
  const r = spawnSync('mpirun', ['--allow-run-as-root', '--oversubscribe', '-np', '4', process.execPath, RANK], { encoding: 'utf8', timeout: 60_000 });
  assert.is(r.status, 0, r.stderr);
  for (let rank = 0; rank < 4; rank++) assert.ok(r.stdout.includes(`ok rank ${rank} heard`), r.stdout);
});

test.run();
