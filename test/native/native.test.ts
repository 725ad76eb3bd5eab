/** The native core: shared segments, cross-process Atomics, futexes, liveness, sweeping. */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { native } from '../../src/native/binding.js';
import { sweepDeadSegments, parseSegmentName } from '../../src/nic/index.js';

const CHILD = path.join(path.dirname(fileURLToPath(import.meta.url)), 'workers', 'atomics-child.js');
const uniq = () => `/weft-test-${process.pid}-${Math.floor(Math.random() * 1e9)}`;

function runChild(args: string[]): Promise<number> {
  return new Promise((resolve) => spawn(process.execPath, [CHILD, ...args], { stdio: 'inherit' }).on('exit', (c) => resolve(c ?? -1)));
}

test('a mapped segment is a real SharedArrayBuffer, mode 0600', () => {
  const name = uniq();
  const sab = native.shmCreate(name, 8192);
  try {
    assert.ok(sab instanceof SharedArrayBuffer);
    assert.is(sab.byteLength, 8192);
    assert.is(statSync(`/dev/shm${name}`).mode & 0o777, 0o600);
    const other = native.shmOpen(name);
    new Int32Array(sab)[5] = 77;
    assert.is(new Int32Array(other)[5], 77);
  } finally {
    native.shmUnlink(name);
  }
  assert.not.ok(existsSync(`/dev/shm${name}`));
});

test('Atomics are exact across processes (2 x 1,000,000 increments)', async () => {
  const name = uniq();
  const i32 = new Int32Array(native.shmCreate(name, 4096));
  try {
    const codes = await Promise.all([runChild([name, 'add', '1000000']), runChild([name, 'add', '1000000'])]);
    assert.equal(codes, [0, 0]);
    assert.is(Atomics.load(i32, 0), 2_000_000);
  } finally {
    native.shmUnlink(name);
  }
});

test('futexWaitAsync keeps the event loop running and is woken by another process', async () => {
  const name = uniq();
  const i32 = new Int32Array(native.shmCreate(name, 4096));
  try {
    let ticks = 0;
    const timer = setInterval(() => ticks++, 5);
    const waiting = native.futexWaitAsync(i32, 1, 0, 5000);
    await new Promise((r) => setTimeout(r, 60));
    const t0 = performance.now();
    await runChild([name, 'wake', '0']);
    const result = await waiting;
    clearInterval(timer);
    assert.is(result, 'ok');
    assert.ok(ticks >= 5, `the event loop was blocked (${ticks} ticks)`);
    assert.ok(performance.now() - t0 < 4000);
  } finally {
    native.shmUnlink(name);
  }
});

test('futexWait reports not-equal and timed-out', () => {
  const name = uniq();
  const i32 = new Int32Array(native.shmCreate(name, 4096));
  try {
    i32[0] = 3;
    assert.is(native.futexWait(i32, 0, 4, 100), 'not-equal');
    assert.is(native.futexWait(i32, 0, 3, 10), 'timed-out');
  } finally {
    native.shmUnlink(name);
  }
});

test('bad arguments throw instead of crashing', () => {
  assert.throws(() => native.shmCreate('no-slash', 10), /bad segment name/);
  assert.throws(() => native.shmCreate('/a/b', 10), /bad segment name/);
  assert.throws(() => native.shmCreate(uniq(), -1), /size/);
  assert.throws(() => native.shmOpen(uniq()), /No such file/);
  assert.throws(() => native.futexWake(new Float64Array(2) as unknown as Int32Array, 0), /Int32Array/);
  assert.throws(() => native.futexWait(new Int32Array(2), 5, 0, 1), /out of range/);
  assert.throws(() => native.copyBytes(new Uint8Array(4), 0, new Uint8Array(4), 2, 4), /outside/);
  const name = uniq();
  native.shmCreate(name, 64);
  try {
    assert.throws(() => native.shmCreate(name, 64), (e: Error & { code?: string }) => e.code === 'EEXIST');
  } finally {
    native.shmUnlink(name);
  }
});

test('process liveness tells the living, the dead and a recycled pid apart', () => {
  const me = native.processStartTime(process.pid);
  assert.ok(me > 0);
  assert.ok(native.processAlive(process.pid));
  assert.ok(native.processAlive(process.pid, me));
  assert.not.ok(native.processAlive(process.pid, me + 1), 'a different start time means another process');
  const child = spawnSync(process.execPath, ['-e', 'console.log(process.pid)'], { encoding: 'utf8' });
  assert.not.ok(native.processAlive(Number(child.stdout.trim())));
});

test('sweeping removes segments of dead owners only', () => {
  const child = spawnSync(process.execPath, ['-e', 'console.log(process.pid)'], { encoding: 'utf8' });
  const deadPid = Number(child.stdout.trim());
  const dead = `/weft.sweeptest.${deadPid}.12345.d0.ctl`;
  const alive = `/weft.sweeptest.${process.pid}.${native.processStartTime(process.pid)}.d9.ctl`;
  native.shmCreate(dead, 64);
  native.shmCreate(alive, 64);
  try {
    assert.equal(parseSegmentName(dead)?.pid, deadPid);
    const removed = sweepDeadSegments();
    assert.ok(removed.includes(dead));
    assert.not.ok(removed.includes(alive));
    assert.ok(existsSync(`/dev/shm${alive}`));
  } finally {
    native.shmUnlink(alive);
    try {
      native.shmUnlink(dead);
    } catch {
      // already swept
    }
  }
});

test('native memcpy copies between shared views', () => {
  const a = new Uint8Array(new SharedArrayBuffer(1 << 16)).map((_, i) => i & 255);
  const b = new Uint8Array(new SharedArrayBuffer(1 << 16));
  native.copyBytes(b, 100, a, 200, 5000);
  for (let i = 0; i < 5000; i += 97) assert.is(b[100 + i], (200 + i) & 255);
  assert.ok(native.memcpyBandwidth(1 << 16, 10) > 0);
});

test.run();
