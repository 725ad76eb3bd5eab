/**
 * One side of the lost-wakeup race of test/native/remote-fence.test.ts, as a worker thread or
 * a child process: `fence-race.js <segment> producer|sleeper <rounds>`.
 *
 * Words of the segment: 0 the published round (its own cache line), 16 the sleeper count,
 * 17 the bell, 32 the round the sleeper has started, 48 rings, 49 sleeps, 50 missed, 51 the
 * sleeper quit, 52 futex waits (sleeps whose look said no), 64 the last round the producer
 * rang for (its own line: the counters' line moving between cores shifts the race's timing); a
 * Float64 at byte 512: when the producer published (CLOCK_MONOTONIC, ms: one clock for every
 * process of the host).
 *
 * Each round the sleeper announces it, then goes to sleep on a fencing FutexBell at once;
 * the producer waits for the announcement, lets a varying few nanoseconds pass, publishes the
 * round with a plain store and calls ringBell, as a delegationrpc client commits. A wakeup is
 * lost when the sleeper's look after registering missed the store and the producer's look
 * missed the registration: the sleeper then sleeps a whole slice with the round published.
 * The sleeper counts that case: its look said "not ready", no ring came for the round, and it
 * woke a whole slice (50 ms) after the producer had published. Each condition alone has
 * innocent causes (a wake-up of the previous round arriving late ends a sleep early; a
 * producer descheduled for a slice publishes after the sleeper gave up); together they are a
 * sleeper that slept through a publish nobody told it of.
 */
import { isMainThread, workerData } from 'node:worker_threads';
import { FutexBell, ringBell } from '../../../src/host/futex-bell.js';
import { fenceRemoteThreads, joinRemoteFences } from '../../../src/host/remote-fence.js';
import { native } from '../../../src/native/binding.js';

const args: string[] = isMainThread ? process.argv.slice(2) : (workerData as string[]);
const [name, role, roundsArg] = args;
const rounds = Number(roundsArg);
const sab = native.shmOpen(name);
const w = new Int32Array(sab);
const publishedAt = new Float64Array(sab, 512, 1);
const SLICE_MS = 50;
const now = () => Number(process.hrtime.bigint()) / 1e6;
const ROUND = 0;
const SLEEPING = 16;
const BELL = 17;
const STARTED = 32;
const RINGS = 48;
const SLEEPS = 49;
const MISSED = 50;
const QUIT = 51;
const WAITS = 52;
const RANG = 64;

if (!joinRemoteFences() || !fenceRemoteThreads()) throw new Error('membarrier is not available: the race has nothing to test');

if (role === 'producer') {
  let seed = 12345;
  for (let r = 1; r <= rounds; r++) {
    // A sleeper gone (it threw, or was killed) must not leave this loop spinning for good.
    for (let spins = 1; Atomics.load(w, STARTED) !== r; spins++) {
      if ((spins & 0xfffff) === 0 && Atomics.load(w, QUIT) !== 0) throw new Error(`fence-race producer: the sleeper quit before round ${r}`);
    }
    seed = (Math.imul(seed, 1103515245) + 12345) & 0x7fffffff;
    // 0-63 empty iterations: lands the store anywhere around the sleeper's registration.
    for (let i = (seed >>> 8) & 63; i > 0; i--);
    const before = Atomics.load(w, BELL);
    publishedAt[0] = now();
    w[ROUND] = r; // the plain publish of a fencing bell's producer (after the time: x86 keeps the order)
    ringBell(w, SLEEPING, BELL);
    if (Atomics.load(w, BELL) !== before) {
      w[RANG] = r;
      Atomics.add(w, RINGS, 1);
    }
  }
} else {
  const bell = new FutexBell(w, SLEEPING, BELL, true);
  process.on('exit', () => Atomics.store(w, QUIT, 1));
  for (let r = 1; r <= rounds; r++) {
    Atomics.store(w, STARTED, r);
    let looks = 0;
    let missedLook = false;
    const ready = () => {
      const yes = w[ROUND] === r;
      // The look FutexBell makes after registering: "no" means it goes to sleep.
      if (++looks === 1 && !yes) missedLook = true;
      return yes;
    };
    while (w[ROUND] !== r) {
      looks = 0;
      missedLook = false;
      Atomics.add(w, SLEEPS, 1);
      bell.sleepSync(SLICE_MS, ready);
      const woke = now();
      if (missedLook) Atomics.add(w, WAITS, 1);
      // Slept (its look said no), nobody rang for this round, and the round had been out for
      // most of the slice when it woke: lost.
      if (missedLook && Atomics.load(w, RANG) !== r && w[ROUND] === r && woke - publishedAt[0] > SLICE_MS * 0.8) Atomics.add(w, MISSED, 1);
    }
  }
}
if (!isMainThread) process.exitCode = 0;
