#!/usr/bin/env node
// Fault campaign (a soak, not part of npm test): N trials per configuration of
//   signal   {SIGKILL, SIGSTOP}  sent to a random rank at a random moment of a collective loop
//   launcher {run, none}         `weft run -n NP`, or NP plain processes (torchrun-style env,
//                                rank 0 hosting the TcpStore; --store file: a FileStore)
//   provider {shm, ofi}          WEFT_PROVIDER (ofi = libfabric tcp; --providers shm,ofi,ofi:shm
//                                adds libfabric's shm provider, which keeps regions in /dev/shm)
// recording per trial each survivor's time from the signal to its first error, whether the
// error names the dead rank, wrong results, hangs, orphaned processes and leaked /dev/shm
// segments (weft's `weft.<job>.<pid>.…` and libfabric shm's `<pid>:<domain>:<ep>`).
//
//   node scripts/fault-campaign.mjs [--trials 100] [--configs kill,stop/none/ofi] [--np 4|2-4]
//     [--timeout-ms 3000] [--delay 50-600] [--out bench/results/fault-campaign.json]
//     [--ref <git rev> | --no-snapshot] [--providers shm,ofi] [--store tcp|file] [--seed S]
//     [--collectives allreduce-board,barrier,...] [--sync-share 0.5] [--no-first-barrier]
//     [--sigterm defer|default] [--warmup 20] [-v]
//
// The ranks run scripts/fault-campaign-rank.mjs. By default the campaign first copies the built
// package (dist/src, build/Release, bin, the rank script) to a temporary directory and runs
// from there, so a rebuild of dist/ by someone else mid-campaign does not break trials;
// `--ref HEAD` builds a commit there instead (tsc + node-gyp), `--no-snapshot` runs dist/ as is.
//
// Per trial, once every rank reported `loop`: wait a random delay, signal a random victim,
// then wait (at most timeout + 10 s after the signal) for every survivor to report its first
// error and for every process to exit. SIGSTOP without a launcher: once every survivor failed,
// the victim gets SIGCONT (it must then fail and clean up by itself); under `weft run` the
// launcher deals with it (SIGTERM, then SIGKILL after its 3 s grace). `weft run` SIGTERMs every
// rank once one exited: by default the ranks note it and go on until their own call fails
// (--sigterm default: they die of it, and the launcher's teardown races weft's own detection).
// A survivor without an error, or a process still alive, at that cap is a HANG (everything is
// then SIGKILLed). After a trial, a process still carrying its FC_TRIAL marker is an ORPHAN,
// and a /dev/shm entry of one of its processes still present is a LEAK (removed afterwards, so
// the next trial starts clean). Trials that fail before the signal are recorded, not counted.
// Targets (issue "No silent wrong results"): 0 hangs and 0 leaks; every survivor errors within
// timeout + 1 s; >= 99% name the dead rank; after SIGKILL on shm, <= 0.5 s for every collective.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const clock = () => performance.timeOrigin + performance.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------- options

function usage(msg) {
  if (msg) console.error(`fault-campaign: ${msg}`);
  console.error(fs.readFileSync(fileURLToPath(import.meta.url), 'utf8').split('\n').slice(1, 21).map((l) => l.replace(/^\/\/ ?/, '')).join('\n'));
  process.exit(msg ? 2 : 0);
}

function range(s, name) {
  const m = /^(\d+)(?:-(\d+))?$/.exec(String(s));
  if (!m) usage(`${name} must be N or LO-HI, got ${s}`);
  const lo = Number(m[1]);
  const hi = m[2] === undefined ? lo : Number(m[2]);
  if (hi < lo) usage(`${name}: ${s} is empty`);
  return [lo, hi];
}

const opts = { syncShare: 0.5, firstBarrier: true, providers: ['shm', 'ofi'], sigterm: 'defer', ref: undefined, trials: 100, configs: undefined, np: [4, 4], timeoutMs: 3000, delay: [50, 600], out: path.join(root, 'bench', 'results', 'fault-campaign.json'), store: 'tcp', seed: undefined, collectives: undefined, snapshot: true, verbose: false, warmup: 20 };
{
  const a = process.argv.slice(2);
  for (let i = 0; i < a.length; i++) {
    const k = a[i];
    const val = () => (i + 1 < a.length ? a[++i] : usage(`${k} needs a value`));
    if (k === '--trials') opts.trials = Number(val());
    else if (k === '--configs') opts.configs = val();
    else if (k === '--np') opts.np = range(val(), '--np');
    else if (k === '--timeout-ms') opts.timeoutMs = Number(val());
    else if (k === '--delay') opts.delay = range(val(), '--delay');
    else if (k === '--out') opts.out = path.resolve(val());
    else if (k === '--store') opts.store = val();
    else if (k === '--seed') opts.seed = Number(val());
    else if (k === '--collectives') opts.collectives = val();
    else if (k === '--warmup') opts.warmup = Number(val());
    else if (k === '--no-snapshot') opts.snapshot = false;
    else if (k === '--ref') opts.ref = val();
    else if (k === '--sigterm') opts.sigterm = val();
    else if (k === '--sync-share') opts.syncShare = Number(val());
    else if (k === '--no-first-barrier') opts.firstBarrier = false;
    else if (k === '--providers') opts.providers = val().split(',').filter(Boolean);
    else if (k === '-v' || k === '--verbose') opts.verbose = true;
    else if (k === '-h' || k === '--help') usage();
    else usage(`unknown argument ${k}`);
  }
  if (!Number.isInteger(opts.trials) || opts.trials < 1) usage('--trials must be a positive integer');
  if (!(opts.timeoutMs > 0)) usage('--timeout-ms must be positive');
  if (opts.np[0] < 2) usage('--np must be at least 2 (a victim and a survivor)');
  if (!['tcp', 'file'].includes(opts.store)) usage('--store is tcp or file');
  if (!['defer', 'default'].includes(opts.sigterm)) usage('--sigterm is defer or default');
}

const SIGNALS = { kill: 'SIGKILL', stop: 'SIGSTOP' };
const ALL_CONFIGS = [];
for (const sig of ['kill', 'stop']) for (const launcher of ['run', 'none']) for (const provider of opts.providers) ALL_CONFIGS.push({ name: `${sig}/${launcher}/${provider}`, sig, signal: SIGNALS[sig], launcher, provider });

/** `--configs kill,stop/none/ofi`: a config is in when every /-separated token of some entry is one of its parts. */
function selected(cfg) {
  if (!opts.configs) return true;
  const parts = cfg.name.split('/');
  return opts.configs.split(',').some((entry) => entry.split(/[/+]/).every((t) => t === '*' || t === '' || parts.includes(t.toLowerCase().replace(/^sig/, ''))));
}
const configs = ALL_CONFIGS.filter(selected);
if (configs.length === 0) usage(`--configs ${opts.configs} selects nothing; configs are ${ALL_CONFIGS.map((c) => c.name).join(', ')}`);

const campaignSeed = opts.seed ?? (randomBytes(4).readUInt32LE(0) >>> 1);
let rngState = campaignSeed >>> 0;
/** The driver's own random numbers (victim, delay, per-trial seeds): reproducible from --seed. */
function rand() {
  rngState = (rngState + 0x6d2b79f5) >>> 0;
  let t = rngState;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const randInt = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));

// ---------------------------------------------------------------- the package we run

function maxMtime(dir) {
  let m = 0;
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    m = Math.max(m, e.isDirectory() ? maxMtime(p) : fs.statSync(p).mtimeMs);
  }
  return m;
}

/**
 * Builds the package as of git revision `ref` in a temp dir: `git archive` of src/, native/ and
 * the build files, tsc over src/ only, and the native addons (node-gyp through `npm run install`,
 * cached in the temp dir by the tree ids of native/ and binding.gyp). For a campaign against
 * committed code while the working tree is being edited.
 */
async function buildRef(ref) {
  const commit = git(['rev-parse', '--verify', `${ref}^{commit}`]);
  if (!commit) throw new Error(`--ref ${ref}: not a commit`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'weft-fc-pkg-'));
  const run = (cmd, args, cwd, what) => {
    const r = spawnSync(cmd, args, { cwd, encoding: 'utf8', maxBuffer: 64 << 20 });
    if (r.status !== 0) throw new Error(`${what} failed (${r.status ?? r.signal}): ${`${r.stdout}\n${r.stderr}`.trim().split('\n').slice(-8).join('\n')}`);
    return r.stdout;
  };
  try {
    const tar = spawnSync('git', ['archive', '--format=tar', commit, 'src', 'native', 'binding.gyp', 'package.json', 'bin', 'tsconfig.json'], { cwd: root, maxBuffer: 256 << 20 });
    if (tar.status !== 0) throw new Error(`git archive: ${tar.stderr}`);
    const x = spawnSync('tar', ['-x', '-C', dir], { input: tar.stdout });
    if (x.status !== 0) throw new Error(`tar: ${x.stderr}`);
    fs.symlinkSync(path.join(root, 'node_modules'), path.join(dir, 'node_modules'));
    const tsconfig = JSON.parse(fs.readFileSync(path.join(dir, 'tsconfig.json'), 'utf8'));
    tsconfig.include = ['src/**/*.ts'];
    fs.writeFileSync(path.join(dir, 'tsconfig.fc.json'), JSON.stringify(tsconfig));
    console.log(`fault-campaign: building ${commit.slice(0, 10)} in ${dir} (tsc)`);
    run(process.execPath, [path.join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.fc.json'], dir, 'tsc');
    const key = `${git(['rev-parse', `${commit}:native`])}-${git(['rev-parse', `${commit}:binding.gyp`])}`.replace(/[^0-9a-f-]/g, '').slice(0, 40);
    const cache = path.join(os.tmpdir(), `weft-fc-native-${key}`);
    if (!fs.existsSync(path.join(cache, 'weft.node'))) {
      console.log('fault-campaign: building the native addons (node-gyp)');
      run('npm', ['run', '--silent', 'install'], dir, 'node-gyp');
      const tmpCache = `${cache}.${process.pid}`;
      fs.mkdirSync(tmpCache, { recursive: true });
      for (const f of ['weft.node', 'weft_ofi.node']) {
        const src = path.join(dir, 'build', 'Release', f);
        if (fs.existsSync(src)) fs.copyFileSync(src, path.join(tmpCache, f));
      }
      fs.rmSync(cache, { recursive: true, force: true });
      fs.renameSync(tmpCache, cache);
    }
    fs.rmSync(path.join(dir, 'build'), { recursive: true, force: true });
    fs.mkdirSync(path.join(dir, 'build', 'Release'), { recursive: true });
    for (const f of fs.readdirSync(cache)) fs.copyFileSync(path.join(cache, f), path.join(dir, 'build', 'Release', f));
    fs.mkdirSync(path.join(dir, 'scripts'));
    fs.copyFileSync(path.join(root, 'scripts', 'fault-campaign-rank.mjs'), path.join(dir, 'scripts', 'fault-campaign-rank.mjs'));
    return { dir, builtAt: new Date().toISOString(), ref, commit };
  } catch (err) {
    fs.rmSync(dir, { recursive: true, force: true });
    throw err;
  }
}

/** Copies the built package to a temp dir, retrying while a build is rewriting it. */
async function makeSnapshot() {
  for (let attempt = 1; attempt <= 30; attempt++) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'weft-fc-pkg-'));
    try {
      const before = Math.max(maxMtime(path.join(root, 'dist', 'src')), maxMtime(path.join(root, 'build', 'Release')));
      if (Date.now() - before < 3000) throw new Error('dist/ or build/ changed in the last 3 s');
      fs.cpSync(path.join(root, 'dist', 'src'), path.join(dir, 'dist', 'src'), { recursive: true });
      fs.mkdirSync(path.join(dir, 'build', 'Release'), { recursive: true });
      for (const f of ['weft.node', 'weft_ofi.node']) {
        const src = path.join(root, 'build', 'Release', f);
        if (fs.existsSync(src)) fs.copyFileSync(src, path.join(dir, 'build', 'Release', f));
      }
      fs.cpSync(path.join(root, 'bin'), path.join(dir, 'bin'), { recursive: true });
      fs.copyFileSync(path.join(root, 'package.json'), path.join(dir, 'package.json'));
      fs.mkdirSync(path.join(dir, 'scripts'));
      fs.copyFileSync(path.join(root, 'scripts', 'fault-campaign-rank.mjs'), path.join(dir, 'scripts', 'fault-campaign-rank.mjs'));
      fs.symlinkSync(path.join(root, 'node_modules'), path.join(dir, 'node_modules'));
      const after = Math.max(maxMtime(path.join(root, 'dist', 'src')), maxMtime(path.join(root, 'build', 'Release')));
      if (after !== before) throw new Error('dist/ or build/ changed while copying');
      const check = spawnSync(process.execPath, ['--input-type=module', '-e', `const m = await import(${JSON.stringify(path.join(dir, 'dist/src/index.js'))}); if (m.native?.ofi?.available ?? true) await import(${JSON.stringify(path.join(dir, 'dist/src/nic/ofi/device.js'))});`], { encoding: 'utf8', timeout: 60_000 });
      if (check.status !== 0) throw new Error(`the copy does not load: ${(check.stderr || '').trim().split('\n').slice(-3).join(' | ')}`);
      return { dir, builtAt: new Date(before).toISOString() };
    } catch (err) {
      fs.rmSync(dir, { recursive: true, force: true });
      console.error(`fault-campaign: snapshot attempt ${attempt}: ${err.message}; retrying in 5 s`);
      await sleep(5000);
    }
  }
  throw new Error('could not take a consistent copy of dist/ and build/ (a build keeps rewriting them); use --no-snapshot');
}

// ---------------------------------------------------------------- processes

/** /proc/<pid>/stat: state, ppid, process group, start time (clock ticks since boot). */
function procStat(pid) {
  try {
    const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
    return { state: f[0], ppid: Number(f[1]), pgrp: Number(f[2]), start: Number(f[19]) };
  } catch {
    return undefined;
  }
}

/** Alive and the same process (pid not recycled); zombies count as gone. */
function alive(pid, start) {
  const st = procStat(pid);
  return Boolean(st && st.state !== 'Z' && st.state !== 'X' && (start === undefined || st.start === start));
}

function procInfo(pid) {
  const read = (f) => {
    try {
      return fs.readFileSync(`/proc/${pid}/${f}`, 'utf8');
    } catch {
      return '';
    }
  };
  return { pid, state: procStat(pid)?.state, wchan: read('wchan'), cmd: read('cmdline').split('\0').filter(Boolean).slice(1).map((a) => path.basename(a)).join(' ') };
}

/** Live processes whose environment carries FC_TRIAL=<id> (every process a trial started inherits it). */
function markedProcesses(id) {
  const needle = Buffer.from(`\0FC_TRIAL=${id}\0`);
  const head = Buffer.from(`FC_TRIAL=${id}\0`);
  const out = [];
  for (const e of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(e) || Number(e) === process.pid) continue;
    let env;
    try {
      env = fs.readFileSync(`/proc/${e}/environ`);
    } catch {
      continue;
    }
    if ((env.includes(needle) || env.subarray(0, head.length).equals(head)) && alive(Number(e))) out.push(Number(e));
  }
  return out;
}

function kill(pid, sig) {
  try {
    process.kill(pid, sig);
    return true;
  } catch {
    return false;
  }
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
    srv.on('error', reject);
  });
}

// ---------------------------------------------------------------- /dev/shm

const WEFT_SEG = /^weft\.[A-Za-z0-9_-]{1,48}\.(\d+)\.\d+\.[A-Za-z0-9]+\.[A-Za-z0-9]+$/;
const FABRIC_SEG = /^(\d+):\d+:\d+$/;

/** /dev/shm entries of weft and libfabric shm, with their owner pid. */
function shmEntries() {
  const out = [];
  let names = [];
  try {
    names = fs.readdirSync('/dev/shm');
  } catch {
    return out;
  }
  for (const n of names) {
    let m = WEFT_SEG.exec(n);
    if (m) out.push({ name: n, kind: 'weft', pid: Number(m[1]) });
    else if ((m = FABRIC_SEG.exec(n))) out.push({ name: n, kind: 'fabric', pid: Number(m[1]) });
  }
  return out;
}

// ---------------------------------------------------------------- one trial

const WORKER = () => path.join(pkg.dir, 'scripts', 'fault-campaign-rank.mjs');
const WEFT = () => path.join(pkg.dir, 'bin', 'weft.js');
let pkg;
let current; // the running trial, for SIGINT

class Trial {
  constructor(cfg, index, np) {
    this.cfg = cfg;
    this.index = index;
    this.np = np;
    this.id = `fc${process.pid}t${index}${randomBytes(3).toString('hex')}`;
    this.ranks = Array.from({ length: np }, (_, r) => ({ rank: r, pid: undefined, start: undefined, ev: {} }));
    this.children = []; // ChildProcess objects (launcher, or the ranks)
    this.streams = [];
    this.log = []; // non-FC output lines, last 40 kept
    this.launcherExit = undefined;
    this.tmp = undefined;
  }

  line(l, stream) {
    const i = l.indexOf('FC {');
    if (i >= 0) {
      let e;
      try {
        e = JSON.parse(l.slice(i + 3));
      } catch {
        this.keep(`${stream}: ${l}`);
        return;
      }
      const r = this.ranks[e.rank];
      if (!r) return this.keep(`${stream}: ${l}`);
      if (e.ev === 'ready') {
        r.pid = e.pid;
        r.start = procStat(e.pid)?.start;
      }
      // The first event of each kind (a rank reports one error).
      r.ev[e.ev] ??= e;
      if (opts.verbose) console.log(`  [trial ${this.index}] ${l.slice(i)}`);
      return;
    }
    this.keep(`${stream}: ${l}`);
  }

  keep(l) {
    this.log.push(l.length > 600 ? `${l.slice(0, 600)}…` : l);
    if (this.log.length > 40) this.log.shift();
    if (opts.verbose) console.log(`  [trial ${this.index}] ${l}`);
  }

  attach(child) {
    this.children.push(child);
    for (const [s, name] of [[child.stdout, 'out'], [child.stderr, 'err']]) {
      const rl = createInterface({ input: s });
      rl.on('line', (l) => this.line(l, name));
      this.streams.push(new Promise((res) => rl.on('close', res)));
    }
  }

  async start() {
    this.t0 = clock();
    const env = { ...process.env, NO_COLOR: '1', WEFT_TIMEOUT_MS: String(opts.timeoutMs), WEFT_PROVIDER: this.cfg.provider, FC_SEED: String(randInt(1, 2 ** 30)), FC_TRIAL: this.id, FC_WARMUP: String(opts.warmup), FC_SIGTERM: opts.sigterm, FC_SYNC_SHARE: String(opts.syncShare), FC_FIRST_BARRIER: opts.firstBarrier ? '1' : '0' };
    for (const k of ['FORCE_COLOR', 'WEFT_STORE_SECRET', 'WEFT_STORE_SECRET_FILE', 'WEFT_RANK', 'WEFT_WORLD_SIZE', 'WEFT_STORE', 'WEFT_PREFIX', 'WEFT_LAUNCHER_PID', 'WEFT_LAUNCHER_START', 'WEFT_LOCAL_RANK', 'WEFT_LOCAL_WORLD_SIZE', 'RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT', 'LOCAL_RANK']) delete env[k];
    if (opts.collectives) env.FC_COLLECTIVES = opts.collectives;
    this.seed = Number(env.FC_SEED);
    const stdio = ['ignore', 'pipe', 'pipe'];
    if (this.cfg.launcher === 'run') {
      const child = spawn(process.execPath, [WEFT(), 'run', '-n', String(this.np), WORKER()], { env, stdio, detached: true });
      child.on('exit', (code, signal) => (this.launcherExit = { code, signal, t: clock() }));
      this.launcher = { pid: child.pid, start: procStat(child.pid)?.start };
      this.attach(child);
    } else {
      let rankEnv;
      if (opts.store === 'tcp') {
        const port = await freePort();
        // Rank 0 serves the store; a shared secret as the docs ask (else a warning per trial).
        const secret = randomBytes(16).toString('hex');
        rankEnv = (r) => ({ RANK: String(r), WORLD_SIZE: String(this.np), MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(port), WEFT_PREFIX: this.id, WEFT_STORE_SECRET: secret });
      } else {
        this.tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'weft-fc-store-'));
        rankEnv = (r) => ({ WEFT_RANK: String(r), WEFT_WORLD_SIZE: String(this.np), WEFT_STORE: `file://${this.tmp}`, WEFT_PREFIX: this.id });
      }
      for (let r = 0; r < this.np; r++) {
        const child = spawn(process.execPath, [WORKER()], { env: { ...env, ...rankEnv(r) }, stdio, detached: true });
        const rk = this.ranks[r];
        rk.pid = child.pid;
        rk.start = procStat(child.pid)?.start;
        child.on('exit', (code, signal) => (rk.exit = { code, signal, t: clock() }));
        this.attach(child);
      }
    }
  }

  /** Every process the trial knows of (launcher and ranks). */
  pids() {
    const out = this.ranks.filter((r) => r.pid).map((r) => ({ pid: r.pid, start: r.start }));
    if (this.launcher) out.push(this.launcher);
    return out;
  }

  rankAlive(r) {
    if (r.exit) return false;
    return r.pid !== undefined && alive(r.pid, r.start);
  }

  allExited() {
    if (this.launcher && !this.launcherExit) return false;
    return this.ranks.every((r) => r.pid === undefined || !this.rankAlive(r));
  }

  /** Polls `cond` every 10 ms until true or `until` (a clock() time); true when it held. */
  async until(cond, until) {
    for (;;) {
      if (cond()) return true;
      if (clock() >= until || stopping) return false;
      await sleep(10);
    }
  }

  killAll() {
    for (const c of this.children) if (c.pid) kill(-c.pid, 'SIGKILL');
    for (const p of this.pids()) if (alive(p.pid, p.start)) kill(p.pid, 'SIGKILL');
    for (const p of markedProcesses(this.id)) kill(p, 'SIGKILL');
  }

  async run() {
    const { cfg } = this;
    const rec = (this.rec = { trial: this.index, config: cfg.name, np: this.np, seed: this.seed, status: 'ok' });
    await this.start();
    rec.seed = this.seed;
    const failedEarly = () => this.ranks.some((r) => r.ev.error || r.ev.wrong || r.ev['init-failed'] || (r.pid !== undefined && r.ev.ready && !this.rankAlive(r))) || Boolean(this.launcherExit);

    // 1. Every rank joined and is looping.
    const setupOk = await this.until(() => this.ranks.every((r) => r.ev.loop) || failedEarly(), clock() + 30_000 + 3 * opts.timeoutMs);
    if (!setupOk || failedEarly()) {
      rec.status = stopping ? 'interrupted' : 'setup-failed';
      rec.detail = this.describeEarly();
      return this.finish(false);
    }
    // 2. A random moment.
    rec.delayMs = randInt(opts.delay[0], opts.delay[1]);
    await this.until(failedEarly, clock() + rec.delayMs);
    if (failedEarly()) {
      // Something failed with no fault injected: a finding in itself.
      rec.status = stopping ? 'interrupted' : 'failed-before-signal';
      rec.detail = this.describeEarly();
      return this.finish(false);
    }
    // 3. The fault.
    const victim = this.ranks[randInt(0, this.np - 1)];
    rec.victim = victim.rank;
    rec.victimPid = victim.pid;
    const tSig = clock();
    this.tSig = tSig;
    if (!kill(victim.pid, cfg.signal)) {
      rec.status = 'signal-failed';
      rec.detail = `kill(${victim.pid}, ${cfg.signal}) failed: the victim was gone`;
      return this.finish(false);
    }
    const survivors = this.ranks.filter((r) => r !== victim);
    const cap = tSig + opts.timeoutMs + 10_000;
    const survivorDone = (r) => r.ev.error || r.ev.wrong || !this.rankAlive(r);
    await this.until(() => survivors.every(survivorDone), cap);
    if (cfg.sig === 'stop' && cfg.launcher === 'none' && alive(victim.pid, victim.start)) {
      // The stopped rank resumes once the others gave up: it must fail and clean up by itself.
      rec.contMs = clock() - tSig;
      kill(victim.pid, 'SIGCONT');
    }
    // 4. Everything exits.
    const exited = await this.until(() => this.allExited(), cap);
    if (!exited) {
      rec.status = stopping ? 'interrupted' : 'hang';
      rec.hang = {
        noError: survivors.filter((r) => !r.ev.error && !r.ev.wrong).map((r) => r.rank),
        alive: this.pids().filter((p) => alive(p.pid, p.start)).map((p) => ({ ...procInfo(p.pid), rank: this.ranks.find((r) => r.pid === p.pid)?.rank ?? 'launcher' })),
      };
    }
    rec.exitMs = clock() - tSig;
    return this.finish(exited);
  }

  describeEarly() {
    const parts = [];
    for (const r of this.ranks) {
      const e = r.ev.error ?? r.ev.wrong ?? r.ev['init-failed'];
      if (e) parts.push(`rank ${r.rank} ${e.ev}: ${e.code ?? ''} ${e.message ?? `${e.coll} element ${e.index} got ${e.got} want ${e.want}`}`);
      else if (!r.ev.ready) parts.push(`rank ${r.rank} never ready`);
      else if (!r.ev.loop) parts.push(`rank ${r.rank} never looping`);
      else if (!this.rankAlive(r)) parts.push(`rank ${r.rank} exited`);
    }
    if (this.launcherExit) parts.push(`launcher exited ${JSON.stringify(this.launcherExit)}`);
    return parts.join('; ');
  }

  async finish(clean) {
    const rec = this.rec;
    if (!clean) this.killAll();
    // The last output lines, then what is left over.
    await Promise.race([Promise.all(this.streams), sleep(2000)]);
    if (clean) {
      await sleep(200);
      const orphans = markedProcesses(this.id);
      rec.orphans = orphans.map(procInfo);
      for (const p of orphans) kill(p, 'SIGKILL');
    }
    const pids = new Set([...this.pids().map((p) => p.pid), ...(rec.orphans ?? []).map((o) => o.pid)]);
    // Give the killed ones a moment to be reaped before looking at /dev/shm.
    await this.until(() => [...pids].every((p) => !alive(p)) && this.children.every((c) => c.exitCode !== null || c.signalCode !== null), clock() + 2000);
    const left = shmEntries().filter((s) => pids.has(s.pid));
    const owner = (pid) => (this.launcher?.pid === pid ? 'launcher' : (this.ranks.find((r) => r.pid === pid)?.rank ?? '?'));
    const entries = left.map((s) => ({ name: s.name, kind: s.kind, owner: owner(s.pid), ownerIsVictim: s.pid === rec.victimPid }));
    for (const s of left) fs.rmSync(path.join('/dev/shm', s.name), { force: true });
    if (this.tmp) fs.rmSync(this.tmp, { recursive: true, force: true });
    // Counted as leaks only when the trial ended by itself (a forced SIGKILL leaves segments by design).
    if (rec.status === 'ok') rec.leaks = entries;
    else if (entries.length) rec.leftAfterForcedKill = entries;
    this.summarize();
    return rec;
  }

  summarize() {
    const rec = this.rec;
    rec.launcherExit = this.launcherExit ? { code: this.launcherExit.code, signal: this.launcherExit.signal } : undefined;
    const launcherLine = this.log.filter((l) => l.startsWith('err: weft run:')).pop();
    if (launcherLine) rec.launcherSaid = launcherLine.slice(5);
    if (launcherLine && rec.victim !== undefined) rec.launcherNamesVictim = new RegExp(`\\brank ${rec.victim}\\b`).test(launcherLine);
    rec.log = this.log.filter((l) => !l.startsWith('err: weft run: store:') || opts.verbose).slice(-12);
    if (rec.status !== 'ok') rec.events = this.ranks.map((r) => Object.values(r.ev).map((e) => `${e.ev}@${Math.round(e.t - this.t0)}ms`).join(' ') + (r.exit ? ` exit(${r.exit.code ?? r.exit.signal})@${Math.round(r.exit.t - this.t0)}ms` : ''));
    if (rec.victim === undefined) return;
    const named = new RegExp(`\\brank ${rec.victim}\\b`);
    const v = this.ranks[rec.victim];
    rec.victimEvents = Object.keys(v.ev);
    // A stopped victim, once resumed, must fail too (and exit by itself).
    const ve = v.ev.error ?? v.ev.wrong;
    if (ve) rec.victimError = { ms: +(ve.t - this.tSig).toFixed(2), code: ve.code ?? 'WRONG', coll: ve.coll, message: ve.message ?? `${ve.coll}: element ${ve.index} got ${ve.got}, want ${ve.want}` };
    if (v.exit) rec.victimExit = { code: v.exit.code, signal: v.exit.signal };
    rec.survivors = this.ranks
      .filter((r) => r.rank !== rec.victim)
      .map((r) => {
        const e = r.ev.error ?? r.ev.wrong;
        const s = { rank: r.rank };
        if (e) {
          s.errorMs = +(e.t - this.tSig).toFixed(2);
          s.ev = e.ev;
          s.code = e.code ?? 'WRONG';
          s.coll = e.coll;
          s.sync = e.sync;
          s.it = e.it;
          s.message = e.message ?? `${e.coll}: element ${e.index} got ${e.got}, want ${e.want}`;
          s.namesVictim = named.test(s.message);
          s.namesVictimPid = s.message.includes(`pid ${rec.victimPid})`) || s.message.includes(`pid ${rec.victimPid} `);
        }
        if (r.ev.closed) s.closeMs = +r.ev.closed.ms.toFixed(1);
        if (r.ev['close-failed']) s.closeFailed = r.ev['close-failed'].message;
        if (r.ev.sigterm) s.sigtermMs = +(r.ev.sigterm.t - this.tSig).toFixed(2);
        if (r.ev.stuck) s.stuck = true;
        if (r.exit) s.exit = { code: r.exit.code, signal: r.exit.signal };
        return s;
      });
  }
}

// ---------------------------------------------------------------- the campaign

function pct(a, b) {
  return b === 0 ? '-' : `${((100 * a) / b).toFixed(a === b ? 0 : 1)}%`;
}
function quantile(sorted, q) {
  if (sorted.length === 0) return undefined;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
}
const ms = (x) => (x === undefined ? '-' : x >= 10_000 ? `${(x / 1000).toFixed(1)}s` : x.toFixed(x < 10 ? 1 : 0));

function summarizeConfig(name, recs) {
  const valid = recs.filter((r) => r.status === 'ok' || r.status === 'hang');
  const within = opts.timeoutMs + 1000;
  const surv = valid.flatMap((r) => r.survivors ?? []);
  const errored = surv.filter((s) => s.errorMs !== undefined);
  const times = errored.map((s) => s.errorMs).sort((a, b) => a - b);
  const codes = {};
  for (const s of errored) codes[s.code] = (codes[s.code] ?? 0) + 1;
  const perColl = {};
  for (const s of errored) {
    const c = (perColl[s.coll ?? '?'] ??= { n: 0, max: 0, named: 0 });
    c.n++;
    c.max = Math.max(c.max, s.errorMs);
    if (s.namesVictim) c.named++;
  }
  return {
    config: name,
    trials: valid.length,
    setupFailed: recs.filter((r) => r.status === 'setup-failed').length,
    failedBeforeSignal: recs.filter((r) => r.status === 'failed-before-signal').length,
    hangs: valid.filter((r) => r.status === 'hang').length,
    hangsNoError: valid.filter((r) => r.hang?.noError.length).length,
    hangsNoExit: valid.filter((r) => r.status === 'hang' && !r.hang?.noError.length).length,
    victimsResumedWithoutError: valid.filter((r) => r.contMs !== undefined && !r.victimError).length,
    leakTrials: valid.filter((r) => r.leaks?.length).length,
    leakedSegments: valid.reduce((a, r) => a + (r.leaks?.length ?? 0), 0),
    orphans: valid.reduce((a, r) => a + (r.orphans?.length ?? 0), 0),
    survivors: surv.length,
    errored: errored.length,
    erroredWithin: errored.filter((s) => s.errorMs <= within).length,
    namedVictim: errored.filter((s) => s.namesVictim).length,
    wrongResults: surv.filter((s) => s.ev === 'wrong').length,
    terminatedBeforeError: surv.filter((s) => s.errorMs === undefined && s.sigtermMs !== undefined).length,
    stuckAfterClose: surv.filter((s) => s.stuck).length,
    medianMs: quantile(times, 0.5),
    p99Ms: quantile(times, 0.99),
    maxMs: times.at(-1),
    codes,
    perCollective: perColl,
  };
}

function printSummary(summaries) {
  const within = opts.timeoutMs + 1000;
  const head = ['config', 'trials', 'hangs', 'leaks', 'orphans', 'surv', `err<=${within / 1000}s`, 'names', 'median', 'p99', 'max', 'wrong', 'other'];
  const rows = summaries.map((s) => [
    s.config,
    String(s.trials),
    String(s.hangs),
    s.leakTrials ? `${s.leakTrials} (${s.leakedSegments} seg)` : '0',
    String(s.orphans),
    String(s.survivors),
    `${s.erroredWithin}/${s.survivors}`,
    pct(s.namedVictim, s.errored),
    ms(s.medianMs),
    ms(s.p99Ms),
    ms(s.maxMs),
    String(s.wrongResults),
    [s.hangs ? `hangs: ${s.hangsNoError} without an error, ${s.hangsNoExit} erred but never exited` : '', s.victimsResumedWithoutError ? `resumed victim without error ${s.victimsResumedWithoutError}` : '', s.setupFailed ? `setup-failed ${s.setupFailed}` : '', s.failedBeforeSignal ? `failed-before-signal ${s.failedBeforeSignal}` : '', s.terminatedBeforeError ? `SIGTERMed-before-error ${s.terminatedBeforeError}` : '', s.stuckAfterClose ? `stuck-after-close ${s.stuckAfterClose}` : '', Object.entries(s.codes).map(([k, v]) => `${k} ${v}`).join(' ')].filter(Boolean).join(', '),
  ]);
  const w = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const fmt = (r) => r.map((c, i) => (i === 0 || i === r.length - 1 ? c.padEnd(w[i]) : c.padStart(w[i]))).join('  ');
  console.log(`\ntimes: ms from the signal to each survivor's first error (median / p99 / max over survivors)`);
  console.log(fmt(head));
  console.log(fmt(w.map((n) => '-'.repeat(n))));
  for (const r of rows) console.log(fmt(r));

  for (const s of summaries.filter((x) => x.config.startsWith('kill/'))) {
    const cs = Object.entries(s.perCollective).sort((a, b) => b[1].max - a[1].max);
    if (cs.length === 0) continue;
    console.log(`\n${s.config}: max ms from SIGKILL to error per collective the survivor was in (survivors, % naming the victim)`);
    for (const [c, v] of cs) console.log(`  ${c.padEnd(18)} ${ms(v.max).padStart(7)}  (${v.n}, ${pct(v.named, v.n)})${s.config.endsWith('/shm') && v.max > 500 ? '  > 0.5 s' : ''}`);
  }

  const all = summaries.reduce((a, s) => ({ trials: a.trials + s.trials, hangs: a.hangs + s.hangs, leaks: a.leaks + s.leakTrials, surv: a.surv + s.survivors, within: a.within + s.erroredWithin, errored: a.errored + s.errored, named: a.named + s.namedVictim, wrong: a.wrong + s.wrongResults }), { trials: 0, hangs: 0, leaks: 0, surv: 0, within: 0, errored: 0, named: 0, wrong: 0 });
  const killShmMax = Math.max(0, ...summaries.filter((s) => /^kill\/.*\/shm$/.test(s.config)).map((s) => s.maxMs ?? 0));
  const verdict = (ok) => (ok ? 'ok  ' : 'FAIL');
  console.log(`\ntargets over ${all.trials} trials:`);
  console.log(`  ${verdict(all.hangs === 0)} hangs: ${all.hangs}`);
  console.log(`  ${verdict(all.leaks === 0)} trials with leaked segments: ${all.leaks}`);
  console.log(`  ${verdict(all.wrong === 0)} wrong results: ${all.wrong}`);
  console.log(`  ${verdict(all.within === all.surv)} survivors erroring within timeout + 1 s: ${all.within}/${all.surv}`);
  console.log(`  ${verdict(all.errored > 0 && all.named >= 0.99 * all.errored)} errors naming the victim: ${pct(all.named, all.errored)} (${all.named}/${all.errored}; target >= 99%)`);
  if (summaries.some((s) => /^kill\/.*\/shm$/.test(s.config))) console.log(`  ${verdict(killShmMax <= 500)} max time to error after SIGKILL on shm: ${ms(killShmMax)} ms (target <= 500)`);
  if (all.trials < 400 || summaries.some((s) => s.trials < 100)) console.log(`  (the issue asks for >= 100 trials per configuration and >= 400 in all)`);
}

function git(args) {
  const r = spawnSync('git', args, { cwd: root, encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : undefined;
}

const results = [];
let stopping = false;
let meta;

function save() {
  const byConfig = configs.map((c) => summarizeConfig(c.name, results.filter((r) => r.config === c.name)));
  fs.mkdirSync(path.dirname(opts.out), { recursive: true });
  const tmp = `${opts.out}.tmp`;
  fs.writeFileSync(tmp, JSON.stringify({ meta: { ...meta, finished: new Date().toISOString() }, summary: byConfig, trials: results }, null, 1));
  fs.renameSync(tmp, opts.out);
  return byConfig;
}

function cleanupAndExit(code) {
  if (current) {
    try {
      current.killAll();
      const pids = new Set(current.pids().map((p) => p.pid));
      for (const s of shmEntries()) if (pids.has(s.pid)) fs.rmSync(path.join('/dev/shm', s.name), { force: true });
      if (current.tmp) fs.rmSync(current.tmp, { recursive: true, force: true });
    } catch {
      // best effort
    }
  }
  if (pkg && pkg.dir !== root) fs.rmSync(pkg.dir, { recursive: true, force: true });
  process.exit(code);
}

process.on('SIGINT', () => {
  if (stopping) cleanupAndExit(130);
  stopping = true;
  console.error('\nfault-campaign: interrupted; stopping the current trial (SIGINT again to quit at once)');
});
process.on('SIGTERM', () => {
  stopping = true;
});
process.on('uncaughtException', (err) => {
  console.error('fault-campaign: internal error:', err);
  cleanupAndExit(70);
});

pkg = opts.ref ? await buildRef(opts.ref) : opts.snapshot ? await makeSnapshot() : { dir: root, builtAt: new Date(maxMtime(path.join(root, 'dist', 'src'))).toISOString() };
meta = {
  started: new Date().toISOString(),
  commit: git(['rev-parse', 'HEAD']),
  dirtySrc: (git(['status', '--porcelain', 'src']) ?? '').split('\n').filter(Boolean),
  distBuiltAt: pkg.builtAt,
  package: pkg.ref ? `built from ${pkg.ref} = ${pkg.commit}` : opts.snapshot ? 'copy of the working tree\'s dist/ and build/' : 'the working tree\'s dist/ and build/',
  node: process.version,
  host: { cpus: os.cpus().length, load: os.loadavg() },
  options: { ...opts, seed: campaignSeed },
};
console.log(`fault campaign: ${configs.map((c) => c.name).join(', ')}; ${opts.trials} trials each, np ${opts.np.join('-')}, WEFT_TIMEOUT_MS ${opts.timeoutMs}, delay ${opts.delay.join('-')} ms, seed ${campaignSeed}`);
console.log(`package: ${pkg.ref ? `${pkg.ref} = ${pkg.commit.slice(0, 10)} built in ${pkg.dir}` : opts.snapshot ? `copy of dist/ built ${pkg.builtAt} in ${pkg.dir}` : root}; results: ${path.relative(process.cwd(), opts.out)}`);

// Round robin over the configs, so load drifts spread over all of them. A trial that never got
// to its fault (setup failed, or something failed before the signal) is recorded and does not
// count: each config runs until it has its N trials (or 10 in a row went wrong).
let index = 0;
let consecutiveBad = 0;
const done = new Map(configs.map((c) => [c.name, 0]));
outer: while (configs.some((c) => done.get(c.name) < opts.trials)) {
  for (const cfg of configs) {
    if (done.get(cfg.name) >= opts.trials) continue;
    {
      if (stopping) break outer;
      const np = randInt(opts.np[0], opts.np[1]);
      current = new Trial(cfg, ++index, np);
      const t0 = clock();
      const rec = await current.run();
      rec.seconds = +((clock() - t0) / 1000).toFixed(2);
      current = undefined;
      results.push(rec);
      const s = rec.survivors ?? [];
      const line = `#${rec.trial} ${cfg.name} np=${np} victim=${rec.victim ?? '-'} @${rec.delayMs ?? '-'}ms: ${rec.status}` + (s.length ? `  errors ${s.map((x) => (x.errorMs === undefined ? `r${x.rank}:none` : `r${x.rank}:${ms(x.errorMs)}ms ${x.code}${x.namesVictim ? '' : ' (unnamed)'} ${x.coll}`)).join(', ')}` : '') + (rec.leaks?.length ? `  LEAKS ${rec.leaks.map((l) => l.name).join(' ')}` : '') + (rec.orphans?.length ? `  ORPHANS ${rec.orphans.length}` : '') + (rec.detail ? `  (${rec.detail.slice(0, 300)})` : '');
      console.log(line);
      save();
      if (rec.status === 'ok' || rec.status === 'hang') {
        done.set(cfg.name, done.get(cfg.name) + 1);
        consecutiveBad = 0;
        continue;
      }
      if (rec.status === 'interrupted') break outer;
      if (++consecutiveBad >= 10) {
        console.error('fault-campaign: 10 trials in a row failed before their fault; giving up (see the JSON for why)');
        break outer;
      }
    }
  }
}
printSummary(save());
cleanupAndExit(0);
