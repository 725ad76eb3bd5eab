/**
 * The poll controllers' state machines on scripted observation sequences: each step of the
 * memo's adaptive budget (warm-up self-identification, hysteresis, hold, collapse recovery),
 * of the minimum batch (doubling, shrinking only after waits, the in-flight cap, the base RTT)
 * and of the batch hold (rate EWMA, clamp, on/off), and the spec parser.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { AdaptiveBatchHold, AdaptiveMinBatch, AdaptivePollBudget, createPollController, FixedPollBudget, MIN_BATCH_DEFAULTS, NoPollControl } from 'weftjs/rpc';

const W = 100; // warm-up loops per phase in these tests

/** Runs `n` loops of (batch, loopUs) with one RTT sample of `rttUs` each. */
function feed(c: AdaptivePollBudget, n: number, batch: number, loopUs: number, rttUs: number): void {
  for (let i = 0; i < n; i++) {
    c.rtt(rttUs);
    c.endLoop(batch, loopUs);
  }
}

/** An adaptive controller through its warm-up with B0 = b0 at u = 0 and B1 = b1 at u = 8. */
function warmed(b0: number, b1: number, loopUs = 0.7, rttUs = 6): AdaptivePollBudget {
  const c = new AdaptivePollBudget({ warmupLoops: W, rttUs });
  feed(c, W, b0, loopUs, rttUs);
  feed(c, W, b1, loopUs, rttUs);
  return c;
}

test('specs: none, fixed:N, adaptive, min-batch, batch-hold; anything else is a RangeError naming the choices', () => {
  assert.instance(createPollController('none'), NoPollControl);
  const f = createPollController('fixed:16');
  assert.instance(f, FixedPollBudget);
  assert.is(f.extraPolls, 15);
  assert.is(f.pollUntil, 16);
  assert.is(f.setting, 15);
  const one = createPollController('fixed:0');
  assert.is(one.extraPolls, 0);
  assert.is(one.pollUntil, 1);
  assert.instance(createPollController(' adaptive '), AdaptivePollBudget);
  assert.instance(createPollController('batch-hold', { batchTarget: 7 }), AdaptiveBatchHold);
  assert.instance(createPollController('min-batch'), AdaptiveMinBatch);
  for (const bad of ['', 'fixed', 'fixed:', 'fixed:-1', 'fixed:1.5', 'fixed:x', 'adaptive2', 'hold']) {
    assert.throws(() => createPollController(bad), (e: Error) => e instanceof RangeError && /none \| fixed:N \| adaptive \| min-batch \| batch-hold/.test(e.message), bad);
  }
  assert.throws(() => new FixedPollBudget(2 ** 21), RangeError);
  assert.throws(() => new AdaptiveBatchHold({ batchTarget: 0 }), RangeError);
  assert.throws(() => new AdaptiveMinBatch({ rttUs: 0 }), RangeError);
});

test('none and fixed never change, whatever they observe', () => {
  const n = new NoPollControl();
  const f = new FixedPollBudget(16);
  for (let i = 0; i < 1000; i++) {
    for (const c of [n, f]) {
      c.rtt(1000);
      c.endLoop(i % 3, 0.5);
      assert.ok(!c.shouldHold());
    }
  }
  assert.is(n.extraPolls, 0);
  assert.is(f.extraPolls, 15);
  assert.is(f.pollUntil, 16);
});

test('adaptive warm-up: u = 0 for the first phase, u_probe for the second, then gains from the sensitivities', () => {
  const c = new AdaptivePollBudget({ warmupLoops: W, rttUs: 6 });
  assert.is(c.extraPolls, 0);
  assert.is(c.pollUntil, 1, 'extra polls stop at the first completion (the memo: if cqe > 0 break)');
  feed(c, W - 1, 0.5, 0.7, 6);
  assert.is(c.extraPolls, 0);
  feed(c, 1, 0.5, 0.7, 6);
  assert.is(c.extraPolls, 8, 'phase 2 probes u = 8');
  assert.not.ok(c.identified.active);
  feed(c, W, 1.3, 0.7, 6);
  const id = c.identified;
  assert.ok(id.active);
  assert.is(c.extraPolls, 0, 'control starts from u = 0');
  assert.ok(Math.abs(id.b0 - 0.5) < 1e-9);
  // dB/du = (1.3 - 0.5) / 8 = 0.1 -> step_up = clamp(round(2 / 0.1), 1, 8) = 8
  assert.is(id.stepUp, 8);
  assert.is(id.stepDown, 16);
  // R0 = rtt / loop at u = 0 = 6 / 0.7 -> u_max = clamp(round(2.5 * 8.57), 8, 64) = 21
  assert.is(id.uMax, 21);

  const steep = warmed(0.5, 8.5); // dB/du = 1 -> step_up 2, step_down 4
  assert.is(steep.identified.stepUp, 2);
  assert.is(steep.identified.stepDown, 4);
  const flat = warmed(2, 1); // dB/du < 0 -> 2 / eps, clamped to 8
  assert.is(flat.identified.stepUp, 8);
  const slowLoop = warmed(1, 2, 0.05, 6); // R0 = 120 -> u_max clamps at 64
  assert.is(slowLoop.identified.uMax, 64);
  const fastRtt = warmed(1, 2, 5, 6); // R0 = 1.2 -> u_max clamps at 8
  assert.is(fastRtt.identified.uMax, 8);
});

test('adaptive: rho < rho_low for low_need loops steps u up, then holds hold_min loops before counting again', () => {
  const c = warmed(0.5, 8.5); // step_up 2, u_max 21
  // batch 1 (no collapse: b_ema >= 1), loop 0.7 us against a 6 us RTT: rho ~ 0.12 < 0.8
  feed(c, 63, 1, 0.7, 6);
  assert.is(c.extraPolls, 0, 'not before 64 loops');
  feed(c, 1, 1, 0.7, 6);
  assert.is(c.extraPolls, 2);
  feed(c, 32 + 63, 1, 0.7, 6);
  assert.is(c.extraPolls, 2, '32 held loops, then 63 counted');
  feed(c, 1, 1, 0.7, 6);
  assert.is(c.extraPolls, 4);
  feed(c, 20 * 96, 1, 0.7, 6);
  assert.is(c.extraPolls, c.identified.uMax, 'clamped at u_max');
});

test('adaptive: rho > rho_high with few empty loops for high_need loops steps u down by step_down', () => {
  const c = warmed(0.5, 8.5);
  feed(c, 64 * 10 + 32 * 10, 1, 0.7, 6);
  const u0 = c.extraPolls;
  assert.ok(u0 >= 8);
  // long, busy loops: 20 us against a 6 us RTT, never empty; the loop EWMA needs ~40 loops to pass 1.2 x RTT
  feed(c, 300, 30, 20, 6);
  assert.ok(c.extraPolls < u0, `u went down from ${u0} to ${c.extraPolls}`);
  assert.is((u0 - c.extraPolls) % c.identified.stepDown === 0 || c.extraPolls === 0, true);
  feed(c, 128 * 40, 30, 20, 6);
  assert.is(c.extraPolls, 0, 'down to 0, never below');
});

test('adaptive: in between (rho in band, few empty loops) the counters reset and u stays', () => {
  const c = warmed(0.5, 8.5);
  feed(c, 64 + 32 + 64, 1, 0.7, 6);
  const u = c.extraPolls;
  feed(c, 5000, 5, 6, 6); // rho = 1, never empty
  assert.is(c.extraPolls, u);
});

test('adaptive collapse recovery: b_ema < 1 and e_ema > 0.9 add 2 x step_up every hold_min + 1 loops', () => {
  const c = warmed(0.5, 8.5); // step_up 2
  feed(c, 200, 0, 0.5, 6); // empty loops: e_ema climbs past 0.9, b_ema falls below 1
  const before = c.extraPolls;
  assert.ok(before >= 4, `collapse recovery raised u to ${before}`);
  assert.ok(c.eEma > 0.9 && c.bEma < 1);
  feed(c, 33, 0, 0.5, 6);
  assert.ok(c.extraPolls > before || c.extraPolls === c.identified.uMax);
  feed(c, 33 * 20, 0, 0.5, 6);
  assert.is(c.extraPolls, c.identified.uMax);
});

test('adaptive RTT: each loop folds the mean of its samples into the EWMA (alpha 0.02); a loop without samples reuses the last', () => {
  const c = new AdaptivePollBudget({ warmupLoops: W, rttUs: 6 });
  c.rtt(10);
  c.rtt(30);
  c.endLoop(1, 1);
  assert.ok(Math.abs(c.rttEmaUs - (6 * 0.98 + 20 * 0.02)) < 1e-9);
  const after = c.rttEmaUs;
  c.endLoop(1, 1);
  assert.ok(Math.abs(c.rttEmaUs - (after * 0.98 + 20 * 0.02)) < 1e-9);
  c.rtt(Number.NaN); // ignored
  c.rtt(-1); // ignored
  c.endLoop(1, 1);
  assert.ok(Number.isFinite(c.rttEmaUs));
});

test('batch hold: holds until target or hold time or nothing in flight; hold = target / rate_ewma, clamped to 0.5-100 us', () => {
  const c = new AdaptiveBatchHold({ batchTarget: 8 });
  assert.is(c.holdUs, 10, 'starts at the notes default of 10 us');
  assert.ok(c.shouldHold());
  assert.not.ok(c.shouldRelease(3, 5, 10));
  assert.ok(c.shouldRelease(3, 10, 10), 'hold time passed');
  assert.ok(c.shouldRelease(8, 1, 10), 'target reached');
  assert.ok(c.shouldRelease(1, 1, 0), 'nothing in flight');
  c.released(4, 10); // rate 0.4 / us -> hold 20 us; 4 < 8: keep holding
  assert.ok(Math.abs(c.holdUs - 20) < 1e-9);
  assert.ok(c.shouldHold());
  c.released(16, 2); // rate 8 -> ewma 0.875 * 0.4 + 0.125 * 8 = 1.35 -> hold 5.93; 16 >= 8: healthy, stop holding
  assert.ok(Math.abs(c.rateEwma - 1.35) < 1e-9);
  assert.ok(Math.abs(c.holdUs - 8 / 1.35) < 1e-9);
  assert.not.ok(c.shouldHold());
  c.endLoop(3);
  assert.not.ok(c.shouldHold(), 'a loop with responses keeps it off');
  c.endLoop(0);
  assert.ok(c.shouldHold(), 'a loop without responses turns it on');
  for (let i = 0; i < 200; i++) c.released(1, 1000);
  assert.is(c.holdUs, 100, 'clamped at 100 us');
  for (let i = 0; i < 200; i++) c.released(1000, 0.001);
  assert.is(c.holdUs, 0.5, 'clamped at 0.5 us');
  const before = c.rateEwma;
  c.released(5, 0); // no time held: no rate sample
  assert.is(c.rateEwma, before);
  assert.is(c.settingUnit, 'us');
});


/**
 * Runs `n` loops of a min-batch controller: `batch` responses in `loopUs`, `inFlight` left, and
 * one RTT sample of `rttUs` per loop (default 60 us: 10x the 6 us base, calls queue).
 */
function loops(c: AdaptiveMinBatch, n: number, batch: number, loopUs: number, inFlight = 1000, rttUs = 60): void {
  for (let i = 0; i < n; i++) {
    c.rtt(rttUs);
    c.endLoop(batch, loopUs, inFlight);
  }
}

test('min-batch: starts as one poll, doubles n after 16 short loops in a row, up to 256', () => {
  const d = MIN_BATCH_DEFAULTS;
  const c = new AdaptiveMinBatch({ rttUs: 6 });
  assert.is(c.extraPolls, 0);
  assert.is(c.pollUntil, 1);
  loops(c, d.lowNeed - 1, 1, 0.7); // rho = 0.7 / 6, below 0.8
  assert.is(c.n, 1, 'not before 16 loops');
  loops(c, 1, 1, 0.7);
  assert.is(c.n, 2);
  assert.is(c.pollUntil, 2);
  assert.is(c.extraPolls, 1);
  assert.is(c.setting, 1);
  loops(c, d.lowNeed * 3, 1, 0.7);
  assert.is(c.n, 16);
  assert.is(c.extraPolls, 15);
  loops(c, d.lowNeed * 20, 1, 0.7);
  assert.is(c.n, d.maxBatch, 'capped');
});

test('min-batch: before the first round trip, calls in flight count as queued; a loop that makes no calls never waits', () => {
  const c = new AdaptiveMinBatch();
  for (let i = 0; i < 10_000; i++) c.endLoop(0, 0.7, 0);
  assert.is(c.n, 1);
  assert.is(c.extraPolls, 0);
  for (let i = 0; i < 10_000; i++) c.endLoop(0, 0.7);
  assert.is(c.n, 1);
  const starting = new AdaptiveMinBatch();
  for (let i = 0; i < MIN_BATCH_DEFAULTS.lowNeed * 2; i++) starting.endLoop(0, 0.7, 100);
  assert.is(starting.n, 4, 'short loops, 100 calls out, no answer yet: a batch is worth waiting for');
});

test('min-batch: in the band n stays, even after waits; above it n shrinks by n/8, only after loops that waited', () => {
  const d = MIN_BATCH_DEFAULTS;
  const steady = new AdaptiveMinBatch({ rttUs: 6 });
  loops(steady, d.lowNeed * 3, 1, 0.7);
  assert.is(steady.n, 8);
  steady.loopEmaUs = 6; // skip the EWMA's climb: the loops below are in the band from the first
  loops(steady, 10_000, 3, 6); // rho 1, and every loop waited (3 of 8)
  loops(steady, 10_000, 3, 4.9); // rho 0.82
  loops(steady, 10_000, 3, 7.1); // rho 1.18
  assert.is(steady.n, 8);
  loops(steady, 1000, 3, 7.4); // rho 1.23, waited: out of the band
  assert.ok(steady.n < 8, `n ${steady.n}`);
  const c = new AdaptiveMinBatch({ rttUs: 6 });
  loops(c, d.lowNeed * 6, 1, 0.7);
  assert.is(c.n, 64);
  // Long loops whose polls brought more than n: n is insurance, it stays.
  loops(c, 1000, 300, 60);
  assert.is(c.n, 64);
  // Long loops that waited for their batch (batch <= n): n shrinks by an eighth per 64.
  loops(c, d.highNeed - 1, 64, 60);
  assert.is(c.n, 64);
  loops(c, 1, 64, 60);
  assert.is(c.n, 56);
  loops(c, d.highNeed, 10, 60); // ran out of polls: waited too
  assert.is(c.n, 49);
  // A loop that did not wait in between starts the count again.
  loops(c, d.highNeed - 1, 10, 60);
  loops(c, 1, 300, 60);
  loops(c, d.highNeed - 1, 10, 60);
  assert.is(c.n, 49);
  // Down to one poll, never below.
  loops(c, d.highNeed * 200, 0, 60);
  assert.is(c.n, 1);
  assert.is(c.extraPolls, 0);
});

test('min-batch: waits for at most a quarter of the calls in flight (polls stay n - 1), none with nothing in flight', () => {
  const d = MIN_BATCH_DEFAULTS;
  const c = new AdaptiveMinBatch({ rttUs: 6 });
  loops(c, d.lowNeed * 5, 1, 0.7, 1000);
  assert.is(c.n, 32);
  assert.is(c.pollUntil, 32);
  c.endLoop(1, 0.7, 40);
  assert.is(c.pollUntil, 10, '40 in flight: wait for 10');
  assert.is(c.extraPolls, 31, 'for up to 31 polls');
  c.endLoop(1, 0.7, 0);
  assert.is(c.pollUntil, 1);
  assert.is(c.extraPolls, 0, 'nothing in flight: no poll waits');
  c.endLoop(1, 0.7, Number.NaN);
  assert.is(c.pollUntil, c.n, 'no count: n itself');
  c.endLoop(1, 0.7);
  assert.is(c.pollUntil, c.n);
  // With 3 in flight a loop waits for 1; loops that waited with nothing queued still shrink n.
  const n0 = c.n;
  for (let i = 0; i < 200; i++) c.rtt(7);
  loops(c, d.highNeed * 4, 1, 0.7, 3, 7);
  assert.is(c.pollUntil, 1);
  assert.ok(c.n < n0, `n ${c.n}`);
});

test('min-batch: n grows only while calls queue (RTT over 3x the base), and shrinks after waits while they do not (under 1.5x)', () => {
  const d = MIN_BATCH_DEFAULTS;
  const c = new AdaptiveMinBatch({ rttUs: 6 });
  loops(c, 1000, 1, 0.7, 1000, 8); // 1.33x the base: nothing queues
  assert.is(c.n, 1, 'short loops, but no queue: no waiting');
  for (let i = 0; i < 200; i++) c.rtt(60); // a queue forms
  assert.ok(c.rttEmaUs > d.queuedAbove * 6);
  loops(c, d.lowNeed * 4, 1, 0.7);
  assert.is(c.n, 16);
  for (let i = 0; i < 200; i++) c.rtt(12);
  loops(c, 1000, 2, 0.7, 1000, 12); // 2x: neither
  assert.is(c.n, 16, 'between 1.5x and 3x nothing moves');
  c.loopEmaUs = 6;
  for (let i = 0; i < 200; i++) c.rtt(7);
  loops(c, 200, 400, 6, 1000, 7); // in the band and nothing queues, but the loops did not wait
  assert.is(c.n, 16);
  loops(c, d.highNeed, 10, 6, 1000, 7); // ... and now they waited (10 of 16)
  assert.is(c.n, 14);
});

test('min-batch: the base RTT is the smallest sample, never raised by queueing; bad inputs are skipped', () => {
  const c = new AdaptiveMinBatch({ rttUs: 6 });
  c.rtt(1900); // a collapse's queueing delay
  assert.is(c.rttBaseUs, 6);
  c.rtt(4);
  for (const bad of [-1, 0, Number.NaN, Infinity]) c.rtt(bad);
  assert.is(c.rttBaseUs, 4);
  // Loops of 4 us are in the band against 4 us, so n stays; against 6 they would be short.
  loops(c, 100, 1, 4);
  assert.is(c.n, 1);
  const e = c.loopEmaUs;
  for (const bad of [Number.NaN, -3, Infinity]) c.endLoop(1, bad, 10);
  assert.is(c.loopEmaUs, e, 'a loop time that is not a time is not folded in');
  assert.throws(() => new AdaptiveMinBatch({ rttUs: Infinity }), RangeError);
});

test.run();
