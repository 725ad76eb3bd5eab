/**
 * The Gloo and Open MPI harnesses of `weft bench collectives` (bench/peers/): built from
 * source into a scratch directory, run at np=2 on two tiny allreduces, and killed cleanly
 * when a run outlives its timeout. Each part skips, saying why, when its peer is not
 * installed (libgloo-dev and g++; libopenmpi-dev and openmpi-bin). Also the link-floor
 * harness (tcp-link.c, gcc), between two processes on loopback.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, spawnSync } from 'node:child_process';
import { createServer } from 'node:net';
import { mkdtempSync, rmSync, statSync, utimesSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { buildPeer, detect, runGloo, runMpi, PeerRunError, type PeerRow } from '../../bench/peers/index.js';
import { finished } from '../../bench/peers/spawn.js';
import { parseLinkRows } from '../../bench/collectives/link-floor.js';

const binDir = mkdtempSync(path.join(tmpdir(), 'weft-peers-test-'));
const avail = detect();

function checkRows(rows: PeerRow[], system: string, provider: string): void {
  assert.equal(rows.map((r) => [r.system, r.op, r.np, r.provider, r.bytes, r.iters]), [
    [system, 'allreduce', 2, provider, 8, 3],
    [system, 'allreduce', 2, provider, 4096, 3],
  ]);
  for (const r of rows) {
    assert.ok(r.median_us > 0 && r.min_us > 0 && r.p90_us > 0, `times must be positive: ${JSON.stringify(r)}`);
    assert.ok(r.min_us <= r.median_us && r.median_us <= r.p90_us, `min <= median <= p90: ${JSON.stringify(r)}`);
  }
}

/** Processes still running a binary from the scratch directory. */
function leftovers(): string[] {
  const r = spawnSync('pgrep', ['-af', binDir], { encoding: 'utf8' });
  return r.stdout.split('\n').filter((l) => l.trim() && !l.includes('pgrep'));
}

async function gone(): Promise<string[]> {
  for (let i = 0; i < 40 && leftovers().length; i++) await new Promise((r) => setTimeout(r, 100));
  return leftovers();
}

const small = { np: 2, ops: ['allreduce' as const], sizes: [8, 4096], iters: 3, warmup: 1, timeoutMs: 20_000, binDir };

test('gloo: builds once, reruns from the cached binary, allreduce at np=2 returns rows', async () => {
  if (!avail.gloo.available) return console.log(`  (skipped: ${avail.gloo.reason})`);
  const first = await buildPeer('gloo', { binDir });
  assert.ok(first.rebuilt && statSync(first.binary).isFile());
  assert.not.ok((await buildPeer('gloo', { binDir })).rebuilt, 'an up-to-date binary is not rebuilt');
  utimesSync(first.binary, new Date(0), new Date(0));
  assert.ok((await buildPeer('gloo', { binDir })).rebuilt, 'a binary older than its source is rebuilt');
  checkRows(await runGloo(small), 'gloo', 'tcp');
});

test('gloo: a run past its timeout is killed, with a clear error', async () => {
  if (!avail.gloo.available) return console.log(`  (skipped: ${avail.gloo.reason})`);
  const err = await runGloo({ ...small, sizes: [64 << 20], iters: 1000, timeoutMs: 400 }).catch((e: unknown) => e);
  assert.instance(err, PeerRunError);
  assert.match((err as Error).message, /timed out after 400 ms/);
  assert.match((err as Error).message, /gloo-bench rank 1/);
  assert.equal(await gone(), []);
});

test('openmpi: allreduce at np=2 over the shared-memory and tcp BTLs', async () => {
  if (!avail.mpi.available) return console.log(`  (skipped: ${avail.mpi.reason})`);
  assert.ok((await buildPeer('mpi', { binDir })).rebuilt);
  checkRows(await runMpi({ ...small, btl: 'sm' }), 'openmpi', 'sm');
  checkRows(await runMpi({ ...small, btl: 'tcp' }), 'openmpi', 'tcp');
});

test('openmpi: a run past its timeout leaves no rank behind', async () => {
  if (!avail.mpi.available) return console.log(`  (skipped: ${avail.mpi.reason})`);
  const err = await runMpi({ ...small, btl: 'sm', sizes: [64 << 20], iters: 1000, timeoutMs: 1000 }).catch((e: unknown) => e);
  assert.instance(err, PeerRunError);
  assert.match((err as Error).message, /timed out after 1000 ms/);
  assert.equal(await gone(), []);
});

function haveGcc(): boolean {
  return spawnSync(process.env.CC || 'gcc', ['--version']).status === 0;
}

/** A TCP port free on 127.0.0.1 a moment ago. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer().listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
    srv.on('error', reject);
  });
}

function runLink(binary: string, role: string, args: string[], timeoutMs = 20_000) {
  return finished(spawn(binary, ['--role', role, ...args], { stdio: ['ignore', 'pipe', 'pipe'], detached: true }), `tcp-link ${role}`, timeoutMs);
}

test('tcp-link: both processes send and receive each size at once; one checked row per size', async () => {
  if (!haveGcc()) return console.log('  (skipped: no C compiler; apt-get install gcc)');
  const { binary } = await buildPeer('tcp-link', { binDir });
  const args = ['--addr', '127.0.0.1', '--port', String(await freePort()), '--sizes', '1048576,3145728', '--iters', '3', '--warmup', '1', '--timeout-ms', '15000'];
  const [server, client] = await Promise.all([runLink(binary, 'server', args), runLink(binary, 'client', args)]);
  assert.equal([server.code, client.code], [0, 0], `${server.stderrTail}${client.stderrTail}`);
  assert.equal(server.stdout, '', 'only the client prints rows');
  const rows = parseLinkRows(client.stdout, [1 << 20, 3 << 20], 4);
  assert.equal(rows.map((r) => [r.system, r.provider, r.op, r.np, r.bytes, r.iters]), [
    ['floor', 'tcp-link', 'allreduce', 4, 1 << 20, 3],
    ['floor', 'tcp-link', 'allreduce', 4, 3 << 20, 3],
  ]);
  for (const r of rows) assert.ok(r.min_us > 0 && r.min_us <= r.median_us && r.median_us <= r.p90_us, JSON.stringify(r));
  assert.throws(() => parseLinkRows(client.stdout, [1 << 20], 4), /expected rows for 1048576 bytes/);
});

test('tcp-link: a client with no server stops at its timeout; bad flags get the usage', async () => {
  if (!haveGcc()) return console.log('  (skipped: no C compiler; apt-get install gcc)');
  const { binary } = await buildPeer('tcp-link', { binDir });
  const lonely = await runLink(binary, 'client', ['--addr', '127.0.0.1', '--port', String(await freePort()), '--sizes', '1048576', '--timeout-ms', '300']);
  assert.equal(lonely.code, 1);
  assert.match(lonely.stderrTail, /tcp-link \(client\): timed out \(--timeout-ms\); is the peer running and reachable\?/);
  const bad = await runLink(binary, 'sideways', ['--addr', '127.0.0.1', '--port', '1', '--sizes', '8']);
  assert.equal(bad.code, 1);
  assert.match(bad.stderrTail, /usage: tcp-link --role server\|client/);
  const short = await runLink(binary, 'client', ['--addr', '127.0.0.1', '--sizes']);
  assert.equal(short.code, 1);
  assert.match(short.stderrTail, /flag --sizes has no value/);
});

test.after(() => rmSync(binDir, { recursive: true, force: true }));

test.run();
