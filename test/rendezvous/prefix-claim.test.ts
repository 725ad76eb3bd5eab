/**
 * One prefix, one job: `weft run` on a shared store claims its prefix before it starts a
 * rank. A second job with the same prefix stops at once with EEXIST naming the holder, before
 * any of its ranks runs (they used to connect to the first job's ranks, then both jobs failed);
 * a failed job's keys are removed when it ends (they blocked the prefix for 24 hours); and a
 * claim whose launcher was SIGKILLed is taken over by the next job. FileStore, and Redis when
 * the suite has a redis-server.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, type ChildProcess } from 'node:child_process';
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

function stores(): [string, () => void][] {
  const dir = mkdtempSync(path.join(tmpdir(), 'weft-claim-'));
  const out: [string, () => void][] = [[`file://${dir}`, () => rmSync(dir, { recursive: true, force: true })]];
  if (process.env.WEFT_TEST_REDIS_URL) out.push([process.env.WEFT_TEST_REDIS_URL, () => {}]);
  return out;
}

for (const [store, cleanup] of stores()) {
  const kind = store.split(':')[0];
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
