/**
 * Smoke test of `weft bench collectives`, weft's side only (no peers): np=2 over shm,
 * allreduce and barrier at 8 B and 4 KiB, 3 timed iterations, --json. Checks the rows that
 * come back (fields, one per system/op/size) and the results file, never the timings.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { EmulatedHosts } from '../../harness/emulated-hosts.js';

const CLI = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'bench', 'collectives', 'index.js');
const dir = mkdtempSync(path.join(tmpdir(), 'weft-collectives-bench-'));

function run(args: string[], timeoutMs: number): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

test('weft side at np=2: JSON rows with the required fields, one per system, op and size', async () => {
  const out = path.join(dir, 'rows.json');
  const r = await run(['--np', '2', '--ops', 'allreduce,barrier', '--sizes', '8,4096', '--iters', '3', '--warmup', '1', '--providers', 'shm', '--peers', 'none', '--json', '--out', out, '--no-plot'], 20_000);
  assert.is(r.code, 0, `exit ${r.code}; stderr:\n${r.stderr}`);
  const rows = r.stdout.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>);
  assert.equal(
    rows.map((x) => `${x.system} ${x.op} ${x.bytes}`).sort(),
    ['weft allreduce 4096', 'weft allreduce 8', 'weft barrier 0', 'weft-sync allreduce 4096', 'weft-sync allreduce 8', 'weft-sync barrier 0'],
  );
  for (const x of rows) {
    assert.ok(x.np === 2 && x.provider === 'shm' && x.iters === 3, JSON.stringify(x));
    for (const k of ['median_us', 'min_us', 'p90_us'] as const) assert.ok(typeof x[k] === 'number' && (x[k] as number) > 0, `${k}: ${JSON.stringify(x)}`);
    if (x.op === 'barrier') assert.is(x.busbw_gbps, null);
    else assert.ok(typeof x.busbw_gbps === 'number' && (x.busbw_gbps as number) > 0, JSON.stringify(x));
  }
  const saved = JSON.parse(readFileSync(out, 'utf8')) as { rows: unknown[]; meta: { failures: string[] } };
  assert.is(saved.rows.length, rows.length);
  assert.equal(saved.meta.failures, []);
});

// Across emulated hosts (root only): the command runs weft hierarchical and flat, honours
// --peers none, measures the floors from 1 MiB (tcp-link between hosts 0 and 1, memory), and prints
// a table with a row per size even with the blocking variant alone.
const noHosts = EmulatedHosts.unavailable();
if (noHosts) console.log(`collectives bench --hosts: skipped (${noHosts})`);
else
  test('--hosts 2 --np 4, blocking variant only, no peers: hierarchical, flat and link-floor rows, a table row per size', async () => {
    const out = path.join(dir, 'hosts.json');
    const args = ['--hosts', '2', '--np', '4', '--ops', 'allreduce', '--sizes', '8,4096,1M', '--iters', '3', '--warmup', '1', '--variants', 'sync', '--peers', 'none', '--out', out, '--no-plot'];
    const r = await run(args, 120_000);
    assert.is(r.code, 0, `exit ${r.code}; stderr:\n${r.stderr}`);
    const saved = JSON.parse(readFileSync(out, 'utf8')) as { rows: { system: string; provider: string; op: string; bytes: number; np: number }[]; meta: { failures: string[] } };
    assert.equal(
      saved.rows.map((x) => `${x.system} ${x.provider} ${x.bytes} np=${x.np}`).sort(),
      ['floor memcpy 1048576 np=4', 'floor sum-kernel 1048576 np=4', 'floor tcp-link 1048576 np=4', 'weft-sync hosts 1048576 np=4', 'weft-sync hosts 4096 np=4', 'weft-sync hosts 8 np=4', 'weft-sync hosts-flat-ofi 1048576 np=4', 'weft-sync hosts-flat-ofi 4096 np=4', 'weft-sync hosts-flat-ofi 8 np=4'],
    );
    assert.equal(saved.meta.failures, []);
    assert.match(r.stdout, /link floor +host floor +gloo \/ host floor/);
    assert.match(r.stdout, /^8 B +- +\d.* - +-$/m);
    assert.match(r.stdout, /^4 KiB +- +\d/m);
    // weft's time, then (no Gloo) the floors' times and no ratio.
    assert.match(r.stdout, /^1 MiB +- +\d.* \d+(\.\d+)? [mu]s +\d+(\.\d+)? [mu]s +-$/m);
  });

test.after(() => rmSync(dir, { recursive: true, force: true }));

test.run();
