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

test('the start decides: NP=8 from the full synchronous burst settles high, from the thin start low', () => {
  const Q = DEFAULT_PARAMS.clients * DEFAULT_PARAMS.qd;
  const burst = simulate(short({ np: 8, startBurst: Q }), 'none');
  const thin = simulate(short({ np: 8 }), 'none');
  assert.ok(burst.batchAvg >= 20, `burst: batch ${burst.batchAvg}`);
  assert.ok(thin.batchAvg <= 2, `thin: batch ${thin.batchAvg}`);
  assert.ok(burst.mopsPerRank > 4 * thin.mopsPerRank);
});

test('a poll budget of 16 keeps NP=8 out of the collapse (>= 4x)', () => {
  const none = simulate(short({ np: 8 }), 'none');
  const fixed = simulate(short({ np: 8 }), 'fixed:16');
  assert.ok(fixed.mopsPerRank >= 4 * none.mopsPerRank, `fixed:16 ${fixed.mopsPerRank} vs none ${none.mopsPerRank}`);
  assert.ok(Math.abs(fixed.settingAvg - 15) < 1e-9);
});

test('conservation: calls in flight never exceed clients x QD; every controller runs', () => {
  const Q = DEFAULT_PARAMS.clients * DEFAULT_PARAMS.qd;
  for (const c of ['none', 'fixed:4', 'adaptive', 'batch-hold']) {
    const r = simulate(short({ np: 4, durationMs: 4, warmupMs: 1 }), c);
    assert.ok(r.outstandingAvg <= Q, `${c}: ${r.outstandingAvg}`);
    for (const o of r.series.outstanding) assert.ok(o >= 0 && o <= Q, `${c}: series ${o}`);
    const h = r.batchHist.reduce((a, b) => a + b, 0);
    assert.ok(Math.abs(h - 1) < 1e-9, `${c}: histogram sums to ${h}`);
    assert.ok(r.mopsTotal > 0);
  }
});

test('induced collapse: the controller is ignored until the hand-back; recovery is timed from there', () => {
  const r = simulate(short({ np: 8, durationMs: 8, collapseAtMs: 0, collapseForMs: 3 }), 'fixed:64');
  assert.is(r.handBackUs, 3000);
  assert.ok(r.collapsedBatch !== null && r.collapsedBatch <= 2, `collapsed batch ${r.collapsedBatch}`);
  const t = recoveryTime(r, 1e9);
  assert.is(t, null, 'an unreachable reference is never reached');
  const t0 = recoveryTime(r, 0);
  assert.is(t0, 0, 'a zero reference is reached at once');
});

test('parameters are checked', () => {
  assert.is(checkParams(DEFAULT_PARAMS), undefined);
  assert.match(checkParams({ ...DEFAULT_PARAMS, np: 1 })!, /np 1/);
  assert.match(checkParams({ ...DEFAULT_PARAMS, warmupMs: 30 })!, /warm-up/);
  assert.match(checkParams({ ...DEFAULT_PARAMS, jitterUs: -1 })!, /jitterUs/);
  assert.match(checkParams({ ...DEFAULT_PARAMS, hotShare: 2 })!, /hot share/);
  assert.match(checkParams({ ...DEFAULT_PARAMS, ipcUs: 0, ringUs: 0, pollUs: 0 })!, /loop must cost/);
});

test('weft sim daemon-loop --json prints rows with the issue fields; bad options fail with one line', () => {
  const out = mkdtempSync(path.join(tmpdir(), 'weft-sim-'));
  try {
    const env = { ...process.env, WEFT_BENCH_OUT: out };
    const r = spawnSync(process.execPath, [WEFT, 'sim', 'daemon-loop', '--np', '4,8', '--controllers', 'none,fixed:16', '--duration-ms', '4', '--warmup-ms', '1', '--collapse-for-ms', '2', '--json', '--no-plots'], { env, encoding: 'utf8', timeout: 120_000 });
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
      [['--collapse-for-ms', '30'], /collapse/],
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
