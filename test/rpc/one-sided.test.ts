/**
 * Raw one-sided operations between real processes (test/rpc/workers/onesided.ts, scenario
 * onesided): rank 0 rdmaRead's a region rank 1 allocated (64 KiB + 3 bytes) in pieces of odd
 * lengths at odd offsets and whole, rdmaWrite's parts of it, and reads it back; ctx.rawPending
 * counts every posted operation until its completion is polled. A remote range beyond the
 * region completes with an error counted in ctx.rawFailed / ctx.rawError (EREMOTEACCESS on
 * both providers: the initiator checks the range against the imported descriptor) and touches
 * neither side's memory; a local range outside the local region throws EINVAL at once and
 * posts nothing. Rank 1 finally checks its own memory when rank 0 asks over the same endpoint.
 */
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { runScenario } from '../../harness/local-group.js';
import { REGION, WRITES } from './workers/onesided.js';
import { WORKER, providers } from './setup.js';

interface Rank0 {
  remoteLength: number;
  piecesPosted: number;
  pendingAfterPieces: number;
  piecesFailed: number;
  piecesMismatch: string | null;
  pendingAfterWhole: number;
  wholeMismatch: string | null;
  pendingAfterWrites: number;
  readBackMismatch: string | null;
  failedAfterGood: number;
  failures: { what: string; pendingAfterPost: number; failed: number; code?: string; message?: string }[];
  scratchAfterFailures: string | null;
  pendingAfterMixed: number;
  mixedFailed: number;
  mixedMismatch: string | null;
  sync: { what: string; code?: string; message: string }[];
  pendingAfterSync: number;
  stateAfterErrors: string;
  verdict: { ok: boolean; mismatch?: string; length: number };
  rawPendingAtEnd: number;
  rawFailedAtEnd: number;
}

for (const provider of providers) {
  const test = suite(`copyrpc rdmaRead / rdmaWrite (${provider})`);
  test('reads and writes a peer region in pieces and whole; bad remote ranges fail at completion, bad local ranges throw', async () => {
    const { results } = await runScenario('onesided', { n: 2, provider, worker: WORKER, timeoutMs: 60_000 });
    const r = results[0] as Rank0;
    const r1 = results[1] as { verdict: Rank0['verdict'] };

    assert.is(r.remoteLength, REGION, 'the imported region has the allocated length');
    // Reads: every posted operation is pending until its completion is polled.
    assert.is(r.pendingAfterPieces, r.piecesPosted, 'rawPending right after posting the pieces');
    assert.is(r.piecesFailed, 0, 'no piece failed');
    assert.is(r.piecesMismatch, null, `piecewise read (local offset +5, canaries around): ${r.piecesMismatch}`);
    assert.is(r.pendingAfterWhole, 1);
    assert.is(r.wholeMismatch, null, `whole read: ${r.wholeMismatch}`);
    // Writes, read back.
    assert.is(r.pendingAfterWrites, WRITES.length);
    assert.is(r.readBackMismatch, null, `read back after the writes: ${r.readBackMismatch}`);
    assert.is(r.failedAfterGood, 0);

    // Remote ranges beyond the region: one failed completion each, EREMOTEACCESS.
    assert.is(r.failures.length, 4);
    for (const f of r.failures) {
      assert.is(f.pendingAfterPost, 1, `${f.what}: counted as pending until its completion`);
      assert.is(f.failed, 1, `${f.what}: counted in rawFailed`);
      assert.is(f.code, 'EREMOTEACCESS', `${f.what}: ${f.code}: ${f.message}`);
      assert.match(f.message ?? '', /^rank 0: (READ|WRITE) \(wr \d+\) toward rank 1 refused: range \[\d+, \d+\) exceeds the 65539-byte region; target memory is unchanged$/, f.message);
    }
    assert.is(r.scratchAfterFailures, null, `a failed READ changed the local buffer: ${r.scratchAfterFailures}`);
    // A failing READ between two good ones fails alone.
    assert.is(r.pendingAfterMixed, 3);
    assert.is(r.mixedFailed, 1);
    assert.is(r.mixedMismatch, null, `good reads around a failing one: ${r.mixedMismatch}`);

    // Local ranges outside the local region (and non-u32 numbers) throw EINVAL synchronously.
    assert.is(r.sync.length, 5);
    for (const s of r.sync) {
      assert.is(s.code, 'EINVAL', `${s.what}: ${s.code}: ${s.message}`);
      assert.match(s.message, /^rank 0: (READ|WRITE) toward rank 1: /, s.message);
    }
    assert.match(r.sync[0].message, /local range \[65534, 65534\+10\) is outside the 65539-byte region/);
    assert.is(r.pendingAfterSync, 0, 'a throwing post must not count as pending');

    // The endpoint survived the failed operations; rank 1's memory holds exactly A with B
    // in the written ranges (the out-of-range WRITE left its last bytes alone).
    assert.is(r.stateAfterErrors, 'ready');
    assert.equal(r.verdict, { ok: true, length: REGION }, `rank 1's memory: ${r.verdict.mismatch}`);
    assert.equal(r1.verdict, r.verdict);
    assert.is(r.rawPendingAtEnd, 0);
    assert.is(r.rawFailedAtEnd, 5, 'four failing operations plus the one in the mixed batch');
  });
  test.run();
}
