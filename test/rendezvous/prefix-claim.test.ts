/**
 * One prefix, one job: `weft run` on a shared store claims its prefix before it starts a
 * rank. A second job with the same prefix stops at once with EEXIST naming the holder, before
 * any of its ranks runs (they used to connect to the first job's ranks, then both jobs failed);
 * a failed job's keys are removed when it ends (they blocked the prefix for 24 hours); and a
 * claim whose launcher was SIGKILLed is taken over by the next job. Launchers of a job on
 * several hosts (here all on this machine) join through a handshake: the same command runs
 * again after a failed job, a dead launcher's entry is not taken for a live one, launchers
 * that disagree stop at once, and Ctrl-C while joining releases the claim. FileStore, and
 * Redis when the suite has a redis-server.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { openStore } from '../../src/rendezvous/open.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const WEFT = path.join(root, 'bin', 'weft.js');
const RANK = path.join(root, 'test', 'rendezvous', 'workers', 'mesh-rank.mjs');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Job {
  child: ChildProcess;
  out: () => string;
  exit: Promise<number | null>;
}

function start(store: string, prefix: string, ...args: string[]): Job {
  const child = spawn(process.execPath, [WEFT, 'run', '-n', '2', '--store', store, '--prefix', prefix, RANK, ...args], { env: { ...process.env, NO_COLOR: '1' }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  const guard = setTimeout(() => child.kill('SIGKILL'), 60_000);
  const exit = new Promise<number | null>((r) => child.on('exit', (code) => (clearTimeout(guard), r(code))));
  return { child, out: () => out, exit };
}

/** Keys under `prefix` (and its claims) in the store. */
async function keys(store: string, prefix: string): Promise<string[]> {
  const s = await openStore(store, { timeoutMs: 5000 });
  try {
    const found: string[] = [];
    for (const k of ['mesh/0', 'mesh/1', '_world', 'mesh/connected/0', 'mesh/connected/1']) {
      if (await s.get(`${prefix}/${k}`, { timeoutMs: 0 }).then(() => true, () => false)) found.push(`${prefix}/${k}`);
    }
    for (const k of ['0']) if (await s.get(`${prefix}.launcher/${k}`, { timeoutMs: 0 }).then(() => true, () => false)) found.push(`${prefix}.launcher/${k}`);
    return found;
  } finally {
    await s.close();
  }
}

/** Until both ranks of `job` have joined: their mesh keys are in the store (mesh-rank prints nothing before it hangs). */
async function waitForRanks(job: Job, store: string, prefix: string): Promise<void> {
  const want = [`${prefix}/mesh/0`, `${prefix}/mesh/1`];
  for (let i = 0; i < 200; i++) {
    const have = await keys(store, prefix);
    if (want.every((k) => have.includes(k))) return;
    await sleep(50);
  }
  throw new Error(`the ranks of the first job did not join within 10 s:\n${job.out()}`);
}

/** One launcher of a job on `nnodes` hosts (all on this machine: its ranks share memory). */
function startNode(store: string, prefix: string, nnodes: number, nodeRank: number, ...args: string[]): Job {
  const child = spawn(process.execPath, [WEFT, 'run', '-n', '1', '--nnodes', String(nnodes), '--node-rank', String(nodeRank), '--join-timeout', '20', '--store', store, '--prefix', prefix, RANK, ...args], { env: { ...process.env, NO_COLOR: '1' }, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  const guard = setTimeout(() => process.kill(-child.pid!, 'SIGKILL'), 60_000);
  const exit = new Promise<number | null>((r) => child.on('exit', (code) => (clearTimeout(guard), r(code))));
  return { child, out: () => out, exit };
}

async function both(a: Job, b: Job): Promise<[number | null, number | null]> {
  return [await a.exit, await b.exit];
}

function stores(): [string, () => void][] {
  const dir = mkdtempSync(path.join(tmpdir(), 'weft-claim-'));
  const out: [string, () => void][] = [[`file://${dir}`, () => rmSync(dir, { recursive: true, force: true })]];
  if (process.env.WEFT_TEST_REDIS_URL) out.push([process.env.WEFT_TEST_REDIS_URL, () => {}]);
  return out;
}

const all = stores();
for (const [store, cleanup] of all) {
  const kind = store.split(':')[0];
  // Launchers on several hosts: the same handshake over every store; the last store (Redis when
  // the suite has one, the store of clusters) runs those cases.
  const several = store === all[all.length - 1][0];
  test(`${kind}: a second job with the same prefix stops before any rank runs; the first job's keys go when it fails`, async () => {
    const prefix = `claim-${process.pid}-${kind}`;
    const a = start(store, prefix, '-1', 'hang');
    try {
      await waitForRanks(a, store, prefix);
      const b = start(store, prefix);
      const code = await b.exit;
      assert.is.not(code, 0, `the second job ran:\n${b.out()}`);
      assert.match(b.out(), new RegExp(`prefix '${prefix}' \\(node rank 0\\) is in use .* by the launcher pid ${a.child.pid}`));
      assert.not.match(b.out(), /\[rank \d\]/, `the second job started ranks:\n${b.out()}`);
      assert.ok((await keys(store, prefix)).includes(`${prefix}/mesh/0`), 'the first job lost its keys');
    } finally {
      a.child.kill('SIGTERM');
      await a.exit;
    }
    assert.equal(await keys(store, prefix), [], 'the failed job left keys');
    const c = start(store, prefix);
    assert.is(await c.exit, 0, `a job with the freed prefix failed:\n${c.out()}`);
  });

  if (several) test(`${kind}: a job on two hosts that failed leaves its prefix usable: the same command runs again at once`, async () => {
    const prefix = `claim-hosts-${process.pid}-${kind}`;
    // Rank 1 fails once both have connected; node 0 is stopped then (its rank would wait out
    // its 20 s timeout): the job failed with its keys in the store.
    const a0 = startNode(store, prefix, 2, 0, '1');
    const a1 = startNode(store, prefix, 2, 1, '1');
    assert.is.not(await a1.exit, 0, `the failing rank succeeded:\n${a1.out()}`);
    a0.child.kill('SIGTERM');
    assert.is.not(await a0.exit, 0);
    assert.ok((await keys(store, prefix)).includes(`${prefix}/mesh/0`), 'the failed job left no keys: this test tests nothing');
    const b0 = startNode(store, prefix, 2, 0);
    const b1 = startNode(store, prefix, 2, 1);
    const codes = await both(b0, b1);
    assert.equal(codes, [0, 0], `the job after a failed one failed:\n${b0.out()}\n${b1.out()}`);
    assert.match(b0.out(), /ok rank 0 heard 1/);
  });

  if (several) test(`${kind}: a host whose launcher was SIGKILLed joins the next job late (with other arguments): the job waits for it instead of starting with the dead one's count or taking its entry for a second job's`, async () => {
    const prefix = `claim-hosts-killed-${process.pid}-${kind}`;
    const a0 = startNode(store, prefix, 2, 0, '-1', 'hang');
    const a1 = startNode(store, prefix, 2, 1, '-1', 'hang');
    await waitForRanks(a0, store, prefix);
    process.kill(-a1.child.pid!, 'SIGKILL');
    await a1.exit;
    a0.child.kill('SIGTERM');
    await a0.exit;
    // Node 0 of the next job starts first and finds node 1's entry of the dead job.
    const b0 = startNode(store, prefix, 2, 0);
    await sleep(1500);
    const b1 = startNode(store, prefix, 2, 1);
    const codes = await both(b0, b1);
    assert.equal(codes, [0, 0], `the next job failed:\n${b0.out()}\n${b1.out()}`);
  });

  if (several) test(`${kind}: a launcher that acknowledged the layout and left before the start is not counted: the job waits for the one that replaces it`, async () => {
    const prefix = `claim-left-${process.pid}-${kind}`;
    const s = await openStore(store, { timeoutMs: 5000 });
    const enc = (v: unknown) => new TextEncoder().encode(JSON.stringify(v));
    try {
      // Node 2's entry is a launcher's that never acknowledges (written here, as the protocol
      // has it): node 0 waits at node 2 with node 1's acknowledgement behind it.
      const argv = createHash('sha256').update(JSON.stringify([path.basename(RANK)])).digest('hex').slice(0, 16);
      await s.set(`${prefix}.launcher/join/2`, enc({ nonce: 'feedfacefeedface', ranks: 1, nnodes: 3, script: path.basename(RANK), argv, host: 'elsewhere', pid: 1 }));
      const a0 = startNode(store, prefix, 3, 0);
      const a1 = startNode(store, prefix, 3, 1);
      await s.get(`${prefix}.launcher/ack/1`, { timeoutMs: 20_000 });
      // Node 0 polls at least every 100 ms: by now it has seen node 1's acknowledgement.
      await sleep(1000);
      a1.child.kill('SIGINT');
      assert.is(await a1.exit, 130, a1.out());
      // Now node 2 acknowledges: every node has, but node 1's launcher is gone.
      const layout = JSON.parse(new TextDecoder().decode(await s.get(`${prefix}.launcher/layout`, { timeoutMs: 0 })));
      await s.set(`${prefix}.launcher/ack/2`, new TextEncoder().encode(layout.instance));
      await sleep(1000);
      const b1 = startNode(store, prefix, 3, 1);
      const b2 = startNode(store, prefix, 3, 2);
      const codes = [await a0.exit, await b1.exit, await b2.exit];
      assert.equal(codes, [0, 0, 0], `${a0.out()}\n${b1.out()}\n${b2.out()}`);
      assert.match(a0.out(), /ok rank 0 heard 1,2/);
    } finally {
      await s.close();
    }
  });

  if (several) test(`${kind}: launchers that disagree on --nnodes (two jobs on one prefix) both stop at once, naming the other`, async () => {
    const prefix = `claim-mismatch-${process.pid}-${kind}`;
    const t0 = performance.now();
    const a = startNode(store, prefix, 2, 0);
    const b = startNode(store, prefix, 3, 1);
    const codes = await both(a, b);
    assert.ok(codes[0] !== 0 && codes[1] !== 0, `${a.out()}\n${b.out()}`);
    assert.ok(performance.now() - t0 < 15_000, 'they waited out the join timeout');
    for (const j of [a, b]) assert.match(j.out(), /--nnodes 2.*--nnodes 3|--nnodes 3.*--nnodes 2/, j.out());
    assert.not.match(a.out() + b.out(), /\[rank \d\]/, 'ranks started');
  });

  if (several) test(`${kind}: a launcher with a wider --nnodes than a running job on its prefix stops at once, naming node 0 and the job's host count`, async () => {
    const prefix = `claim-wider-${process.pid}-${kind}`;
    const a0 = startNode(store, prefix, 2, 0, '-1', 'hang');
    const a1 = startNode(store, prefix, 2, 1, '-1', 'hang');
    try {
      await waitForRanks(a0, store, prefix);
      // Waiting out the join timeout instead would end with node 0 "did not start the job".
      const b = startNode(store, prefix, 3, 2);
      assert.is.not(await b.exit, 0, b.out());
      assert.match(b.out(), new RegExp(`node 2: node 0 \\(.*, pid \\d+\\) runs .* with --nnodes 2 on this prefix, started without this launcher \\(--nnodes 3\\)`), b.out());
      assert.not.match(b.out(), /\[rank \d\]/, 'ranks started');
    } finally {
      for (const j of [a0, a1]) process.kill(-j.child.pid!, 'SIGTERM');
      await both(a0, a1);
    }
  });

  if (several) test(`${kind}: Ctrl-C while a launcher waits for the other hosts: it exits 130 at once and releases its claim`, async () => {
    const prefix = `claim-interrupt-${process.pid}-${kind}`;
    const a = startNode(store, prefix, 2, 0);
    for (let i = 0; i < 100 && !(await keys(store, prefix)).includes(`${prefix}.launcher/0`); i++) await sleep(50);
    assert.ok((await keys(store, prefix)).includes(`${prefix}.launcher/0`), `the launcher never claimed:\n${a.out()}`);
    const t0 = performance.now();
    a.child.kill('SIGINT');
    assert.is(await a.exit, 130, a.out());
    assert.ok(performance.now() - t0 < 5000, 'it waited out the join');
    assert.match(a.out(), /interrupted by SIGINT while joining the other hosts/);
    assert.equal(await keys(store, prefix), [], 'the claim stayed');
  });

  test(`${kind}: the claim of a SIGKILLed launcher is taken over by the next job`, async () => {
    const prefix = `claim-killed-${process.pid}-${kind}`;
    const a = start(store, prefix, '-1', 'hang');
    await waitForRanks(a, store, prefix);
    a.child.kill('SIGKILL');
    await a.exit;
    // Its ranks see the launcher gone and exit (their event loop turns: within a second).
    await sleep(1500);
    const c = start(store, prefix);
    assert.is(await c.exit, 0, `the next job with that prefix failed:\n${c.out()}`);
    assert.equal(await keys(store, prefix), []);
    cleanup();
  });
}

test.run();
