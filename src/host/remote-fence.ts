/**
 * Asymmetric fences between processes: a publisher on a hot path stores with a plain store, and
 * the rare party that goes to sleep pays for the barrier both need, with membarrier(2).
 *
 * Why: a producer publishes a message and then reads a sleeper count to decide whether to wake
 * the consumer; the consumer adds itself to the count and then looks for a message once more
 * before it sleeps. Each side's load must not pass its own store, or both miss each other and
 * the consumer sleeps a whole slice (20 ms) with a message waiting. `Atomics.store` (an xchg on
 * x86, a full fence) orders it on every message, and on the delegationrpc client that fence
 * waits for the slot's cache line to come back from the server: it was a sixth of a call's
 * time. With membarrier, the sleeper makes every running thread of every registered process
 * execute a full barrier after it registered and before it looks again, so the producer can
 * publish with a plain store (a release store on x86, see acquire.ts) and no fence at all.
 *
 * The proof is the usual one for asymmetric fences: the barrier lands in the producer's thread
 * either before its store (then its later load of the count sees the sleeper) or after it (then
 * the store is visible to the sleeper's second look).
 */
import { native } from '../native/binding.js';
import { PLAIN_LOAD_ACQUIRES } from './acquire.js';

let joined: boolean | undefined;

/**
 * Registers this process for the barriers of fenceRemoteThreads() (once per process; every
 * thread of it, present and future, is covered). False where the kernel or a seccomp filter
 * refuses membarrier's global expedited commands, or with WEFT_REMOTE_FENCES=0: then this
 * process's publishers keep their full fences (its sleepers still fence for the others).
 */
export function joinRemoteFences(): boolean {
  if (joined === undefined) {
    try {
      joined = process.env.WEFT_REMOTE_FENCES !== '0' && typeof native.membarrierRegister === 'function' && native.membarrierRegister();
    } catch {
      joined = false;
    }
  }
  return joined;
}

/**
 * Whether this process may publish with plain stores to a sleeper that fences: x86 (where a
 * plain store is a release store) and registered.
 */
export function plainPublishAllowed(): boolean {
  return PLAIN_LOAD_ACQUIRES && joinRemoteFences();
}

/**
 * A full memory barrier on every running thread of every registered process (about 0.5 us
 * here). True when it happened; a sleeper that gets false must not sleep long.
 */
export function fenceRemoteThreads(): boolean {
  // An addon built before membarrier was added has no such function: report no barrier.
  return typeof native.membarrierGlobal === 'function' && native.membarrierGlobal();
}
