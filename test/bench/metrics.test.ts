/** nccl-tests' sizes and bandwidths as bench/collectives/metrics.ts computes them. */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { algbwGBps, busBwFactor, busbwGBps, caseLayout, iterationsFor, parseSizes, sweepSizes, withBandwidth } from '../../bench/collectives/metrics.js';

test('bus bandwidth factors follow nccl-tests PERFORMANCE.md', () => {
  assert.is(busBwFactor('allreduce', 2), 1);
  assert.is(busBwFactor('allreduce', 4), 1.5);
  assert.is(busBwFactor('reduce_scatter', 4), 0.75);
  assert.is(busBwFactor('allgather', 8), 0.875);
  assert.is(busBwFactor('broadcast', 4), 1);
  assert.is(busBwFactor('barrier', 4), null);
});

test('algbw is bytes over time in GB/s; busbw scales it', () => {
  assert.is(algbwGBps(1e6, 1000), 1);
  assert.is(busbwGBps('allreduce', 4, 1e6, 1000), 1.5);
  assert.is(busbwGBps('barrier', 4, 0, 3), null);
  const r = withBandwidth({ system: 'x', op: 'allgather', np: 2, provider: 'p', bytes: 2e6, iters: 1, median_us: 1000, min_us: 1, p90_us: 1 });
  assert.equal([r.algbw_gbps, r.busbw_gbps], [2, 1]);
});

test('sizes per op: whole float32 elements per rank, at least one', () => {
  assert.equal(caseLayout('allreduce', 8, 4), { bytes: 8, sendElems: 2, recvElems: 2 });
  assert.equal(caseLayout('allreduce', 3, 4), { bytes: 4, sendElems: 1, recvElems: 1 });
  assert.equal(caseLayout('allgather', 8, 4), { bytes: 16, sendElems: 1, recvElems: 4 });
  assert.equal(caseLayout('reduce_scatter', 1 << 20, 3), { bytes: 87381 * 12, sendElems: 87381 * 3, recvElems: 87381 });
  assert.equal(caseLayout('barrier', 1 << 20, 3).bytes, 0);
});

test('iteration budget and size parsing', () => {
  assert.equal(iterationsFor(64 << 20, 20, 5, 512 << 20), { iters: 8, warmup: 5 });
  assert.equal(iterationsFor(64 << 20, 20, 5, 64 << 20), { iters: 3, warmup: 1 });
  assert.equal(iterationsFor(8, 20, 5, 512 << 20), { iters: 20, warmup: 5 });
  assert.equal(parseSizes('8,4K,1MiB,64M'), [8, 4096, 1 << 20, 64 << 20]);
  assert.equal(parseSizes('8..2K:4'), [8, 32, 128, 512, 2048]);
  assert.is(sweepSizes(8, 64 << 20).length, 24);
});

test.run();
