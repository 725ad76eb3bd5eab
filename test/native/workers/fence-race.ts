/**
 * One side of the lost-wakeup race of test/native/remote-fence.test.ts, as a worker thread or
 * a child process: `fence-race.js <segment> producer|sleeper <rounds>`.
 *
 * Words of the segment: 0 the published round (its own cache line), 16 the sleeper count,
 * 17 the bell, 32 the round the sleeper has started, 48 rings, 49 sleeps, 50 missed, 51 the
 * sleeper quit, 52 futex waits (sleeps whose look said no), 64 the last round the producer
 * rang for (its own line: the counters' line moving between cores shifts the race's timing),
 * 80 sleeps ended, 1 how many had ended when the producer began its round (beside the round,
 * which x86 makes visible after it).
 *
 * Each round the sleeper announces it, then goes to sleep on a fencing FutexBell at once;
 * the producer waits for the announcement, lets a varying few nanoseconds pass, publishes the
 * round with a plain store and calls ringBell, as a delegationrpc client commits. A wakeup is
 * lost when the sleeper's look after registering missed the store and the producer's look
 * missed the registration: the sleeper then sleeps a whole slice with the round published.
 * The sleeper counts that case without a clock: its sleep ran out (the futex timed out: no
 * wake-up, not even a late one of the previous round), no ring came for the round, and the
 * producer had begun the round before that sleep ended (so it did not publish after the
 * sleeper gave up). Together: a sleeper that slept through a publish nobody told it of.
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
const SLICE_MS = 50;
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
const ENDED = 80;
const ENDED_SEEN = 1;

if (!joinRemoteFences() || !fenceRemoteThreads()) throw new Error('membarrier is not available: the race has nothing to test');

if (role === 'producer') {
  let seed = 12345;
  for (let r = 1; r <= rounds; r++) {
    // A sleeper gone (it threw, or was killed) must not leave this loop spinning for good.
    for (let spins = 1; Atomics.load(w, STARTED) !== r; spins++) {
      if ((spins & 0xfffff) === 0 && Atomics.load(w, QUIT) !== 0) throw new Error(`fence-race producer: the sleeper quit before round ${r}`);
    }
    const ended = w[ENDED]; // a plain load: x86 keeps it before the publish below
    seed = (Math.imul(seed, 1103515245) + 12345) & 0x7fffffff;
    // 0-63 empty iterations: lands the store anywhere around the sleeper's registration.
    for (let i = (seed >>> 8) & 63; i > 0; i--);
    const before = Atomics.load(w, BELL);
    w[ENDED_SEEN] = ended;
    w[ROUND] = r; // the plain publish of a fencing bell's producer (x86 keeps it after the word above)
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
    const ready = () => w[ROUND] === r;
    while (w[ROUND] !== r) {
      Atomics.add(w, SLEEPS, 1);
      const how = bell.sleepSync(SLICE_MS, ready);
      const ended = w[ENDED]++; // only this thread writes it
      // The look after registering said no: a futex wait.
      if (how !== 'ready') Atomics.add(w, WAITS, 1);
      // Slept the whole slice, nobody rang for this round, and the producer began it before
      // this sleep ended: lost.
      if (how === 'timed-out' && Atomics.load(w, RANG) !== r && w[ROUND] === r && w[ENDED_SEEN] <= ended) Atomics.add(w, MISSED, 1);
    }
  }
}
if (!isMainThread) process.exitCode = 0;
