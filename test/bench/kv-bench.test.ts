/**
 * `weft bench kv` end to end on this host, real processes and threads: 2 ranks x 2 daemons x
 * 2 clients (8 busy threads on this machine's cores: the waiting policy must keep them all
 * moving), every backend with --verify, the Redis peers in the same run; --verify must catch a
 * shard that drops puts; a client thread that dies ends the job with an error naming it.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const BENCH = fileURLToPath(new URL('../../bench/kv/index.js', import.meta.url));
const hasOfi = (await import('../../src/native/binding.js')).native.ofi.available;
const hasRedis = spawnSync('sh', ['-c', 'command -v redis-server']).status === 0;

function bench(args: string[], env: Record<string, string> = {}, timeoutMs = 240_000): Promise<{ code: number | null; out: string; err: string }> {
  const out = mkdtempSync(path.join(tmpdir(), 'weft-kv-'));
  return new Promise((resolve) => {
    // (The bench reads WEFT_PROVIDER: a test's provider is the one it asks for.)
    const base = { ...process.env };
    delete base.WEFT_PROVIDER;
    const child = spawn(process.execPath, [BENCH, '--json', '--out', out, ...args], { env: { ...base, ...env }, detached: true });
    let o = '';
    let e = '';
    child.stdout.on('data', (d) => (o += d));
    child.stderr.on('data', (d) => (e += d));
    const timer = setTimeout(() => process.kill(-child.pid!, 'SIGKILL'), timeoutMs);
    child.on('exit', (code) => {
      clearTimeout(timer);
      rmSync(out, { recursive: true, force: true });
      resolve({ code, out: o, err: e });
    });
  });
}

const rows = (out: string) => out.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));

test('every backend, 2 ranks x 2 daemons x 2 clients, QD 4, --verify clean, Redis peers in the same run', async () => {
  // redis-benchmark (about 4 s) in the soak run only, for npm test's budget; ioredis always.
  const soak = process.env.WEFT_SOAK === '1';
  const peers = !hasRedis ? 'none' : soak ? 'redis,redis-benchmark' : 'redis';
  const r = await bench(['--quick', '--verify', '--ranks', '2', '--daemons', '2', '--clients', '2', '--qd', '4', '--keys', '1024', '--peers', peers]);
  assert.is(r.code, 0, r.err.slice(-3000));
  const rs = rows(r.out);
  const systems = rs.map((x) => x.system);
  assert.equal(systems.slice(0, 3), ['meta', 'delegation', 'direct']);
  for (const peer of peers === 'none' ? [] : peers.split(',')) {
    const row = rs.find((x) => x.system === peer);
    assert.ok(row, `no ${peer} row: ${systems.join(',')}`);
    assert.ok(row.mops > 0 && row.p50_us > 0, `${peer}: ${row.mops} Mops, p50 ${row.p50_us} us`);
  }
  for (const x of rs.slice(0, 3)) {
    for (const k of ['bench', 'system', 'ranks', 'hosts', 'daemons', 'clients', 'qd', 'read_ratio', 'distribution', 'mops', 'mops_per_rank', 'p50_us', 'p99_us', 'outstanding_avg', 'cqe_batch_avg']) assert.ok(k in x, `${x.system}: no ${k}`);
    assert.is(x.bench, 'kv');
    assert.is(x.ranks, 2);
    assert.is(x.fabric, 'shm', 'one host: copyrpc over shared memory');
    assert.is(x.mismatches, 0);
    assert.ok(x.mops > 0, `${x.system}: ${x.mops} Mops`);
    assert.ok(x.p50_us > 0 && x.p99_us >= x.p50_us, `${x.system}: p50 ${x.p50_us} p99 ${x.p99_us}`);
    assert.ok(x.outstanding_avg > 0, `${x.system}: no copyrpc call was ever seen in flight`);
    // With more busy threads than cores an idle pass yields at once, so every backend's threads
    // yield while requests complete (a counter not wired through reads 0).
    assert.ok(Number.isFinite(x.yields_per_request) && x.yields_per_request >= 0, `${x.system}: yields per request ${x.yields_per_request}`);
    if (x.oversubscribed) assert.ok(x.yields_per_request > 0, `${x.system}: oversubscribed, yet no thread yielded`);
    assert.ok(x.local_share > 0.3 && x.local_share < 0.7, `${x.system}: local share ${x.local_share} (uniform over 2 ranks)`);
    assert.is(x.per_rank_mops.length, 2);
    // --quick warms up 0.3 s at least, then until the throughput is steady (at most 3 s more)
    assert.type(x.warmup_steady, 'boolean');
    assert.ok(x.warmup_s >= 0.3, `${x.system}: warm-up ${x.warmup_s} s`);
  }
});

test('--verify catches a shard that acknowledges puts without storing them', async () => {
  const r = await bench(['--quick', '--verify', '--backends', 'meta', '--peers', 'none'], { WEFT_KV_FAULT: '50' });
  assert.is.not(r.code, 0, r.out);
  assert.match(r.err, /--verify found \d+ wrong get results/);
  assert.match(r.err, /expected/);
});

test('a client thread that dies ends the job on every rank with an error naming it', async () => {
  // A 600 s run: had the failure not ended it, the 120 s bound of bench() would kill it
  // (exit code null), and no run result may appear.
  const r = await bench(['--quick', '--backends', 'delegation', '--peers', 'none', '--duration', '600', '--runs', '1'], { WEFT_KV_CRASH: '1:0' }, 120_000);
  assert.is(r.code, 1, r.err.slice(-2000));
  assert.match(r.err, /rank 1 client 0 failed: .*injected failure/);
  assert.not.match(r.err, /delegation: [0-9.]+ Mops/);
});

test('Ctrl-C stops the run: exit 130, no rank left running, no segment left', async () => {
  const child = spawn(process.execPath, [BENCH, '--peers', 'none', '--duration', '30', '--runs', '1'], { detached: true, stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  child.stderr!.on('data', (d) => (err += d));
  await new Promise((r) => setTimeout(r, 4000));
  process.kill(-child.pid!, 'SIGINT');
  // Bound, not a measurement: a run that ignored Ctrl-C is killed and exits with null.
  const bound = setTimeout(() => process.kill(-child.pid!, 'SIGKILL'), 60_000);
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
  clearTimeout(bound);
  assert.is(code, 130, err);
  assert.match(err, /benchkv: interrupted/);
  const ranks = spawnSync('pgrep', ['-f', 'bench/kv/rank.js'], { encoding: 'utf8' }).stdout.trim();
  assert.is(ranks, '', `ranks still running: ${ranks}`);
  assert.equal(readdirSync('/dev/shm').filter((n) => n.startsWith('weft.')), []);
});

test('the poll controllers run in the daemon loops: --verify clean, the row names the controller and its setting', async () => {
  // Each controller in one backend's loops, the two backends taking turns (both for each with
  // WEFT_SOAK=1), half-second runs: each bench run costs 3-4 s of npm test's 15 minutes (most
  // of it starting the ranks), and a second backend 3 more. One case runs copyrpc over
  // libfabric between the two ranks (--provider ofi), where the controllers see fabric CQs.
  const soak = process.env.WEFT_SOAK === '1';
  const ofi = hasOfi ? ['--provider', 'ofi'] : [];
  for (const [args, spec, backends] of [
    [['--poll-budget', '8'], 'fixed:8', 'delegation'],
    [['--poll-controller', 'adaptive'], 'adaptive', 'meta'],
    [['--poll-controller', 'min-batch', ...ofi], 'min-batch', 'delegation'],
    [['--poll-controller', 'batch-hold'], 'batch-hold', 'meta'],
  ] as [string[], string, string][]) {
    const r = await bench(['--quick', '--duration', soak ? '1' : '0.5', '--verify', '--backends', soak ? 'delegation,meta' : backends, '--peers', 'none', ...args]);
    assert.is(r.code, 0, `${spec}: ${r.err.slice(-3000)}`);
    const rs = rows(r.out);
    assert.is(rs.length, soak ? 2 : 1);
    for (const x of rs) {
      assert.is(x.poll_controller, spec, x.system);
      assert.is(x.fabric, args.includes('ofi') ? 'ofi' : 'shm', `${spec} ${x.system}`);
      assert.is(x.mismatches, 0, `${spec} ${x.system}`);
      assert.type(x.poll_setting_avg, 'number');
      if (spec === 'fixed:8') assert.is(x.poll_setting_avg, 7, 'fixed:8 = up to 7 extra polls');
      if (spec === 'batch-hold') assert.ok(x.poll_setting_avg >= 0.5 && x.poll_setting_avg <= 100, `hold ${x.poll_setting_avg} us`);
      if (spec === 'min-batch') assert.ok(x.poll_setting_avg >= 0 && x.poll_setting_avg <= 255, `min-batch: ${x.poll_setting_avg} extra polls`);
      const h = x.cqe_hist as Record<string, number>;
      assert.equal(Object.keys(h), ['b0', 'b1', 'b2_10', 'b11_100', 'b100']);
      assert.ok(h.b1 + h.b2_10 + h.b11_100 + h.b100 > 0, `${spec} ${x.system}: no loop ever got a response`);
    }
  }
});

test('bad options are refused with a message', async () => {
  for (const [args, re] of [
    [['--backends', 'nope'], /backends are meta, delegation, direct/],
    [['--settle', '-1'], /seconds >= 0/],
    [['--distribution', 'zipfian:x'], /uniform/],
    [['--nnodes', '2', '--peers', 'none'], /several hosts need --store/],
    [['--poll-controller', 'bogus'], /none \| fixed:N \| adaptive \| min-batch \| batch-hold/],
    [['--poll-budget', '8', '--poll-controller', 'adaptive'], /disagree/],
    [['--provider', 'verbs'], /--provider.*auto, ofi/s],
  ] as [string[], RegExp][]) {
    const r = await bench(args);
    assert.is.not(r.code, 0, args.join(' '));
    assert.match(r.err, re);
  }
});

test.after(() => {
  const left = readdirSync('/dev/shm').filter((n) => /^weft\.kv/.test(n));
  assert.equal(left, []);
});

test.run();
