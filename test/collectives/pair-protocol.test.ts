/**
 * The transport's pair protocol between two ranks (docs/wire-format.md, "Transport rings"):
 * a chunk's header returns the credits its sender owes, so request-reply traffic posts no CREDIT
 * immediates; one-way traffic still gets them (or its sender would stop); a chunk whose header
 * is forged (a credit for chunks never sent, a wrong magic or sequence number, a length past
 * the slot) aborts the job with EPROTO naming the peer. Over shm and ofi.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { native } from '../../src/native/binding.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const WEFT = path.resolve(here, '..', '..', '..', 'bin', 'weft.js');
const RANK = path.join(here, 'workers', 'pair-protocol-rank.js');

interface Line {
  rank: number;
  phase: string;
  credits: number;
  code?: string;
  message?: string;
  error?: null;
}

for (const provider of ['shm', ...(native.ofi.available ? ['ofi'] : [])]) {
  test(`credits over ${provider}: none posted for request-reply, posted for one-way traffic, a forged one refused`, () => {
    const r = spawnSync(process.execPath, [WEFT, 'run', '-n', '2', RANK], { encoding: 'utf8', timeout: 120_000, env: { ...process.env, NO_COLOR: '1', WEFT_PROVIDER: provider } });
    const lines = [...r.stdout.matchAll(/credits (\{.*\})$/gm)].map((m) => JSON.parse(m[1]) as Line);
    const get = (rank: number, phase: string) => {
      const l = lines.find((x) => x.rank === rank && x.phase === phase);
      assert.ok(l, `rank ${rank} did not report ${phase}:\n${r.stdout}\n${r.stderr}`);
      return l!;
    };
    for (const rank of [0, 1]) assert.is(get(rank, 'request-reply').credits, 0, `rank ${rank} posted CREDIT immediates in a request-reply exchange`);
    assert.is(get(0, 'one-way').credits, 0);
    assert.ok(get(1, 'one-way').credits >= 200 / 8, `rank 1 returned ${get(1, 'one-way').credits} credits for 200 one-way messages`);
    const forged = get(1, 'forged');
    assert.is(forged.code, 'EPROTO', JSON.stringify(forged));
    assert.match(forged.message!, /malformed message from rank 0: rank 0 returned credit for 1\d\d\d chunks, but only \d+ are in its ring/);
    assert.ok(get(0, 'forged').code, 'rank 0 should fail too (the job is aborted)');
  });

  const FORGED: [string, RegExp][] = [
    ['magic', /malformed message from rank 0: chunk \d+ has a bad header \(magic deadbeef/],
    ['old-magic', /malformed message from rank 0: chunk \d+ has a bad header \(magic 324d5457, seq \d+\)/],
    ['seq', /malformed message from rank 0: chunk \d+ has a bad header \(magic 334d5457, seq \d+\)/],
    ['length', /malformed message from rank 0: chunk \d+ claims 2147483647 bytes at 0 of a 32-byte message/],
  ];
  for (const [forge, why] of FORGED) {
    test(`a chunk header with a forged ${forge} over ${provider}: EPROTO naming the peer, on both ranks`, () => {
      const r = spawnSync(process.execPath, [WEFT, 'run', '-n', '2', RANK, forge], { encoding: 'utf8', timeout: 120_000, env: { ...process.env, NO_COLOR: '1', WEFT_PROVIDER: provider } });
      const lines = [...r.stdout.matchAll(/credits (\{.*\})$/gm)].map((m) => JSON.parse(m[1]) as Line);
      const at1 = lines.find((l) => l.rank === 1 && l.phase === 'forged');
      const at0 = lines.find((l) => l.rank === 0 && l.phase === 'forged');
      assert.ok(at1 && at0, `a rank did not report:\n${r.stdout}\n${r.stderr}`);
      assert.is(at1!.code, 'EPROTO', JSON.stringify(at1));
      assert.match(at1!.message!, why);
      assert.is(at0!.code, 'EPROTO', `rank 0 learns why the job ended: ${JSON.stringify(at0)}`);
    });
  }
}

test.run();
