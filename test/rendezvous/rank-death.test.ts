/**
 * What `weft run` tells the user when one rank dies or stops. The surviving ranks see a
 * SIGKILLed rank within a fraction of a second and fail naming it; the launcher gives them a
 * moment (failGraceMs) to say so before it stops them (stopped at once, they died of SIGTERM
 * and the log said nothing of the cause). A SIGSTOPped rank makes the others time out; the
 * summary then names the stopped rank (the launcher also continues it after its SIGTERM, which a
 * stopped process takes only once continued: scripts/fault-campaign.mjs measures that).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const WEFT = path.join(root, 'bin', 'weft.js');
const RANK = path.join(root, 'dist', 'test', 'rendezvous', 'workers', 'sync-loop-rank.js');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function hurtOneRank(signal: NodeJS.Signals): Promise<{ out: string; victim: number; code: number | null; afterSignalMs: number }> {
  const child = spawn(process.execPath, [WEFT, 'run', '-n', '3', RANK], { env: { ...process.env, NO_COLOR: '1', WEFT_TIMEOUT_MS: '2000' }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  const exit = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  const guard = setTimeout(() => child.kill('SIGKILL'), 60_000);
  const pids = new Map<number, number>();
  for (let i = 0; i < 300 && pids.size < 3; i++) {
    for (const m of out.matchAll(/\[rank (\d)\] looping pid (\d+)/g)) pids.set(Number(m[1]), Number(m[2]));
    await sleep(100);
  }
  assert.is(pids.size, 3, `the ranks did not start:\n${out}`);
  const victim = 1;
  process.kill(pids.get(victim)!, signal);
  const t = performance.now();
  const code = await exit;
  clearTimeout(guard);
  return { out, victim, code, afterSignalMs: performance.now() - t };
}

test('a SIGKILLed rank: every survivor reports EPEERDEAD naming it before the launcher stops the job', async () => {
  const { out, victim, code } = await hurtOneRank('SIGKILL');
  assert.is.not(code, 0);
  assert.match(out, new RegExp(`weft run: rank ${victim} was killed by SIGKILL`));
  for (const r of [0, 2]) assert.match(out, new RegExp(`\\[rank ${r}\\] .*EPEERDEAD|\\[rank ${r}\\] .*rank ${victim}\\b.*(died|dead|gone)`), `rank ${r} did not report the dead rank:\n${out}`);
});

test('a SIGSTOPped rank: the others time out naming it, and so does the summary', async () => {
  const { out, victim, code } = await hurtOneRank('SIGSTOP');
  assert.is.not(code, 0);
  assert.match(out, new RegExp(`rank ${victim}, pid \\d+: stopped by SIGSTOP`), `the summary does not name the stopped rank:\n${out}`);
  assert.match(out, new RegExp(`rank ${victim}\\b.*is stopped`), `no rank's timeout named the stopped rank:\n${out}`);
});

test.run();
