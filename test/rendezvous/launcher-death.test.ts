/**
 * A SIGKILLed `weft run` cannot stop or clean up its ranks. Ranks whose event loop turns see
 * it gone on a timer and exit cleanly; a rank looping *Sync collectives never runs a timer and
 * used to outlive its launcher forever, with its segments. Its native watchdog now ends it and
 * unlinks its shared memory (weft's segments and libfabric's regions).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { native } from '../../src/native/binding.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const WEFT = path.join(root, 'bin', 'weft.js');
const RANK = path.join(root, 'dist', 'test', 'rendezvous', 'workers', 'sync-loop-rank.js');

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** /dev/shm names owned by `pid` (weft: `.<pid>.<start>.`; libfabric: `<pid>:`). */
function segmentsOf(pid: number): string[] {
  return readdirSync('/dev/shm').filter((n) => n.startsWith(`${pid}:`) || (n.startsWith('weft.') && n.includes(`.${pid}.`)));
}

async function killLauncherOfSyncLoop(provider: string, elements: number): Promise<void> {
  const launcher = spawn(process.execPath, [WEFT, 'run', '-n', '2', RANK, String(elements)], { env: { ...process.env, NO_COLOR: '1', WEFT_PROVIDER: provider }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  launcher.stdout.on('data', (d) => (out += d));
  launcher.stderr.on('data', (d) => (out += d));
  const pids = new Set<number>();
  for (let i = 0; i < 300 && pids.size < 2; i++) {
    for (const m of out.matchAll(/looping pid (\d+)/g)) pids.add(Number(m[1]));
    await sleep(100);
  }
  assert.is(pids.size, 2, `the ranks did not start looping:\n${out}`);
  launcher.kill('SIGKILL');
  // The watchdog checks every 100 ms and gives the event loop 1.5 s: allow 10 s on a busy machine.
  for (let i = 0; i < 100 && [...pids].some((p) => native.processAlive(p)); i++) await sleep(100);
  const alive = [...pids].filter((p) => native.processAlive(p));
  for (const p of alive) process.kill(p, 'SIGKILL');
  assert.equal(alive, [], `ranks outlived their SIGKILLed launcher by 10 s`);
  const left = [...pids].flatMap(segmentsOf);
  assert.equal(left, [], `shared memory left by the ranks: ${left.join(', ')}`);
}

const providers = native.ofi.available ? ['shm', 'ofi'] : ['shm'];
for (const provider of providers) {
  test(`${provider}: ranks in a loop of allreduceSync exit and unlink their shared memory when their launcher is SIGKILLed`, async () => {
    await killLauncherOfSyncLoop(provider, 4);
    await killLauncherOfSyncLoop(provider, 1 << 16);
  });
}

test.run();
