/**
 * The misuse matrix (issue: no silent wrong results). For each collective, each way two ranks
 * can disagree (op, dtype, length, root, collective, tag, counts) and each local misuse
 * (wrong type, overlapping buffers, an aborted signal, a concurrent call on the same tag, a
 * blocking call beside an async one, a call after close): every rank fails with the same
 * error code, within the timeout, in a message that names the call, and a correct call on a
 * fresh context afterwards is right. Rank 0 is the odd one out (test/collectives/workers/
 * misuse-rank.ts). Run over shm and ofi, normally and with WEFT_CHECK=1.
 *
 * The contract (docs/collectives.md, "Errors"): a rank whose call had already returned when
 * another rank found the disagreement (a root that had sent everything) fails at its next
 * call; the disagreements nobody can see without an extra round trip fail every rank by
 * timeout (ETIMEDOUT), and with WEFT_CHECK=1 every disagreement is EINVAL at once.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { native } from '../../src/native/binding.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const WEFT = path.resolve(here, '..', '..', '..', 'bin', 'weft.js');
const RANK = path.join(here, 'workers', 'misuse-rank.js');
// The timeout cases wait this out on every rank (5 cases x 2 providers): 1 s is ample for a
// 4-float call between ranks that just passed a barrier, and saves 10 s of npm test.
const TIMEOUT_MS = 1000;

interface Outcome {
  name: string;
  rank: number;
  ms: number;
  fresh: boolean;
  ok?: true;
  code?: string;
  message?: string;
  next?: { code: string; message: string };
}

/** Cases a rank cannot tell without a round trip: every rank fails by timeout (or EINVAL where a message shows it). */
const BY_TIMEOUT = new Set(['reduce root', 'gather root', 'collective: allreduce vs broadcast', 'collective: barrier vs allreduce', 'tag']);
const CODES: Record<string, string> = { 'aborted signal': 'EABORTED', 'after close': 'ECLOSED' };

function run(provider: string, check: boolean): Promise<Outcome[]> {
  return new Promise((resolve, reject) => {
    const env = { ...process.env, NO_COLOR: '1', WEFT_PROVIDER: provider, WEFT_TIMEOUT_MS: String(TIMEOUT_MS), WEFT_CHECK: check ? '1' : '0' };
    const child = spawn(process.execPath, [WEFT, 'run', '-n', '2', RANK], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 300_000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      if (code !== 0) return reject(new Error(`the misuse ranks exited ${code}:\n${out.slice(-3000)}`));
      resolve([...out.matchAll(/^\[rank \d\] case (\{.*\})$/gm)].map((m) => JSON.parse(m[1]) as Outcome));
    });
  });
}

function verify(outcomes: Outcome[], check: boolean): void {
  const byCase = new Map<string, Outcome[]>();
  for (const o of outcomes) byCase.set(o.name, [...(byCase.get(o.name) ?? []), o]);
  assert.ok(byCase.size >= 29, `only ${byCase.size} cases reported`);
  for (const [name, ranks] of byCase) {
    assert.is(ranks.length, 2, `${name}: ${ranks.length} ranks reported`);
    for (const o of ranks) assert.ok(o.fresh, `${name}: rank ${o.rank}: the correct call on a fresh context afterwards was wrong`);
    // Serialized by the agreement round, a blocking call beside an async one is legal then.
    if (check && name === 'blocking call while an async one runs' && ranks.every((o) => o.ok)) continue;
    // What each rank saw: its call's error, else its next call's (it had returned before the
    // disagreement was found); a rank with neither got a result silently.
    const seen = ranks.map((o) => (o.code !== undefined ? { code: o.code, message: o.message as string } : o.next));
    const silent = ranks.filter((_, i) => seen[i] === undefined).map((o) => o.rank);
    assert.equal(silent, [], `${name}: rank(s) ${silent.join(', ')} saw no error (${JSON.stringify(ranks)})`);
    const codes = seen.map((s) => s!.code);
    assert.equal(new Set(codes).size, 1, `${name}: the ranks failed with different codes: ${codes.join(', ')}`);
    const want = CODES[name] ?? (!check && BY_TIMEOUT.has(name) ? undefined : 'EINVAL');
    if (want) assert.is(codes[0], want, `${name}: ${seen[0]!.message}`);
    else assert.ok(codes[0] === 'ETIMEDOUT' || codes[0] === 'EINVAL', `${name}: ${codes[0]}: ${seen[0]!.message}`);
    for (const o of ranks) {
      if (o.code !== undefined) assert.ok(o.ms < TIMEOUT_MS + 1000, `${name}: rank ${o.rank} failed after ${o.ms} ms`);
      const m = o.message ?? o.next!.message;
      assert.match(m, /rank \d/, `${name}: the message names no rank: ${m}`);
    }
  }
}

const providers = native.ofi.available ? ['shm', 'ofi'] : ['shm'];
const soak = process.env.WEFT_SOAK === '1';
for (const provider of providers) {
  // WEFT_CHECK=1 over ofi in the soak run only (npm test's budget): the agreement round it adds
  // is the same code on every provider, and it runs over shm here.
  for (const check of provider === 'ofi' && !soak ? [false] : [false, true]) {
    test(`misuse matrix over ${provider}${check ? ' with WEFT_CHECK=1' : ''}: every rank fails the same way, nothing silent`, async () => {
      verify(await run(provider, check), check);
    });
  }
}

test.run();
