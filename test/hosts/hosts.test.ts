// Jobs that span hosts, on hosts emulated with network namespaces (harness/emulated-hosts.ts):
// each host has its own hostname, its own /dev/shm and one address on a shared link. Inside a
// host ranks talk over shared memory, between hosts over libfabric (tcp), in one job: nothing
// here sets WEFT_PROVIDER. Needs root; elsewhere every case is skipped with one line saying why.
// WEFT_SOAK=1 runs the collectives at their full large size (1 MiB + 3 elements).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { EmulatedHosts, cpuList, hostCpus } from '../../harness/emulated-hosts.js';
import { runOnHosts, startRedisOn, type HostStore } from '../../harness/host-jobs.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const COLLECTIVES = path.resolve(here, '..', 'collectives', 'workers', 'collectives-rank.js');
const HOSTS_RANK = path.join(here, 'workers', 'hosts-rank.js');
const RPC = path.resolve(here, '..', 'rpc', 'workers', 'shared-device.js');
const soak = process.env.WEFT_SOAK === '1';
const hasOfi = (await import('../../src/native/binding.js')).native.ofi.available;
const why = EmulatedHosts.unavailable() ?? (hasOfi ? undefined : 'jobs across hosts need libfabric (apt-get install libfabric-dev, then npm rebuild)');

if (why) {
  console.log(`hosts.test: skipped: ${why}`);
} else {
  let hosts: EmulatedHosts;
  let redis: HostStore;
  test.before(async () => {
    hosts = await EmulatedHosts.create(3);
    redis = await startRedisOn(hosts, 0);
  });
  test.after(async () => {
    await hosts?.destroy();
    const left = EmulatedHosts.leftovers();
    if (left.length) throw new Error(`emulated hosts left namespaces behind: ${left.join(', ')}`);
  });

  test('emulated hosts with cores of their own: every process on a host runs on its share of the cores (and an rsh agent passes it on)', async () => {
    assert.equal([0, 1].map((i) => hostCpus(i, 2, [0, 1])), [[0], [1]]);
    assert.equal([0, 1, 2].map((i) => hostCpus(i, 3, [0, 1])), [[0], [1], [0]]);
    assert.equal([0, 1].map((i) => hostCpus(i, 2, [4, 5, 6, 7])), [[4, 5], [6, 7]]);
    assert.equal([0, 1, 2].map((i) => hostCpus(i, 3, [0, 1, 2, 3, 4, 5, 6, 7])), [[0, 1], [2, 3, 4], [5, 6, 7]]);
    assert.equal(cpuList('0-3,8'), [0, 1, 2, 3, 8]);
    assert.equal(cpuList('Name:\tnode\nCpus_allowed_list:\t1\n'), [1]);
    const own = await EmulatedHosts.create(2, { ownCores: true });
    try {
      // The kernel writes the list in ranges ("0-1,4"): compare the cores themselves.
      const allowed = (argv: string[]) => cpuList(spawnSync(argv[0], argv.slice(1), { encoding: 'utf8' }).stdout);
      for (const host of own.hosts) {
        const mine = (host.cpus ?? '').split(',').map(Number);
        assert.is(mine.length, host.cpuCount);
        assert.equal(allowed(own.argv(host.index, 'cat', ['/proc/self/status'])), mine);
        assert.equal(allowed([own.rshAgent(), host.hostname, 'cat', '/proc/self/status']), mine);
      }
    } finally {
      await own.destroy();
    }
  });

  const secret = randomBytes(16).toString('hex');
  const master = (): HostStore => ({ kind: 'master', host: 0, port: 29400 + Math.floor(Math.random() * 500), secret });
  const big: Record<string, string> = soak ? {} : { WEFT_TEST_BIG: '70001' };

  test('2 hosts x 2 ranks over Redis: local ranks, host names, a device that mixes shm and the fabric, and non-leaders that leave the fabric to their leader (1,000 small allreduces, 1,000 small and 300 larger broadcasts; 1 MiB allreduces on hosts with a core per rank and with one core)', async () => {
    // A core per rank first, then one per host (oversubscribed). The emulated hosts share the
    // machine's cores; WEFT_CORES says how many each may use.
    for (const cores of ['2', '1']) {
      const r = await runOnHosts(hosts, { perHost: [2, 2], script: HOSTS_RANK, args: ['near'], store: redis, env: { WEFT_CORES: cores }, timeoutMs: 120_000 });
      assert.equal(r.codes.slice(0, 2), [0, 0], r.out.slice(-3000));
      for (let k = 0; k < 4; k++) {
        const info = JSON.parse(new RegExp(`info rank ${k}: (\\{.*\\})`).exec(r.out)?.[1] ?? 'null');
        assert.ok(info, r.out.slice(-3000));
        assert.is(info.localRank, k % 2);
        assert.is(info.localSize, 2);
        assert.equal(info.hosts, ['weft-h0', 'weft-h0', 'weft-h1', 'weft-h1']);
        assert.match(info.provider, /^shm\+ofi:/);
        // A hierarchical broadcast's non-leaders take the data from their leader only, over
        // shared memory; reading the fabric there costs a system call per poll (tcp;ofi_rxm's
        // progress) and found nothing. They read it only while it has work of theirs, or now and then.
        const m = new RegExp(`near rank ${k} \\(local (\\d)\\): wrong (\\d+), fabric skips (\\d+), chunks sent to the other host in 1000 small allreduces (\\d+), in 1000 small broadcasts (\\d+), in 20 allreduces of 1 MiB (\\d+)`).exec(r.out);
        assert.ok(m, r.out.slice(-3000));
        assert.is(Number(m![2]), 0, `rank ${k}: wrong sums`);
        if (m![1] === '1') assert.ok(Number(m![3]) > 0, `rank ${k} (not a leader) read the fabric on every poll in broadcasts past the board: ${m![0]}`);
        // In a small allreduce only the leaders cross the network; the others wait on the host
        // board. In a small broadcast from rank 0, only rank 0 sends across.
        assert.is(Number(m![4]), m![1] === '0' ? 1000 : 0, `rank ${k}: ${m![0]}`);
        assert.is(Number(m![5]), k === 0 ? 1000 : 0, `rank ${k}: ${m![0]}`);
        // 1 MiB: every local rank crosses with its half on hosts with a core per rank; with one
        // core per host, the leader alone with the whole array.
        const large = Number(m![6]);
        if (cores === '2' || m![1] === '0') assert.ok(large >= 20, `rank ${k} (WEFT_CORES ${cores}): ${m![0]}`);
        else assert.is(large, 0, `rank ${k} (WEFT_CORES 1): ${m![0]}`);
      }
      assert.not.match(r.out, /leaked in \/dev\/shm/);
    }
  });

  test('a barrier across hosts lets no rank leave before the last one arrived: 2 hosts x 2 ranks (host board, then the same local rank of every host) and 3 hosts x {1, 2, 1} (host board, leaders, host)', async () => {
    for (const perHost of [[2, 2], [1, 2, 1]]) {
      const r = await runOnHosts(hosts, { perHost, script: HOSTS_RANK, args: ['fence'], store: master(), timeoutMs: 60_000 });
      assert.ok(r.codes.every((c) => c === 0), r.out.slice(-3000));
      for (let k = 0; k < 4; k++) assert.match(r.out, new RegExp(`fence rank ${k}: 40 barriers, left early 0\\b`), `${perHost}: ${r.out.slice(-3000)}`);
    }
  });

  test('ten jobs in a row close without waiting out their close timeout (a close over the fabric lost its last message in about 1 job of 3)', async () => {
    const r = await runOnHosts(hosts, { perHost: [2, 2], script: HOSTS_RANK, args: ['closes'], store: master(), timeoutMs: 100_000 });
    assert.equal(r.codes.slice(0, 2), [0, 0], r.out.slice(-3000));
    for (let k = 0; k < 4; k++) assert.match(r.out, new RegExp(`closes rank ${k}: 10 jobs`), r.out.slice(-3000));
    assert.not.match(r.out, /leaked in \/dev\/shm/);
  });

  test('a rank that closed its context early does not hold back the others: the fabric refuses the probe toward it for good, and their messages go past it (3 hosts x 1 rank)', async () => {
    const r = await runOnHosts(hosts, { perHost: [1, 1, 1], script: HOSTS_RANK, args: ['leaver'], store: master(), timeoutMs: 60_000 });
    assert.equal(r.codes, [0, 0, 0], r.out.slice(-3000));
    for (const k of [0, 1]) assert.match(r.out, new RegExp(`leaver rank ${k}: \\d+ round trips`), r.out.slice(-3000));
  });

  test(`every collective against its reference, 2 hosts x 2 ranks over Redis${soak ? '' : ' (large size 70001)'}`, async () => {
    const r = await runOnHosts(hosts, { perHost: [2, 2], script: COLLECTIVES, args: ['matrix'], store: redis, env: big, timeoutMs: 600_000 });
    assert.equal(r.codes.slice(0, 2), [0, 0], r.out.slice(-3000));
    for (let k = 0; k < 4; k++) assert.match(r.out, new RegExp(`ok rank ${k}: \\d+ checks`));
    assert.not.match(r.out, /leaked in \/dev\/shm/);
  });

  test('ctx.alloc arrays across hosts: the hierarchical allreduce reads them in place inside a host (every dtype, in and out of place, ops, views, a heap array on one host, a barrier made mid-call), every local rank crossing (2 x 2, a core per rank) or the leader alone (2 x 2 on one core per host; 3 hosts x {1, 2, 1}); the other collectives over them', async () => {
    const runs: [number[], string, string][] = [
      [[2, 2], '2', 'hostshared'],
      [[2, 2], '1', 'hostshared'],
      [[1, 2, 1], '2', 'hostshared'],
      [[2, 2], '2', 'registered'],
    ];
    for (const [perHost, cores, mode] of runs) {
      const what = `${mode} on ${perHost.join('+')} ranks, WEFT_CORES ${cores}`;
      const r = await runOnHosts(hosts, { perHost, script: COLLECTIVES, args: [mode], store: master(), env: { ...big, WEFT_CORES: cores }, timeoutMs: 300_000 });
      assert.ok(r.codes.every((c) => c === 0), `${what}: ${r.out.slice(-3000)}`);
      for (let k = 0; k < 4; k++) assert.match(r.out, new RegExp(`ok rank ${k}: \\d+ checks`), `${what}: ${r.out.slice(-3000)}`);
      assert.not.match(r.out, /leaked in \/dev\/shm/);
    }
  });

  // 3 hosts with the whole matrix in the soak run (npm test's budget); npm test runs the
  // subgroups below on the same 3 hosts and the same launcher-hosted TcpStore.
  if (soak) test('every collective against its reference, 3 hosts x {1, 2, 1} ranks over a launcher-hosted TcpStore with a secret', async () => {
    const r = await runOnHosts(hosts, { perHost: [1, 2, 1], script: COLLECTIVES, args: ['matrix'], store: master(), env: big, timeoutMs: 600_000 });
    assert.equal(r.codes, [0, 0, 0], r.out.slice(-3000));
    for (let k = 0; k < 4; k++) assert.match(r.out, new RegExp(`ok rank ${k}: \\d+ checks`));
    assert.not.match(r.out, /leaked in \/dev\/shm/);
  });

  test(`subgroups across hosts: split and newGroup run every collective, 3 hosts x {1, 2, 1} over a launcher-hosted TcpStore with a secret${soak ? '' : ' (large size 70001)'}`, async () => {
    const r = await runOnHosts(hosts, { perHost: [1, 2, 1], script: COLLECTIVES, args: ['groups'], store: master(), env: big, timeoutMs: 600_000 });
    assert.equal(r.codes, [0, 0, 0], r.out.slice(-3000));
    for (let k = 0; k < 4; k++) assert.match(r.out, new RegExp(`ok rank ${k}: \\d+ checks`));
  });

  test('copyrpc and collectives on one device across 2 hosts (2,000 requests, one-sided read)', async () => {
    const r = await runOnHosts(hosts, { perHost: [1, 1], script: RPC, store: redis, timeoutMs: 180_000 });
    assert.equal(r.codes.slice(0, 2), [0, 0], r.out.slice(-3000));
    assert.match(r.out, /ok rank 0: /);
    assert.match(r.out, /ok rank 1: /);
  });

  test('a bad argument on one rank of a hierarchical collective fails every rank at once (EINVAL), not by its timeout; so do two untagged allreduces, barriers or broadcasts at once', async () => {
    // concurrent(-barrier): a small allreduce, or a barrier, starts on the host board, which
    // queues a second call instead of refusing it; the hierarchical call holds the job's slot
    // of its collective, so the second is refused when it is made (it used to fail in its
    // fabric step, or not at all).
    for (const which of ['allgather', 'reduceScatter', 'reduceScatter-op', 'tag', 'timeoutMs', 'concurrent', 'concurrent-barrier', 'concurrent-broadcast']) {
      const r = await runOnHosts(hosts, { perHost: [2, 2], script: HOSTS_RANK, args: ['badarg', which], store: redis, timeoutMs: 60_000 });
      const lines = r.out.match(/badarg rank \d: .*/g) ?? [];
      assert.is(lines.length, 4, `${which}: ${r.out.slice(-2000)}`);
      // EINVAL on every rank is the abort; the others used to wait out the call's timeout (ETIMEDOUT).
      for (const l of lines) assert.match(l, /: EINVAL after \d+ ms/, `${which}: ${l}`);
      // Refused by the job's call itself when it was made: a refusal from the step across
      // hosts would name the subgroup ("rank R (rank x of 2 in the same local rank ...)").
      if (which.startsWith('concurrent')) {
        const name = which === 'concurrent' ? 'allreduce' : which.slice('concurrent-'.length);
        for (const l of lines) assert.match(l, new RegExp(`\\(rank \\d: ${name} \\(tag 0\\): a call of the same collective and tag is still in flight`), l);
      }
    }
  });

  test('a host late to a small allreduce: a rank that times out waiting for its leader says the leader is in the call, across hosts, not that it may be dead', async () => {
    const r = await runOnHosts(hosts, { perHost: [2, 2], script: HOSTS_RANK, args: ['stall', 'host'], store: redis, timeoutMs: 60_000 });
    const line = (k: number, out = r.out) => new RegExp(`stall rank ${k}: (.*)`).exec(out)?.[1] ?? '';
    // Rank 1 times out first, on the host board, waiting for its leader, which is in the call
    // and waits for host 1: its error says so instead of asking whether rank 0 is alive.
    assert.match(line(1), /^ETIMEDOUT after \d+ ms \(.*waiting for rank 0 \(intra-host board\); that rank is in this call \(it made an earlier board step of it\) and has not finished its work since \(when it leads this host, its step across hosts: another host may be late or gone\)/, r.out.slice(-2000));
    assert.not.match(line(1), /is that rank alive/);
    // Its leader then fails too, by the abort rank 1 sent (or its own timeout, if first).
    assert.match(line(0), /^E[A-Z]+ after \d+ ms/, r.out.slice(-2000));
    // A rank that is not in the call at all (rank 1 asleep): rank 0 still asks whether it is.
    const s = await runOnHosts(hosts, { perHost: [2, 2], script: HOSTS_RANK, args: ['stall', 'rank1'], store: redis, timeoutMs: 60_000 });
    assert.match(line(0, s.out), /^ETIMEDOUT after \d+ ms \(.*waiting for rank 1 \(intra-host board\); is that rank alive and making the same call\?\)$/, s.out.slice(-2000));
  });

  test('a blocking wait asleep on the shm doorbell wakes for a fabric completion (the relay rings it)', async () => {
    // The device sleeps on its shm futex; a message from the other host must end that sleep,
    // not wait for a 1 ms slice to end (or, before the relay, the whole slice list).
    const r = await runOnHosts(hosts, { perHost: [1, 1], script: HOSTS_RANK, args: ['wake'], store: redis, timeoutMs: 60_000 });
    assert.equal(r.codes.slice(0, 2), [0, 0], r.out.slice(-3000));
    const rounds = [...r.out.matchAll(/wake rank 0: got 42, relay rang (\d+)/g)];
    assert.ok(rounds.length >= 1, r.out.slice(-3000));
    assert.ok(Number(rounds[rounds.length - 1][1]) >= 1, `the relay never rang in ${rounds.length} rounds: ${rounds.map((m) => m[0]).join('; ')}`);
  });

  test('a TcpStore on a network address: a launcher without the secret is refused; a client with a wrong one too', async () => {
    const noSecret = await runOnHosts(hosts, { perHost: [1, 1], script: HOSTS_RANK, args: ['info'], store: { kind: 'master', host: 0, port: 29399, secret: '' }, timeoutMs: 30_000 });
    assert.equal(noSecret.codes.slice(0, 2), [1, 1], noSecret.out);
    assert.match(noSecret.outs[0], /needs a secret: set WEFT_STORE_SECRET/);
    const m = master();
    // Node 0's launcher then waits for a node that never joins: with --join-timeout 4 (not the
    // default 300 s) it fails, naming node 1.
    const wrong = await runOnHosts(hosts, { perHost: [1, 1], script: HOSTS_RANK, args: ['info'], store: m, hostEnv: { 1: { WEFT_STORE_SECRET: 'not-the-secret' } }, env: { WEFT_JOIN_TIMEOUT: '4' }, timeoutMs: 60_000 });
    assert.is(wrong.codes[1], 1, wrong.out);
    assert.match(wrong.outs[1], /secret|authenticat/i);
    assert.is(wrong.codes[0], 1, wrong.out);
    assert.match(wrong.outs[0], /the launchers of nodes 1 did not start within 4000 ms/, wrong.out);
  });

  test('a rank that publishes an address the other host cannot reach fails in init, naming both ranks, the hosts and the address', async () => {
    const r = await runOnHosts(hosts, { perHost: [1, 1], script: HOSTS_RANK, args: ['info'], store: redis, hostEnv: { 1: { WEFT_ADDR: '127.0.0.1' } }, env: { WEFT_TEST_TIMEOUT: '4000' }, timeoutMs: 60_000 });
    assert.equal(r.codes.slice(0, 2), [1, 1], r.out.slice(-3000));
    assert.match(r.out, /rank 1 \(host weft-h1, 127\.0\.0\.1\) at 127\.0\.0\.1:\d+/);
    assert.match(r.out, /rank 0 \(host weft-h0/);
    assert.not.match(r.out, /allreduce|barrier/);
  });

  test('a host killed under ep.request(): the pending requests fail naming the rank within the engine\'s peer timeout, not the request\'s 60 s', async () => {
    let victim: import('node:child_process').ChildProcess | undefined;
    let seen = '';
    const job = runOnHosts(hosts, {
      perHost: [1, 1],
      script: HOSTS_RANK,
      args: ['rpcdead'],
      store: redis,
      timeoutMs: 90_000,
      onStart: (host, child) => {
        if (host === 0) child.stdout!.on('data', (d) => (seen += d));
        else victim = child;
      },
    });
    const t0 = performance.now();
    while (performance.now() - t0 < 60_000 && !/rpc looping rank 0/.test(seen)) await new Promise((res) => setTimeout(res, 100));
    assert.match(seen, /rpc looping rank 0/, 'rank 0 never got 100 answers');
    process.kill(-(victim!.pid as number), 'SIGKILL');
    const r = await job;
    const m = /rpcdead rank 0 after (\d+) ms (\w+): (.*)/.exec(r.out);
    assert.ok(m, r.out.slice(-3000));
    // The peer timeout is 2 s; the probe runs every few hundred ms. Before the idle loop of
    // request()'s driver checked for silent peers, these requests waited out their 60 s.
    assert.ok(Number(m![1]) < 30_000, `rank 0 took ${m![1]} ms`);
    assert.match(m![2], /^(EPEERDEAD|ETRANSPORT)$/, m![0]);
    assert.match(m![3], /rank 1/, m![0]);
    assert.not.match(r.out, /leaked in \/dev\/shm/);
  });

  test('every rank of one host SIGKILLed: the ranks on the other hosts fail within their timeout, naming a rank of that host; the same job then runs again', async () => {
    const prefix = `killed-${randomBytes(4).toString('hex')}`;
    let victim: import('node:child_process').ChildProcess | undefined;
    let seen = '';
    const job = runOnHosts(hosts, {
      perHost: [2, 1, 1],
      script: HOSTS_RANK,
      args: ['loop', '50000', '5000'],
      store: redis,
      prefix,
      timeoutMs: 60_000,
      onStart: (host, child) => {
        if (host === 1) {
          victim = child;
          child.stdout!.on('data', (d) => (seen += d));
        }
      },
    });
    // Kill host 1 (its launcher and rank 2) once the job runs.
    const t0 = performance.now();
    while (performance.now() - t0 < 30_000) {
      await new Promise((res) => setTimeout(res, 100));
      if (/looping rank 2/.test(seen)) break;
    }
    process.kill(-(victim!.pid as number), 'SIGKILL');
    const r = await job;
    for (const k of [0, 1, 3]) {
      const m = new RegExp(`rank ${k} error after (\\d+) ms (\\w+): (.*)`).exec(r.out);
      assert.ok(m, r.out.slice(-3000));
      assert.ok(Number(m![1]) <= 5000 + 2000, `rank ${k} took ${m![1]} ms`);
      assert.match(m![3], /rank 2/, r.out.slice(-4000));
      // Each names itself by its job rank, also from inside the hierarchy's subgroups (whose
      // group ranks differ: rank 3 is rank 2 of the hosts' leaders).
      assert.match(m![3], new RegExp(`^rank ${k}\\b`), m![3]);
    }
    assert.not.match(r.out, /leaked in \/dev\/shm/);
    // The user runs the same command again: host 1's claim (its launcher was SIGKILLed) is taken
    // over, and the failed job's keys go once every launcher has joined (they made the ranks'
    // init fail with EEXIST for 24 hours).
    const again = await runOnHosts(hosts, { perHost: [2, 1, 1], script: HOSTS_RANK, args: ['info'], store: redis, prefix, timeoutMs: 60_000 });
    assert.equal(again.codes, [0, 0, 0], again.out.slice(-3000));
    // What the killed ranks left in host 1's /dev/shm went with the next job's sweep there.
    assert.not.match(again.out, /leaked in \/dev\/shm/, again.out.slice(-3000));
  });

  for (const [what, args] of [
    ['small allreduces (host board, leaders across, host board)', ['2', '5000', 'allreduce-only']],
    ['large in-place allreduces of ctx.alloc arrays (host board, every local rank across, host board)', ['300000', '5000', 'allreduce-only', 'alloc']],
  ] as const) test(`one rank of a host SIGKILLed in a loop of ${what}: its host peer fails naming it, and the other host with it`, async () => {
    // These allreduces wait on the host board (no messages) inside the host, so the wait there
    // must notice a dead peer of its own host by itself, as the job board does on one host. The
    // loop is allreduces only: rank 0 spends most of its time on the board or the fabric.
    let seen = '';
    const job = runOnHosts(hosts, {
      perHost: [2, 2],
      script: HOSTS_RANK,
      args: ['loop', ...args],
      store: redis,
      timeoutMs: 60_000,
      onStart: (host, child) => {
        if (host === 0) child.stdout!.on('data', (d) => (seen += d));
      },
    });
    const t0 = performance.now();
    while (performance.now() - t0 < 30_000 && !/looping rank 1/.test(seen)) await new Promise((res) => setTimeout(res, 100));
    // Rank 1 alone (not its launcher): the process whose environment says WEFT_RANK=1.
    const pids = spawnSync('pgrep', ['-f', 'hosts-rank\\.js loop'], { encoding: 'utf8' }).stdout.trim().split('\n').filter(Boolean);
    const victim = pids.find((p) => {
      try {
        return readFileSync(`/proc/${p}/environ`, 'utf8').split('\0').includes('WEFT_RANK=1');
      } catch {
        return false;
      }
    });
    assert.ok(victim, `no rank 1 among ${pids.join(', ')}:\n${seen.slice(-2000)}`);
    process.kill(Number(victim), 'SIGKILL');
    const r = await job;
    for (const k of [0, 2, 3]) {
      const m = new RegExp(`rank ${k} error after (\\d+) ms (\\w+): (.*)`).exec(r.out);
      assert.ok(m, r.out.slice(-3000));
      assert.ok(Number(m![1]) <= 5000 + 2000, `rank ${k} took ${m![1]} ms`);
      // (Not just "rank 1": rank 3 calls itself rank 1 of its subgroup.)
      assert.match(m![3], /rank 1 (died|is gone)/, m![0]);
    }
    assert.not.match(r.out, /leaked in \/dev\/shm/);
  });
}

test.run();
