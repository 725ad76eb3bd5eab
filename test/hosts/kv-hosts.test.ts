// benchkv across 2 emulated hosts (network namespaces, each with its own hostname and
// /dev/shm; harness/emulated-hosts.ts), 2 ranks per host: shared memory inside a host and
// libfabric between hosts, in every thread's own copyrpc engine; every backend with --verify.
// The bench command runs on each host with --nnodes 2 --node-rank R --store, as on a cluster.
// Needs root and libfabric; elsewhere skipped with one line saying why.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { fileURLToPath } from 'node:url';
import { readFileSync, rmSync } from 'node:fs';
import { spawnSync, type ChildProcess } from 'node:child_process';
import { EmulatedHosts } from '../../harness/emulated-hosts.js';
import { startRedisOn } from '../../harness/host-jobs.js';

const BENCH = fileURLToPath(new URL('../../bench/kv/index.js', import.meta.url));
const hasOfi = (await import('../../src/native/binding.js')).native.ofi.available;
const why = EmulatedHosts.unavailable() ?? (hasOfi ? undefined : 'jobs across hosts need libfabric (apt-get install libfabric-dev, then npm rebuild)');

if (why) {
  console.log(`kv-hosts.test: skipped: ${why}`);
} else {
  let hosts: EmulatedHosts;
  let redis: Awaited<ReturnType<typeof startRedisOn>>;
  test.before(async () => {
    hosts = await EmulatedHosts.create(2);
    redis = await startRedisOn(hosts, 0);
  });
  test.after(async () => {
    await hosts?.destroy();
    const left = EmulatedHosts.leftovers();
    if (left.length) throw new Error(`emulated hosts left namespaces behind: ${left.join(', ')}`);
  });

  /**
   * `weft bench kv` on host `h` with `args` (after the store's), output into `outs[h]`;
   * resolves with its exit code (SIGKILLed as a group after `killAfterMs`).
   */
  function benchOn(h: number, args: string[], outs: string[], killAfterMs: number): { child: ChildProcess; exit: Promise<number | null> } {
    const all = [BENCH, '--nnodes', '2', '--node-rank', String(h), '--store', redis.url, '--json', '--peers', 'none', ...args];
    // Both hosts share this machine's cores: say so, so the ranks know they are oversubscribed.
    const child = hosts.spawn(h, process.execPath, all, { env: { ...process.env, WEFT_STORE_PASSWORD: redis.password, WEFT_CORES: '2' } });
    child.stdout!.on('data', (d) => (outs[h] += d));
    child.stderr!.on('data', (d) => (outs[h] += d));
    const exit = new Promise<number | null>((resolve) => {
      const timer = setTimeout(() => process.kill(-child.pid!, 'SIGKILL'), killAfterMs);
      child.on('exit', (code) => {
        clearTimeout(timer);
        resolve(code);
      });
    });
    return { child, exit };
  }

  test('benchkv on 2 hosts x 2 ranks: meta, delegation and direct with --verify clean', async () => {
    const outs = ['', ''];
    const codes = await Promise.all([0, 1].map((h) => benchOn(h, ['--ranks', '2', '--prefix', 'kvhosts', '--quick', '--duration', '0.5', '--verify', '--daemons', '2', '--clients', '2', '--out', `/tmp/weft-kv-hosts-${h}`], outs, 300_000).exit));
    for (const h of [0, 1]) rmSync(`/tmp/weft-kv-hosts-${h}`, { recursive: true, force: true });
    const all = outs.map((o, i) => `--- host ${i} ---\n${o}`).join('\n');
    assert.equal(codes, [0, 0], all.slice(-4000));
    const rows = outs[0].split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));
    assert.equal(rows.map((r) => r.system), ['meta', 'delegation', 'direct'], all.slice(-4000));
    for (const r of rows) {
      assert.is(r.hosts, 2);
      assert.is(r.ranks, 4);
      assert.is(r.fabric, 'shm+ofi', 'shared memory inside a host, libfabric between hosts');
      assert.is(r.mismatches, 0, r.system);
      assert.ok(r.mops > 0, `${r.system}: no request completed in the measured run (${JSON.stringify(r).slice(0, 600)})`);
    }
  });

  test('a host that dies mid-run: the other host ends the run within its peer timeout, naming the dead rank', async () => {
    // libfabric's rxm neither completes nor fails a call toward a process that died on another
    // host: without the engine's peer timeout, rank 0's clients waited for their answers until
    // the run's end and then the drain timeout, and the error named nobody.
    const outs = ['', ''];
    const runs = [0, 1].map((h) => benchOn(h, ['--ranks', '1', '--prefix', 'kvkill', '--backends', 'delegation', '--duration', '30', '--runs', '1', '--warmup', '0.1', '--timeout-ms', '8000', '--out', `/tmp/weft-kv-kill-${h}`], outs, 120_000));
    const children = runs.map((r) => r.child);
    const exits = runs.map((r) => r.exit);
    // Host 1 dies (bench, launcher and rank: one process group) in the middle of the measured
    // run, where rank 0's main thread sleeps and only its threads' copyrpc calls can notice:
    // 4 s after its rank has used 3 s of CPU (set-up takes less; then the warm-up lasts 0.1 s
    // and at most 3 s more until steady, and the run 30 s).
    // The rank's process: its command line starts with the script (the launcher's names it later).
    const rankOf1 = () => spawnSync('pgrep', ['-g', String(children[1].pid), '-f', '^[^ ]+ [^ ]*kv/rank\\.js'], { encoding: 'utf8' }).stdout.trim().split('\n')[0];
    const ticks = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout) || 100;
    const cpuSeconds = (pid: string) => {
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
        const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
        return (Number(f[11]) + Number(f[12])) / ticks; // utime + stime
      } catch {
        return 0;
      }
    };
    const t0 = performance.now();
    for (;;) {
      const pid = rankOf1();
      if (pid && cpuSeconds(pid) >= 3) break;
      assert.ok(performance.now() - t0 < 90_000, `host 1's rank never got going:\n${outs[1].slice(-2000)}\n--- host 0 ---\n${outs[0].slice(-2000)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    await new Promise((r) => setTimeout(r, 4000));
    const killedAt = performance.now();
    try {
      process.kill(-children[1].pid!, 'SIGKILL');
    } catch (err) {
      assert.unreachable(`host 1 ended before it was killed (${(err as Error).message}):\n${outs[1].slice(-3000)}\n--- host 0 ---\n${outs[0].slice(-2000)}`);
    }
    const code0 = await exits[0];
    const took = performance.now() - killedAt;
    await exits[1];
    for (const h of [0, 1]) rmSync(`/tmp/weft-kv-kill-${h}`, { recursive: true, force: true });
    assert.is.not(code0, 0, outs[0].slice(-3000));
    // A thread's copyrpc call names the dead thread: its probe went unanswered for the peer
    // timeout (4 s here), or, when rxm saw the connection reset, the probe failed at once.
    assert.match(outs[0], /rank 0 (daemon|client) \d failed: .*a copyrpc call to rank 1 (daemon|client) \d failed: .*rank 1 (daemon|client) \d at [\d.]+:\d+ (has not answered the fabric for \d+ ms|is unreachable)/, outs[0].slice(-3000));
    // The run was to last 30 s more: a bound on the failure's reach, not a speed.
    assert.ok(took < 25_000, `host 0 ended ${Math.round(took)} ms after host 1 died:\n${outs[0].slice(-3000)}`);
  });
}

test.run();
