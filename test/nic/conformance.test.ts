/**
 * NIC conformance: every case runs against every provider built here, with peers in separate
 * real processes (test/nic/workers/conformance-worker.ts). Same expectations for shm and ofi.
 */
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { native } from '../../src/native/binding.js';
import { listSegments, parseSegmentName } from '../../src/nic/index.js';
import { runScenario as run, type RunOptions, type ScenarioRun } from '../../harness/local-group.js';

const WORKER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'workers', 'conformance-worker.js');

/** Runs a conformance scenario in N processes. */
function runScenario(scenario: string, opts: Omit<RunOptions, 'worker'>): Promise<ScenarioRun> {
  return run(scenario, { ...opts, worker: WORKER });
}

const providers = ['shm'];
if (native.ofi.available) providers.push('ofi');

const soak = process.env.WEFT_SOAK === '1';

for (const provider of providers) {
  const test = suite(`nic conformance (${provider})`);

  test('100,000 WRITE_IMMs of random sizes and immediates arrive in order, every byte checked', async () => {
    const count = soak ? 1_000_000 : 100_000;
    const { results } = await runScenario('stream', { n: 2, provider, args: { count }, timeoutMs: 300_000 });
    const [sender, receiver] = results as [{ sent: number }, { received: number; errors: string[] }];
    assert.is(sender.sent, count);
    assert.equal(receiver.errors, []);
    assert.is(receiver.received, count);
  });

  test('READ of a peer counter while the peer is busy', async () => {
    const { results } = await runScenario('read', { n: 2, provider, args: { mode: 'busy' } });
    const r = results[0] as { reads: number; distinct: number; monotonic: boolean };
    assert.ok(r.reads >= 50, `only ${r.reads} reads completed`);
    assert.ok(r.distinct >= 2, 'the counter never changed between reads');
    assert.ok(r.monotonic, 'read values went backwards');
  });

  if (provider === 'shm') {
    test('READ of a peer counter while the peer sleeps (one-sided)', async () => {
      const { results } = await runScenario('read', { n: 2, provider, args: { mode: 'sleep', sleepMs: 1500 } });
      const r = results[0] as { reads: number; distinct: number; first: number };
      assert.ok(r.reads >= 50, `only ${r.reads} reads completed while the target slept`);
      assert.is(r.distinct, 1);
      assert.is(r.first, 12345);
    });
  }

  test('bad key and out-of-bounds access: error completion at the initiator, target memory unchanged', async () => {
    // Descriptors keep the key at byte 48 (shm) or 64 (ofi), see docs/wire-format.md; flipping it forges a key.
    const forgedKeyOffset = provider === 'shm' ? 48 : 64;
    const { results } = await runScenario('access', { n: 2, provider, args: { forgedKeyOffset } });
    const [init, target] = results as [{ outcomes: Record<string, string> }, { untouched: boolean }];
    const names = Object.keys(init.outcomes);
    assert.ok(names.length >= 5);
    for (const name of names) {
      assert.match(init.outcomes[name], /^REMOTE_ACCESS: rank 0: .* toward rank 1/, `${name}: ${init.outcomes[name]}`);
    }
    assert.ok(target.untouched, 'target memory changed after refused accesses');
  });

  test('back-pressure with 4 receive credits: nothing lost, nothing duplicated', async () => {
    const { results } = await runScenario('backpressure', { n: 2, provider, args: { count: 2000 } });
    const [sender, receiver] = results as [{ maxPending: number }, { received: number; wrong: number; extra: number }];
    assert.ok(sender.maxPending > 0, 'the sender never had to wait: back-pressure was not exercised');
    assert.is(receiver.received, 2000);
    assert.is(receiver.wrong, 0);
    assert.is(receiver.extra, 0);
  });

  test('a receiver blocked in waitSync is woken by every write (and by credit waiters)', async () => {
    const { results } = await runScenario('backpressure', { n: 2, provider, args: { count: 500, sync: true } });
    const receiver = results[1] as { received: number; wrong: number; extra: number };
    assert.is(receiver.received, 500);
    assert.is(receiver.wrong, 0);
    assert.is(receiver.extra, 0);
  });

  test('4 processes in a full mesh, one CQ each, traffic from all peers at once', async () => {
    const count = soak ? 20_000 : 2000;
    const { results } = await runScenario('mesh4', { n: 4, provider, args: { count }, timeoutMs: 120_000 });
    for (const [rank, r] of (results as { received: number; wrong: number }[]).entries()) {
      assert.is(r.wrong, 0, `rank ${rank} saw misordered or corrupt messages`);
      assert.is(r.received, count * 3, `rank ${rank} received ${r.received}`);
    }
  });

  test('SIGKILLed peer: pending and new operations fail naming it; its segments are swept', async () => {
    let victimPid = 0;
    let victimReady = false;
    let survivorReady = false;
    const { results } = await runScenario('kill', {
      n: 2,
      provider,
      args: { opTimeoutMs: 10_000 },
      mayDie: [1],
      onEvent: (_rank, event, children) => {
        // Kill rank 1 once it is idle and rank 0 has connected and queued work toward it.
        if (event === 'kill-me') victimReady = true;
        if (event === 'posted') survivorReady = true;
        if (victimReady && survivorReady && !victimPid) {
          victimPid = children[1].pid ?? 0;
          children[1].kill('SIGKILL');
        }
      },
    });
    const r = results[0] as { pendingBefore: number; failures: string[]; qpEvent: string; late: string; detectMs: number; state: string };
    assert.ok(r.pendingBefore > 0, 'no operation was pending when the peer died');
    assert.is(r.failures.length, r.pendingBefore);
    for (const f of r.failures) assert.match(f, /^(PEER_DEAD|TRANSPORT|TIMEOUT): rank 0: .*rank 1/);
    assert.match(r.qpEvent, /rank 1/);
    assert.match(r.late, /^(PEER_DEAD|TRANSPORT|TIMEOUT): .*rank 1/);
    assert.ok(r.detectMs < 10_000, `detected after ${r.detectMs} ms, beyond the 10 s operation timeout`);
    assert.is(r.state, 'error');
    const leftovers = listSegments().filter((s) => parseSegmentName(s)?.pid === victimPid);
    assert.equal(leftovers, [], 'the dead peer\'s segments were not swept');
  });

  if (provider === 'shm') {
    test('a producer killed between reserving and committing a ring slot does not block the others', async () => {
      const { results } = await runScenario('hole', {
        n: 3,
        provider,
        mayDie: [1],
        timeoutMs: 30_000,
        onEvent: (rank, event, children) => event === 'kill-me' && children[rank].kill('SIGKILL'),
      });
      const r = results[0] as { got: boolean; sawDeath: boolean; ms: number };
      assert.ok(r.got, 'the live peer\'s message never arrived');
      assert.ok(r.sawDeath, 'the dead peer was not reported');
    });
  }

  test.run();
}
