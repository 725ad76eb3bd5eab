/**
 * `weft sim daemon-loop`: the model is deterministic, it is bistable the way the memo reports
 * (NP=8 collapses, NP=16 holds; the start decides where a run settles), a poll budget moves a
 * run between the equilibria, its bookkeeping conserves requests, and the command prints rows
 * with the fields and refuses bad options.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { simulate } from '../../bench/sim/daemon-loop/model.js';
import { checkParams, DEFAULT_PARAMS, type DaemonLoopParams } from '../../bench/sim/daemon-loop/params.js';
import { recoveryTime } from '../../bench/sim/daemon-loop/report.js';

const WEFT = fileURLToPath(new URL('../../../bin/weft.js', import.meta.url));
const short = (over: Partial<DaemonLoopParams>): DaemonLoopParams => ({ ...DEFAULT_PARAMS, durationMs: 6, warmupMs: 3, ...over });

test('deterministic: the same parameters give the same numbers; another seed gives others', () => {
  const a = simulate(short({ np: 8 }), 'none');
  const b = simulate(short({ np: 8 }), 'none');
  assert.is(a.mopsTotal, b.mopsTotal);
  assert.is(a.batchAvg, b.batchAvg);
  assert.equal(a.series.batch, b.series.batch);
  const c = simulate(short({ np: 8, seed: 2 }), 'none');
  assert.is.not(c.mopsTotal, a.mopsTotal);
});

test('bistable as the memo: without a budget NP=8 collapses (batch <= 2, <= 1/4 of NP=16 per rank) and NP=16 holds (batch >= 20)', () => {
  const np8 = simulate(short({ np: 8 }), 'none');
  const np16 = simulate(short({ np: 16 }), 'none');
  assert.ok(np8.batchAvg <= 2, `NP=8 batch ${np8.batchAvg}`);
  assert.ok(np16.batchAvg >= 20, `NP=16 batch ${np16.batchAvg}`);
  assert.ok(np8.mopsPerRank <= np16.mopsPerRank / 4, `NP=8 ${np8.mopsPerRank} vs NP=16 ${np16.mopsPerRank} Mops per rank`);
  // the collapsed state keeps its requests in flight: the pipeline is full, the batches are not
  assert.ok(np8.outstandingAvg > np16.outstandingAvg);
  assert.ok(np8.messagesPerWrite < 2, `NP=8 WRITEs carry ${np8.messagesPerWrite} messages`);
});

test('the start decides: NP=8 from a synchronous burst settles high, from clients starting one by one low', () => {
  const Q = DEFAULT_PARAMS.clients * DEFAULT_PARAMS.qd;
  const burst = simulate(short({ np: 8, startBurst: Q }), 'none');
  const thin = simulate(short({ np: 8 }), 'none');
  assert.ok(burst.batchAvg >= 20, `burst: batch ${burst.batchAvg}`);
  assert.ok(thin.batchAvg <= 2, `thin: batch ${thin.batchAvg}`);
  assert.ok(burst.mopsPerRank > 4 * thin.mopsPerRank);
});

test('client requests are taken in the order they become ready, not the order they were written', () => {
  // 200 requests at once, the other 1,272 clients starting over 5 ms: within the first ms the
  // 200 must cycle many times. Were a re-issued request queued behind clients that have not
  // started yet, each rank would answer at most 200 + 1,272 / 5 = 454 in that ms.
  const r = simulate(short({ np: 2, startBurst: 200, startSpreadUs: 5000, durationMs: 1, warmupMs: 0, binUs: 10, seriesMs: 1 }), 'none');
  const answered = r.series.mops.reduce((a, m, i) => a + m * ((r.series.t[i + 1] ?? 1000) - r.series.t[i]), 0);
  assert.ok(answered > 1000, `answers per rank in the first ms: ${answered}`);
});

test('a poll budget of 16 keeps NP=8 out of the collapse (>= 4x)', () => {
  const none = simulate(short({ np: 8 }), 'none');
  const fixed = simulate(short({ np: 8 }), 'fixed:16');
  assert.ok(fixed.mopsPerRank >= 4 * none.mopsPerRank, `fixed:16 ${fixed.mopsPerRank} vs none ${none.mopsPerRank}`);
  assert.ok(Math.abs(fixed.settingAvg - 15) < 1e-9);
});

test('conservation: calls in flight never exceed clients x QD; every controller runs', () => {
  const Q = DEFAULT_PARAMS.clients * DEFAULT_PARAMS.qd;
  for (const c of ['none', 'fixed:4', 'adaptive', 'min-batch', 'batch-hold']) {
    const r = simulate(short({ np: 4, durationMs: 4, warmupMs: 1 }), c);
    assert.ok(r.outstandingAvg <= Q, `${c}: ${r.outstandingAvg}`);
    for (const o of r.series.outstanding) assert.ok(o === null || (o >= 0 && o <= Q), `${c}: series ${o}`);
    const h = r.batchHist.reduce((a, b) => a + b, 0);
    assert.ok(Math.abs(h - 1) < 1e-9, `${c}: histogram sums to ${h}`);
    assert.ok(r.mopsTotal > 0);
  }
});

test('induced collapse: clients stall and come back thinly; NP=8 collapses without control, a budget brings it back', () => {
  const Q = DEFAULT_PARAMS.clients * DEFAULT_PARAMS.qd;
  const at = { np: 8, startBurst: Q, durationMs: 8, warmupMs: 6, collapseAtMs: 3, collapseForMs: 1 };
  const none = simulate(short(at), 'none');
  const fixed = simulate(short(at), 'fixed:32');
  assert.is(none.restartUs, 4000);
  assert.ok(none.afterStallBatch !== null && none.afterStallBatch <= 5, `none after the stall: batch ${none.afterStallBatch}`);
  assert.ok(none.mopsPerRank * 4 <= fixed.mopsPerRank, `after the stall: none ${none.mopsPerRank}, fixed:32 ${fixed.mopsPerRank} Mops per rank`);
  assert.is(recoveryTime(none, fixed.mopsPerRank), null, 'without control it stays collapsed');
  assert.ok(fixed.afterStallBatch !== null && fixed.afterStallBatch >= 20, `fixed:32 after the stall: batch ${fixed.afterStallBatch}`);
  const t = recoveryTime(fixed, fixed.mopsPerRank);
  assert.ok(t !== null, 'fixed:32 is back');
  assert.is(recoveryTime(fixed, 0), 0, 'a zero reference is reached at once');
  assert.is(recoveryTime(simulate(short({ np: 4, durationMs: 2, warmupMs: 1 }), 'none'), 1), null, 'no induced collapse: no recovery time');
});

test('min-batch, the same parameters at every NP: within 15% of the better of none and fixed:16 at QD 32 and QD 1, and back from the induced collapse', () => {
  for (const qd of [32, 1]) {
    for (const np of [2, 8, 16]) {
      const p = short({ np, qd });
      const best = Math.max(simulate(p, 'none').mopsPerRank, simulate(p, 'fixed:16').mopsPerRank);
      const m = simulate(p, 'min-batch');
      assert.ok(m.mopsPerRank >= 0.85 * best, `QD ${qd} NP=${np}: min-batch ${m.mopsPerRank} vs best fixed ${best} Mops per rank`);
    }
  }
  const Q = DEFAULT_PARAMS.clients * DEFAULT_PARAMS.qd;
  const at = { np: 8, startBurst: Q, durationMs: 8, warmupMs: 6, collapseAtMs: 3, collapseForMs: 1 };
  const fixed = simulate(short(at), 'fixed:16');
  const m = simulate(short(at), 'min-batch');
  const t = recoveryTime(m, fixed.mopsPerRank);
  assert.ok(t !== null && t <= 2000, `min-batch back in ${t} us`);
  // The memo's controller stays down in the same run: the test can tell the two apart.
  assert.is(recoveryTime(simulate(short(at), 'adaptive'), fixed.mopsPerRank), null);
});

test('parameters are checked', () => {
  assert.is(checkParams(DEFAULT_PARAMS), undefined);
  assert.match(checkParams({ ...DEFAULT_PARAMS, np: 1 })!, /np 1/);
  assert.match(checkParams({ ...DEFAULT_PARAMS, np: 65 })!, /np 65/);
  assert.match(checkParams({ ...DEFAULT_PARAMS, rttUs: 0 })!, /rttUs/);
  assert.match(checkParams({ ...DEFAULT_PARAMS, warmupMs: 30 })!, /warm-up/);
  assert.match(checkParams({ ...DEFAULT_PARAMS, jitterUs: -1 })!, /jitterUs/);
  assert.match(checkParams({ ...DEFAULT_PARAMS, hotShare: 2 })!, /hot share/);
  assert.match(checkParams({ ...DEFAULT_PARAMS, ipcUs: 0, ringUs: 0, pollUs: 0 })!, /loop must cost/);
});

test('weft sim daemon-loop --json prints rows with the issue fields; bad options fail with one line', () => {
  const out = mkdtempSync(path.join(tmpdir(), 'weft-sim-'));
  try {
    const env = { ...process.env, WEFT_BENCH_OUT: out };
    const r = spawnSync(process.execPath, [WEFT, 'sim', 'daemon-loop', '--np', '4,8', '--controllers', 'none,fixed:16', '--duration-ms', '4', '--warmup-ms', '1', '--collapse-at-ms', '2', '--collapse-for-ms', '0.5', '--json', '--no-plots'], { env, encoding: 'utf8', timeout: 120_000 });
    assert.is(r.status, 0, r.stderr);
    const rows = JSON.parse(r.stdout) as Record<string, unknown>[];
    assert.is(rows.length, 4);
    for (const row of rows) {
      for (const k of ['bench', 'np', 'controller', 'mops_total', 'mops_per_rank', 'batch_avg', 'outstanding_avg', 'loops_per_s', 'batch_hist', 'vs_best_fixed']) assert.ok(k in row, k);
      assert.is(row.bench, 'sim');
    }
    for (const [args, msg] of [
      [['--np', '1'], /--np/],
      [['--controllers', 'none,bogus'], /bogus/],
      [['--duration-ms', '2', '--warmup-ms', '3'], /warm-up/],
      [['--collapse-for-ms', '0'], /collapse/],
    ] as [string[], RegExp][]) {
      const bad = spawnSync(process.execPath, [WEFT, 'sim', 'daemon-loop', '--no-plots', ...args], { env, encoding: 'utf8', timeout: 60_000 });
      assert.is(bad.status, 1, `${args.join(' ')}: ${bad.stdout}`);
      assert.match(bad.stderr, msg);
      assert.not.match(bad.stderr, /at .*\.js:\d+/, 'no stack');
    }
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});

test.run();
