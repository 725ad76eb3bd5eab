/**
 * Smoke test of `weft bench ipc`, weft's three systems and the Node baselines (postMessage,
 * MessageChannel, node:net, floor), run in-process with the --quick settings and tiny call counts, in both
 * placements: records come back with sane numbers, and no worker thread, child process or
 * /dev/shm segment outlives the run. A system that hangs (spinning in its client) is reported
 * as skipped once its timeout passes, its workers and children ended. node:net's frame
 * reader is checked on frames split at every byte.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { ipcReport, livePeers, pairedRatio, runIpcBench, type IpcBenchOptions } from '../../bench/ipc/index.js';
import { FrameReader } from '../../bench/ipc/systems/node-net.js';
import { listSegments } from '../../src/host/segments.js';

const dir = mkdtempSync(path.join(tmpdir(), 'weft-ipc-bench-'));
const lines: string[] = [];

const quick = (o: Partial<IpcBenchOptions>): IpcBenchOptions => ({
  systems: ['postMessage', 'MessageChannel', 'node:net', 'floor', 'delegation', 'ipc', 'flux'],
  placements: ['threads', 'processes'],
  clients: [1, 2],
  qd: [1, 64],
  bytes: [32],
  runs: 1,
  calls: 300,
  seconds: 0.1,
  timeoutMs: 20_000,
  json: false,
  quick: true,
  log: (l) => lines.push(l),
  ...o,
});

/** Processes whose parent is this one. */
function children(): number[] {
  const out: number[] = [];
  for (const pid of readdirSync('/proc').filter((n) => /^\d+$/.test(n))) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === process.pid) out.push(Number(pid));
    } catch {
      // Gone meanwhile.
    }
  }
  return out;
}

const threads = () => readdirSync('/proc/self/task').length;

async function settled(check: () => boolean, ms = 3000): Promise<boolean> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) return false;
    await new Promise((r) => setTimeout(r, 50));
  }
  return true;
}

let baseThreads = 0;
let baseSegments: string[] = [];

test.before(async () => {
  // Start libuv's thread pool (workers load modules through it), so that it is in the baseline.
  await readFile(fileURLToPath(import.meta.url));
  baseThreads = threads();
  baseSegments = listSegments();
});

test('every system in both placements: one record per point with sane numbers', async () => {
  const { records, skipped } = await runIpcBench(quick({}));
  assert.equal(skipped, [], lines.join('\n'));
  const keys = records.map((r) => `${r.system} ${r.placement} ${r.clients} ${r.qd}`).sort();
  const want: string[] = [];
  for (const s of ['postMessage', 'MessageChannel', 'node:net', 'floor', 'delegation', 'ipc', 'flux']) {
    for (const p of s === 'postMessage' || s === 'MessageChannel' ? ['threads'] : ['threads', 'processes']) {
      for (const c of [1, 2]) for (const q of [1, 64]) want.push(`${s} ${p} ${c} ${q}`);
    }
  }
  assert.equal(keys, want.sort());
  for (const r of records) {
    const at = JSON.stringify(r);
    assert.is(r.bench, 'ipc', at);
    assert.is(r.metric, 'calls_per_s', at);
    assert.is(r.unit, 'calls/s', at);
    assert.is(r.bytes, 32, at);
    assert.is(r.calls, 300, at);
    assert.ok(r.calls_per_s > 0 && Number.isFinite(r.calls_per_s), at);
    assert.is(r.median, r.calls_per_s, at);
    assert.ok(r.rtt_us > 0 && Number.isFinite(r.rtt_us), at);
    assert.is(r.runs.length, 1, at);
    assert.is(r.oversubscribed, 1 + r.clients > availableParallelism(), at);
  }
  const report = ipcReport(records);
  assert.match(report, /system\s+placement\s+clients\s+qd\s+bytes\s+calls\/s\s+rtt us/);
  assert.match(report, /floor: QD=1 round trip/);
  if (records.some((r) => r.oversubscribed)) assert.match(report, /\* oversubscribed/);
});

test('other payload sizes (4 B, 100 B), sized by a pilot run', async () => {
  const { records, skipped } = await runIpcBench(quick({ systems: ['MessageChannel', 'node:net', 'floor'], placements: ['threads'], clients: [1], qd: [4], bytes: [4, 100], calls: undefined, seconds: 0.02 }));
  assert.equal(skipped, [], lines.join('\n'));
  assert.is(records.length, 6);
  for (const r of records) assert.ok(r.calls >= 1000 && r.calls_per_s > 0 && r.rtt_us > 0, JSON.stringify(r));
});

test('the systems of a point run side by side, run after run; the report pairs them by run', async () => {
  const { records, skipped } = await runIpcBench(quick({ systems: ['MessageChannel', 'floor'], placements: ['threads'], clients: [1], qd: [4], runs: 3 }));
  assert.equal(skipped, [], lines.join('\n'));
  assert.equal(records.map((r) => r.system), ['MessageChannel', 'floor']);
  for (const r of records) assert.is(r.runs.length, 3, JSON.stringify(r));
  const [mc, floor] = records;
  const ratios = mc.runs.map((x, i) => x / floor.runs[i]).sort((a, b) => a - b);
  assert.is(pairedRatio(mc, floor), ratios[1]);
  assert.match(ipcReport(records), new RegExp(`MessageChannel: .*vs floor at qd 4: ${(100 * ratios[1]).toFixed(0)}% of its throughput \\(median of per-run ratios\\)`));
});

test('a system that hangs is skipped after its timeout; an unknown one with one line', async () => {
  const hang = path.join(dir, 'hang.mjs');
  writeFileSync(
    hang,
    `export default {
  name: 'hang', placements: ['threads', 'processes'],
  async startServer() { return { descriptor: null, serve(stop) { while (!stop()); }, close() {} }; },
  async runClient() { for (;;); },
};\n`,
  );
  const { records, skipped } = await runIpcBench(quick({ systems: ['hang', 'nosuch'], modules: { hang: pathToFileURL(hang).href }, clients: [1], qd: [1], timeoutMs: 1500 }));
  assert.equal(records, []);
  assert.is(skipped.length, 3, skipped.join('\n'));
  assert.match(skipped[0], /^nosuch: skipped \(not in bench\/ipc\/systems/);
  assert.match(skipped[1], /^hang threads .*skipped \(timed out/);
  assert.match(skipped[2], /^hang processes .*skipped \(timed out/);
});

test('no worker thread, child process or segment outlives the runs', async () => {
  assert.is(livePeers(), 0);
  assert.equal(children(), []);
  assert.ok(await settled(() => threads() <= baseThreads), `threads: ${threads()}, before the runs: ${baseThreads}`);
  assert.equal(listSegments().filter((n) => !baseSegments.includes(n)), []);
});

test("node:net's frame reader: frames split at every byte come out whole", () => {
  const frames = [Buffer.from('abcd'), Buffer.alloc(0), Buffer.alloc(5000, 7), Buffer.from('xyz12')];
  const wire = Buffer.concat(frames.flatMap((f) => [Buffer.from(Uint32Array.of(f.length).buffer), f]));
  for (const step of [1, 2, 3, 5, 7, 4096, wire.length]) {
    const got: string[] = [];
    const r = new FrameReader((buf, off, len) => got.push(buf.subarray(off, off + len).toString('hex')));
    for (let i = 0; i < wire.length; i += step) r.push(wire.subarray(i, i + step));
    assert.equal(got, frames.map((f) => f.toString('hex')), `chunks of ${step}`);
  }
});

test.after(() => rmSync(dir, { recursive: true, force: true }));

test.run();
