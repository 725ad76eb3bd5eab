/**
 * WEFT_CHECK=1: before every collective the ranks tell each other what they are about to
 * call (collective, dtype, op, root, tag, the call's number, its shape) and each compares.
 * It catches, at once and on every rank, the mismatches the fast path cannot see without a
 * round trip: ranks that all believe they are the root (nobody receives, so nobody checks),
 * a different tag or collective (each side would wait out its timeout), lengths that happen
 * to split into matching chunks. It costs one round of 20-byte messages per call: a debug
 * mode (docs/collectives.md, "Errors").
 */
import { WeftError } from '../errors.js';
import { RecvOp, SendOp, type TransportOp } from '../transport/ops.js';
import { collectiveSlot, describeSignature, signature } from '../transport/signature.js';
import type { Algorithm, CollectiveCall } from './call.js';

/** Read once: process.env is a slow getter, and this is looked at on every call. */
export const CHECK_CALLS = process.env.WEFT_CHECK === '1';

/**
 * One slot for every call's round, matched in order per pair (the records carry no call
 * number: H.CALL 0, which the stale-message check skips). So WEFT_CHECK=1 also requires every
 * rank to issue its calls in the same order, concurrent calls on distinct tags included; in
 * exchange a different tag or collective on one rank is found at once.
 */
const SLOT = collectiveSlot('check', 0);
const SIG = signature('check');
const WORDS = 5;

function describe(w: Uint32Array, at: number): string {
  return `${describeSignature(w[at])} (tag ${w[at + 3]}, call ${w[at + 1]}, shape ${w[at + 2]})`;
}

/** The agreement round as an algorithm step: exchange records with every peer, then compare. */
export function* agreement(c: CollectiveCall): Algorithm {
  const n = c.size;
  if (n === 1) return;

  const bytes = c.scratch(n * WORDS * 4);
  const w = new Uint32Array(bytes.buffer, bytes.byteOffset, n * WORDS);
  const me = c.rank * WORDS;
  w[me] = c.sig;
  w[me + 1] = c.call;
  w[me + 2] = c.shape;
  w[me + 3] = c.tag;
  w[me + 4] = c.rank;
  const mine = bytes.subarray(me * 4, me * 4 + WORDS * 4);
  const ops: TransportOp[] = [];
  for (let p = 0; p < n; p++) {
    if (p === c.rank) continue;
    const slot = SLOT + c.device.slotBase;
    const r = new RecvOp([c.device.worldRank(p)], slot, bytes.subarray(p * WORDS * 4, (p + 1) * WORDS * 4), WORDS * 4, SIG, undefined);
    c.device.pair(p).post(r);
    const s = new SendOp(c.device.worldRank(p), slot, mine, SIG, 0, 0);
    c.device.pair(p).send(s);
    ops.push(r, s);
  }
  yield ops;
  for (let p = 0; p < n; p++) {
    const at = p * WORDS;
    if (p === c.rank || (w[at] === w[me] && w[at + 1] === w[me + 1] && w[at + 2] === w[me + 2] && w[at + 3] === w[me + 3])) continue;
    throw new WeftError('EINVAL', `${c.what}: WEFT_CHECK: rank ${p} called ${describe(w, at)} where this rank called ${describe(w, me)}; every rank must make the same collective calls in the same order, with the same dtype, op, root, tag and lengths`);
  }
}

/** An algorithm preceded by the agreement round. */
export function* agreed(c: CollectiveCall, alg: Algorithm): Algorithm {
  yield* agreement(c);
  yield* alg;
}
