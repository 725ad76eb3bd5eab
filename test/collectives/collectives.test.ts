// Collectives across real processes: `weft run -n N` starts the ranks of
// test/collectives/workers/collectives-rank.ts, each checks every result against its own reference.
// npm test: the matrix over shm at 2 ranks with the full size set (up to 1 MiB + 3 elements) and
// at 4 and 5 ranks with a smaller large size (70001, not a multiple of the rank count), over ofi
// (tcp) at 2 ranks full size and 3 ranks at 70001; the shared and registered modes take the full
// size on Float32Array only. WEFT_SOAK=1 runs every rank count from 2 to 5 on both providers at
// full size, and the subgroups over ofi too.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../../harness/ports.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..', '..', '..');
const WEFT = path.join(root, 'bin', 'weft.js');
const RANK = path.join(root, 'dist', 'test', 'collectives', 'workers', 'collectives-rank.js');
const soak = process.env.WEFT_SOAK === '1';
const hasOfi = (await import('../../src/native/binding.js')).native.ofi.available;

interface Run {
  code: number | null;
  out: string;
  ms: number;
}

function run(cmd: string[], env: Record<string, string>, timeoutMs: number): Promise<Run> {
  const t0 = performance.now();
  return new Promise((resolve) => {
    const child = spawn(process.execPath, cmd, { env: { ...process.env, NO_COLOR: '1', ...env }, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const timer = setTimeout(() => {
      out += `\n(test: killed after ${timeoutMs} ms)`;
      try {
        process.kill(-(child.pid as number), 'SIGKILL');
      } catch {}
    }, timeoutMs);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, out, ms: performance.now() - t0 });
    });
  });
}

function matrix(provider: string, n: number, big?: number): void {
  test(`every collective, ${n} ranks over ${provider}${big ? ` (large size ${big})` : ''}`, async () => {
    const env: Record<string, string> = { WEFT_PROVIDER: provider };
    if (big) env.WEFT_TEST_BIG = String(big);
    const r = await run([WEFT, 'run', '-n', String(n), RANK, 'matrix'], env, 600_000);
    assert.is(r.code, 0, r.out.slice(-3000));
    for (let k = 0; k < n; k++) assert.match(r.out, new RegExp(`ok rank ${k}: \\d+ checks`));
  });
}

// Subgroups over ofi in the soak run only (npm test's budget): a subgroup's collectives are the
// job's algorithms on a rank map, which the ofi matrix below runs; shm runs the groups here.
for (const provider of hasOfi ? (soak ? ['shm', 'ofi'] : ['shm']) : ['shm']) {
  test(`subgroups: split (keys reversed) and newGroup run every collective, isolated from the job's calls on the same tag, 5 ranks over ${provider}`, async () => {
    const r = await run([WEFT, 'run', '-n', '5', RANK, 'groups'], { WEFT_PROVIDER: provider, WEFT_TEST_BIG: '70001' }, 600_000);
    assert.is(r.code, 0, r.out.slice(-3000));
    for (let k = 0; k < 5; k++) assert.match(r.out, new RegExp(`ok rank ${k}: \\d+ checks`));
  });
}

for (const provider of hasOfi ? ['shm', 'ofi'] : ['shm']) {
  test(`transport: unbound buffers (offsets, any source, abortWaitRecv) and bound buffers, 3 ranks over ${provider}`, async () => {
    const r = await run([WEFT, 'run', '-n', '3', RANK, 'transport'], { WEFT_PROVIDER: provider }, 120_000);
    assert.is(r.code, 0, r.out.slice(-3000));
    for (let k = 0; k < 3; k++) assert.match(r.out, new RegExp(`ok rank ${k}: \\d+ checks`));
  });
}

// 3 ranks in the soak run only (npm test's budget): 5 ranks cover a rank count that is not a
// power of two, and 3 ranks run the shared-memory allreduce and ctx.alloc cases below.
for (const n of soak ? [2, 3, 4, 5] : [2, 4, 5]) matrix('shm', n, n >= 4 && !soak ? 70_001 : undefined);

for (const n of [2, 3, 4]) {
  test(`allreduce over ctx.alloc arrays read in place (shared), ${n} ranks over shm; heap arrays on one rank fall back to the ring`, async () => {
    const r = await run([WEFT, 'run', '-n', String(n), RANK, 'shared'], { WEFT_PROVIDER: 'shm' }, 300_000);
    assert.is(r.code, 0, r.out.slice(-3000));
    for (let k = 0; k < n; k++) assert.match(r.out, new RegExp(`ok rank ${k}: \\d+ checks`));
  });
}
// ofi at 2 ranks in the soak run only (npm test's budget): 3 ranks run the same in-place writes.
for (const [provider, n] of (hasOfi ? [...(soak ? [['ofi', 2]] : []), ['ofi', 3], ['shm', 3]] : [['shm', 3]]) as [string, number][]) {
  test(`collectives over ctx.alloc arrays (ofi: written in place, no staging copy), ${n} ranks over ${provider}; point to point stays buffered`, async () => {
    const r = await run([WEFT, 'run', '-n', String(n), RANK, 'registered'], { WEFT_PROVIDER: provider }, 300_000);
    assert.is(r.code, 0, r.out.slice(-3000));
    for (let k = 0; k < n; k++) assert.match(r.out, new RegExp(`ok rank ${k}: \\d+ checks`));
  });
}
if (hasOfi) {
  // 3 ranks at the full large size in the soak run (npm test's budget: 70001 elements here).
  for (const n of [2, 3]) matrix('ofi', n, n === 3 && !soak ? 70_001 : undefined);
  // 4 and 5 ranks over ofi only in the soak run (npm test's budget): the algorithms are the
  // provider's users, and 4 and 5 ranks run over shm above (and over a mix of shm and ofi
  // in test/hosts).
  if (soak) for (const n of [4, 5]) matrix('ofi', n);
}

test('ranks passing different lengths to allreduce: every rank gets a clear error', async () => {
  const r = await run([WEFT, 'run', '-n', '3', RANK, 'mismatch'], {}, 60_000);
  assert.is(r.code, 0, r.out);
  for (let k = 0; k < 3; k++) assert.match(r.out, new RegExp(`rank ${k} error EINVAL`), r.out);
  assert.match(r.out, /rank 1 (sent|passed) 3996 bytes where this rank (expects|passed) 4000|(expects|passed) 3996/, r.out);
  assert.ok(r.ms < 30_000, `took ${r.ms} ms`);
});

test('ranks passing different dtypes: the error names both calls', async () => {
  const r = await run([WEFT, 'run', '-n', '3', RANK, 'mismatch', 'dtype'], {}, 60_000);
  for (let k = 0; k < 3; k++) assert.match(r.out, new RegExp(`rank ${k} error EINVAL`), r.out);
  assert.match(r.out, /allreduce\(float32, sum\).*allreduce\(float64, sum\)|allreduce\(float64, sum\).*allreduce\(float32, sum\)/, r.out);
});

for (const provider of hasOfi ? ['shm', 'ofi'] : ['shm']) {
  test(`a rank killed mid-allreduce (${provider}): the others reject within the timeout, naming it`, async () => {
    const port = await freePort();
    const env = (rank: number) => ({ WEFT_PROVIDER: provider, RANK: String(rank), WORLD_SIZE: '3', MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(port), WEFT_PREFIX: `kill${process.pid}${provider}` });
    const runs = [0, 1, 2].map((rank) => run([RANK, 'kill'], env(rank), 60_000));
    const [r0, r1, r2] = await Promise.all(runs);
    assert.is(r2.code, null, `rank 2 should die by SIGKILL: ${r2.out}`);
    for (const [k, r] of [[0, r0], [1, r1]] as const) {
      const m = /rank \d error after (\d+) ms (E[A-Z]+): (.*)/.exec(r.out);
      assert.ok(m, `rank ${k}: ${r.out}`);
      assert.match(m![3], /rank 2/, `rank ${k} should name rank 2: ${m![3]}`);
      // Within the 10 s operation timeout (plus the time of the 20 allreduces before the kill).
      assert.ok(r.ms < 40_000, `rank ${k} took ${r.ms} ms`);
    }
  });
}

// The intra-host board (small allreduce, barrier) waited out the whole timeout and said
// ETIMEDOUT: now its probe sees the dead rank, and every survivor says EPEERDEAD naming it.
for (const what of ['allreduce 4 floats', 'barrier']) {
  test(`4 ranks over shm, rank 3 killed in a loop of ${what} (the board): every survivor gets EPEERDEAD naming it`, async () => {
    const port = await freePort();
    const env = (rank: number) => ({ WEFT_PROVIDER: 'shm', RANK: String(rank), WORLD_SIZE: '4', MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(port), WEFT_STORE_SECRET: 'kill-test', WEFT_PREFIX: `killboard${process.pid}` });
    const args = what === 'barrier' ? [RANK, 'kill', '4', 'barrier'] : [RANK, 'kill', '4'];
    const results = await Promise.all([0, 1, 2, 3].map((rank) => run(args, env(rank), 60_000)));
    assert.is(results[3].code, null, `rank 3 should die by SIGKILL: ${results[3].out}`);
    for (const k of [0, 1, 2]) {
      const m = /rank \d error after (\d+) ms (E[A-Z]+): (.*)/.exec(results[k].out);
      assert.ok(m, `rank ${k}: ${results[k].out}`);
      assert.is(m![2], 'EPEERDEAD', `rank ${k}: ${m![3]}`);
      assert.match(m![3], /rank 3\b/, `rank ${k} should name rank 3: ${m![3]}`);
    }
  });
}

test.run();
