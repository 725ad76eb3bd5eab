/**
 * One side of the lost-wakeup race of test/native/remote-fence.test.ts, as a worker thread or
 * a child process: `fence-race.js <segment> producer|sleeper <rounds>`.
 *
 * Words of the segment: 0 the published round (its own cache line), 16 the sleeper count,
 * 17 the bell, 32 the round the sleeper has started, 48 rings, 49 sleeps, 50 missed.
 *
 * Each round the sleeper announces it, then goes to sleep on a fencing FutexBell at once;
 * the producer waits for the announcement, lets a varying few nanoseconds pass, publishes the
 * round with a plain store and calls ringBell, as a delegationrpc client commits. A wakeup is
 * lost when the sleeper's look after registering missed the store and the producer's look
 * missed the registration: the sleeper then sleeps a whole slice with the round published.
 * The sleeper counts that case exactly (its look said "not ready", and no ring came for the
 * round), not by time.
 */
import { isMainThread, workerData } from 'node:worker_threads';
import { FutexBell, ringBell } from '../../../src/host/futex-bell.js';
import { joinRemoteFences } from '../../../src/host/remote-fence.js';
import { native } from '../../../src/native/binding.js';

const args: string[] = isMainThread ? process.argv.slice(2) : (workerData as string[]);
const [name, role, roundsArg] = args;
const rounds = Number(roundsArg);
const w = new Int32Array(native.shmOpen(name));
const ROUND = 0;
const SLEEPING = 16;
const BELL = 17;
const STARTED = 32;
const RINGS = 48;
const SLEEPS = 49;
const MISSED = 50;

if (!joinRemoteFences()) throw new Error('membarrier is not available: the race has nothing to test');

if (role === 'producer') {
  let seed = 12345;
  for (let r = 1; r <= rounds; r++) {
    while (Atomics.load(w, STARTED) !== r);
    seed = (Math.imul(seed, 1103515245) + 12345) & 0x7fffffff;
    // 0-63 empty iterations: lands the store anywhere around the sleeper's registration.
    for (let i = (seed >>> 8) & 63; i > 0; i--);
    const before = Atomics.load(w, BELL);
    w[ROUND] = r; // the plain publish of a fencing bell's producer
    ringBell(w, SLEEPING, BELL);
    if (Atomics.load(w, BELL) !== before) Atomics.add(w, RINGS, 1);
  }
} else {
  const bell = new FutexBell(w, SLEEPING, BELL, true);
  for (let r = 1; r <= rounds; r++) {
    const bellBefore = Atomics.load(w, BELL);
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
      bell.sleepSync(50, ready);
      // Slept (its look said no) while nobody rang for this round, and the round is out: lost.
      if (missedLook && Atomics.load(w, BELL) === bellBefore && w[ROUND] === r) Atomics.add(w, MISSED, 1);
    }
  }
}
if (!isMainThread) process.exitCode = 0;
