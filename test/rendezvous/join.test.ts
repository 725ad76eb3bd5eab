/**
 * Ranks that cannot form a job fail together, at once, with the reason: a rank started with
 * another world size than the others (the job's first rank to arrive sets it) fails with
 * EINVAL, and it publishes why, so every other rank fails with the same code naming the same
 * cause instead of waiting out its 20 s timeout or reporting the failed rank as dead.
 * Plain processes, no launcher (the launcher gives every rank the same size).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { freePort } from '../../harness/ports.js';
import { TcpStoreServer } from '../../src/rendezvous/stores/tcp/server.js';

const RANK = path.join(path.dirname(fileURLToPath(import.meta.url)), 'workers', 'join-rank.js');

interface Outcome {
  ok?: true;
  code?: string;
  message?: string;
  ms: number;
}

function rank(rank: number, size: number, store: string, args: string[] = [], env: NodeJS.ProcessEnv = { WEFT_RANK: String(rank), WEFT_WORLD_SIZE: String(size), WEFT_STORE: store, WEFT_PREFIX: 'join-test' }): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [RANK, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const guard = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('exit', () => {
      clearTimeout(guard);
      const line = out.split('\n').find((l) => l.startsWith('{'));
      if (!line) return reject(new Error(`rank ${rank} printed no outcome:\n${out}`));
      resolve(JSON.parse(line) as Outcome);
    });
  });
}

async function job(sizes: number[]): Promise<Outcome[]> {
  const dir = mkdtempSync(path.join(tmpdir(), 'weft-join-'));
  try {
    return await Promise.all(sizes.map((size, r) => rank(r, size, `file://${dir}`)));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

for (const sizes of [[2, 3], [3, 2], [3, 3, 2]]) {
  test(`world sizes ${sizes.join(', ')}: every rank fails with EINVAL naming the size, well before its timeout`, async () => {
    const outcomes = await job(sizes);
    outcomes.forEach((o, r) => {
      assert.is(o.code, 'EINVAL', `rank ${r}: ${JSON.stringify(o)}`);
      assert.match(o.message as string, /world size/, `rank ${r}: ${o.message}`);
      assert.match(o.message as string, new RegExp(`^rank ${r}\\b`), `rank ${r}'s message names another rank first: ${o.message}`);
      // By the published reason, not by its own 20 s timeout.
      assert.not.match(o.message as string, /timed out/, `rank ${r} failed by timeout: ${o.message}`);
    });
  });
}

test('the same sizes join (the check does not refuse a good job)', async () => {
  const outcomes = await job([2, 2]);
  outcomes.forEach((o, r) => assert.ok(o.ok, `rank ${r}: ${JSON.stringify(o)}`));
});

test('torchrun style, rank 0 hosting the store: a blocking collective right after init() does not starve the others', async () => {
  // Rank 0 used to return from init() while slower ranks still waited for the store's answer;
  // its allreduceSync then blocked the event loop that serves the store, and every rank timed out.
  const port = await freePort();
  const env = (r: number) => ({ RANK: String(r), WORLD_SIZE: '4', MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(port), WEFT_STORE_SECRET: 'join-test-secret', WEFT_TIMEOUT_MS: '20000' });
  const outcomes = await Promise.all([0, 1, 2, 3].map((r) => rank(r, 4, '', ['sync'], env(r))));
  outcomes.forEach((o, r) => assert.ok(o.ok, `rank ${r}: ${JSON.stringify(o)}`));
});

test('init\'s timeoutMs bounds the whole of init, not each of its steps', async () => {
  // The store comes up 2 s late (the rank keeps dialling), then the other rank never comes.
  // With timeoutMs 3000, init fails about 3 s after it began; each step used to get the whole
  // timeout anew, and it failed 2 + 3 s after (up to 4 x timeoutMs in all).
  const port = await freePort();
  const secret = 'join-timeout-secret';
  const outcome = rank(0, 2, `tcp://127.0.0.1:${port}`, ['timeout=3000'], { WEFT_RANK: '0', WEFT_WORLD_SIZE: '2', WEFT_STORE: `tcp://127.0.0.1:${port}`, WEFT_STORE_SECRET: secret, WEFT_PREFIX: 'join-deadline' });
  await new Promise((r) => setTimeout(r, 2000));
  const server = await TcpStoreServer.listen({ host: '127.0.0.1', port, secret });
  try {
    const o = await outcome;
    assert.is(o.code, 'ETIMEDOUT', JSON.stringify(o));
    assert.ok(o.ms < 4200, `init failed ${Math.round(o.ms)} ms after it began, given timeoutMs 3000: ${o.message}`);
  } finally {
    await server.close();
  }
});

test.run();
