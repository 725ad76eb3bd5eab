/**
 * The transfer engine between real processes (test/transfer/workers/transfer-rank.ts), on
 * shared memory and on libfabric (tcp): random batches verified byte for byte among 3 ranks,
 * misuse and the descriptor in the store, a key retirement a blocked peer cannot confirm
 * (fabric), and a target SIGKILLed mid-stream. Across emulated
 * hosts: test/hosts/transfer-hosts.test.ts.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { PassThrough } from 'node:stream';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { launch } from '../../src/launch/run.js';
import { runWeft } from '../../harness/weft-job.js';
import { native } from '../../src/native/binding.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const RANK = path.join(here, 'workers', 'transfer-rank.js');
const providers = native.ofi.available ? ['shm', 'ofi'] : ['shm'];
if (!native.ofi.available) console.log('transfer.test: ofi cases skipped: weft was built without libfabric (apt-get install libfabric-dev, then npm rebuild)');

function run(n: number, provider: string, scenario: string, timeoutMs = 300_000): Promise<{ code: number | null; out: string }> {
  return runWeft(['run', '-n', String(n), '--provider', provider, RANK, scenario], timeoutMs);
}

const report = (out: string, k: number) => JSON.parse(new RegExp(`ok rank ${k}: (\\{.*\\})`).exec(out)?.[1] ?? 'null');

for (const provider of providers) {
  test(`random READ/WRITE batches among 3 ranks, 1 B to 8 MiB, unaligned, 3 batches in flight, verified byte for byte (${provider})`, async () => {
    const r = await run(3, provider, 'random');
    assert.is(r.code, 0, r.out.slice(-3000));
    for (let k = 0; k < 3; k++) {
      const rep = report(r.out, k);
      assert.ok(rep, r.out.slice(-3000));
      assert.ok(rep.requests > 60 && rep.checks > 60 && rep.bytes > 0, JSON.stringify(rep));
      assert.ok(rep.slices > rep.requests, `requests were not cut into slices: ${JSON.stringify(rep)}`);
    }
    assert.not.match(r.out, /leaked in \/dev\/shm/);
  });

  test(`the descriptor in the store, INVALID requests, refusals in flight, a late buffer, a broken path retried (${provider})`, async () => {
    const r = await run(3, provider, 'misuse', 180_000);
    assert.is(r.code, 0, r.out.slice(-3000));
    for (let k = 0; k < 3; k++) {
      const rep = report(r.out, k);
      assert.ok(rep, r.out.slice(-3000));
      assert.is(rep.reasons, 8);
    }
  });

  if (provider === 'ofi') {
    test('an unregister a blocked peer cannot confirm: ETIMEDOUT naming it, the key stays valid, the connection works after (ofi)', async () => {
      const r = await run(2, provider, 'retire', 90_000);
      assert.is(r.code, 0, r.out.slice(-3000));
      assert.ok(report(r.out, 0) && report(r.out, 1), r.out.slice(-3000));
    });
  }

  test(`a rank that never opens its engine: the others' open fails within its timeout, naming it (${provider})`, async () => {
    const r = await run(2, provider, 'noopen', 60_000);
    assert.is(r.code, 0, r.out.slice(-3000));
    assert.ok(report(r.out, 0), r.out.slice(-3000));
  });

  test(`a target SIGKILLed mid-stream: the initiator's requests FAILED within the timeout, naming the rank (${provider})`, async () => {
    const out = new PassThrough();
    let text = '';
    out.on('data', (d) => (text += d));
    let killedAt = 0;
    const watcher = setInterval(() => {
      const m = /target pid (\d+)/.exec(text);
      if (m && /streaming/.test(text) && !killedAt) {
        // A few batches in: then the kill.
        setTimeout(() => {
          killedAt = Date.now();
          process.kill(Number(m[1]), 'SIGKILL');
        }, 200);
        clearInterval(watcher);
      }
    }, 20);
    const code = await launch({ ranks: 2, script: RANK, args: ['kill'], provider, out, err: out, color: false, failGraceMs: 40_000 });
    clearInterval(watcher);
    assert.ok(killedAt > 0, text.slice(-3000));
    const m = /failed at (\d+) ms \(Date.now\), (\d+) batches before, statuses ([A-Z,]+); reason: (.*); next request (\w+) in (\d+) ms: (.*)/.exec(text);
    assert.ok(m, text.slice(-3000));
    const afterKill = Number(m[1]) - killedAt;
    assert.ok(afterKill < 20_000, `FAILED ${afterKill} ms after the kill (request timeout 20 s)`);
    assert.ok(Number(m[2]) > 0, 'no batch completed before the kill');
    assert.match(m[3], /FAILED/);
    assert.match(m[4], /rank 1/);
    assert.is(m[5], 'FAILED');
    assert.match(m[7], /rank 1/);
    assert.is.not(code, 0); // rank 1 died
    assert.not.match(text, /leaked in \/dev\/shm/);
  });
}

test.run();
