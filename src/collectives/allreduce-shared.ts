/**
 * allreduce over arrays from `ctx.alloc` on one host (shm): every rank reads its peers'
 * arrays in place, through the mapping, so each byte crosses memory once instead of going
 * through a ring (copy in, copy out).
 *
 *   1. board call: every rank publishes where its input and output live (a descriptor and
 *      offset each). This also says its input is ready. If any rank's arrays are not shared,
 *      all ranks see it and take the ring instead (or fail, when 'shared' was forced).
 *   2. rank r reduces chunk r of every rank's input straight into its own output.
 *   3. board call (everyone's chunk is reduced), then rank r copies chunk q of rank q's output
 *      into its own, for every q.
 *   4. board call: nobody reads anyone's arrays any more; the caller may touch them again.
 *
 * Per rank at np=2 this reads 1.5x and writes 1x the array, where the ring reads 2.5x and
 * writes 2x. Each chunk is computed by one rank, so every rank gets bit-identical results.
 *
 * On a job that spans hosts the same runs among the ranks of one host, on the host board, with
 * one more step between 2 and 3 (`across`, hierarchical.ts), in one of two shapes:
 * - 'chunks': rank r allreduces its reduced chunk r with the same local rank of every other
 *   host (the host's ranks cross at once, on cores of their own);
 * - 'leader': rank 0's chunk is the whole array, which it allreduces with the other hosts'
 *   leaders; the host's other ranks reduce nothing and copy rank 0's result in step 3. On a
 *   host whose ranks share cores (`leaderCopies`), rank 0 writes its result into the others'
 *   outputs itself before the second board call, which is then the last: the copies would
 *   not run in parallel anyway, and a board call (a wake-up of every rank) is saved.
 * The Promise form holds the board from step 1 to step 4 (Board.holdAsync), so no board call
 * made meanwhile pairs with one of its steps.
 */
import { WeftError } from '../errors.js';
import { reduceMany } from '../reduce/index.js';
import type { Board } from '../transport/board.js';
import { SHARED_RECORD_BYTES, SharedArrays } from '../transport/shared-arrays.js';
import { copyInto } from '../host/copy.js';
import { evenCounts, offsets } from './checks.js';
import { refused, type CollectiveCall, type Reduction } from './call.js';
import type { AroundHooks } from './allreduce.js';

const EMPTY = new Uint8Array(0);

/** What step 1 established: the peers' arrays, or why the ring must be used. */
interface Exchange {
  ins: Uint8Array[];
  outs: Uint8Array[];
  /** The first rank whose arrays are not shared, or -1. */
  unshared: number;
}

export interface SharedCall {
  readonly c: CollectiveCall;
  readonly board: Board;
  readonly inB: Uint8Array;
  readonly outB: Uint8Array;
  readonly red: Reduction;
  readonly count: number;
  /** 'shared' was asked for: arrays that are not shared are an error, not a fallback. */
  readonly forced: boolean;
  /** Between steps 2 and 3: what this rank does with its reduced chunk (elements [first, first + count) of the output). */
  readonly across?: AcrossHosts;
}

/** The step across hosts of a hierarchical shared allreduce, in both forms. */
export interface AcrossHosts {
  /** Who crosses: every rank with its chunk, or rank 0 with the whole array (file comment). */
  readonly by: 'chunks' | 'leader';
  /** With 'leader': rank 0 writes the result into every rank's output (file comment). */
  readonly leaderCopies: boolean;
  /** Allreduces elements [first, first + count) of the output across hosts; `around` works on ranges meanwhile. */
  sync(first: number, count: number, around?: AroundHooks): void;
  async(first: number, count: number, around?: AroundHooks): Promise<void>;
}

function record(call: SharedCall): Uint8Array {
  const shared = call.c.device.shared;
  const rec = new Uint8Array(2 * SHARED_RECORD_BYTES);
  shared.record(call.inB, rec, 0);
  shared.record(call.outB, rec, SHARED_RECORD_BYTES);
  return rec;
}

function reader(call: SharedCall, x: Exchange): (srcs: readonly Uint8Array[]) => void {
  return (srcs) => {
    // Every rank reads the same records, so these refusals come on every rank at once.
    const { c, inB, outB } = call;
    for (let r = 0; r < srcs.length; r++) {
      const rec = srcs[r];
      if (!SharedArrays.isShared(rec, 0)) {
        if (x.unshared < 0) x.unshared = r;
        continue;
      }
      if (x.unshared < 0 && !SharedArrays.isShared(rec, SHARED_RECORD_BYTES)) x.unshared = r;
      const theirs = SharedArrays.byteLength(rec, 0);
      if (theirs !== inB.byteLength) throw new WeftError('EINVAL', `${c.what}: rank ${r} passed ${theirs} bytes where this rank passed ${inB.byteLength}; every rank must pass arrays of matching lengths (and dtypes)`);
      // The output's record too: a short one would be read past its end in the last copy.
      const theirOut = SharedArrays.isShared(rec, SHARED_RECORD_BYTES) ? SharedArrays.byteLength(rec, SHARED_RECORD_BYTES) : outB.byteLength;
      if (theirOut !== outB.byteLength) throw new WeftError('EPROTO', `${c.what}: rank ${r}'s shared-array record gives its output ${theirOut} bytes and its input ${theirs}; the record is malformed`);
    }
    if (x.unshared >= 0) {
      if (call.forced) throw new WeftError('EINVAL', `${c.what}: algorithm 'shared' needs every rank's input and output from ctx.alloc(), but rank ${x.unshared}'s are not; allocate them with ctx.alloc(Float32Array, n) (or let algorithm 'auto' choose)`);
      return;
    }
    const shared = c.device.shared;
    try {
      for (let r = 0; r < srcs.length; r++) {
        if (r === c.rank) continue;
        const peer = c.device.worldRank(r);
        x.ins[r] = shared.peerView(peer, srcs[r], 0);
        x.outs[r] = shared.peerView(peer, srcs[r], SHARED_RECORD_BYTES);
      }
    } catch (err) {
      // An import that fails here fails on this rank alone: the others must stop too, not go on
      // to the next board call (or across hosts) and wait there until their timeout.
      throw refused(c.group, err);
    }
  };
}

/** Where each rank's chunk starts (element offsets, one more than ranks). */
function chunkOffsets(call: SharedCall): number[] {
  if (call.across?.by !== 'leader') return offsets(evenCounts(call.count, call.c.size));
  const off = new Array<number>(call.c.size + 1).fill(call.count);
  off[0] = 0;
  return off;
}

/** Step 2 for elements [first, first + count): reduces every rank's input into this rank's output. */
function reduceRange(call: SharedCall, x: Exchange, first: number, count: number): void {
  const { c, inB, outB, red } = call;
  if (count === 0) return;
  const lo = first * red.elementBytes;
  const hi = (first + count) * red.elementBytes;
  // This rank's own chunk first: in place, the output chunk is that source (reduceMany allows it).
  const srcs: Uint8Array[] = [inB.subarray(lo, hi)];
  for (let r = 0; r < c.size; r++) if (r !== c.rank) srcs.push(x.ins[r].subarray(lo, hi));
  reduceMany(red.op, red.dtype, count, outB.subarray(lo, hi), srcs);
}

/** 'leaderCopies': rank 0 writes elements [first, first + count) of its result into every other rank's output. */
function spreadRange(call: SharedCall, x: Exchange, first: number, count: number): void {
  const { c, outB, red } = call;
  const lo = first * red.elementBytes;
  for (let r = 1; r < c.size; r++) copyInto(x.outs[r], lo, outB, lo, count * red.elementBytes);
}

/** The copy of step 3: every other rank's chunk of its output into this rank's. */
function gatherTheirs(call: SharedCall, x: Exchange, off: number[]): void {
  const { c, outB, red } = call;
  for (let r = 0; r < c.size; r++) {
    if (r === c.rank) continue;
    const lo = off[r] * red.elementBytes;
    const hi = off[r + 1] * red.elementBytes;
    if (hi > lo) copyInto(outB, lo, x.outs[r], lo, hi - lo);
  }
}

/**
 * Step 2 and the step across hosts. The 'leader' reduces each range of the array just before
 * its messages go out and, with leaderCopies, writes each finished range into the host's other
 * outputs, while other ranges are on the wire (allreduceAround); other ranks reduce their
 * chunk first, then cross with it.
 */
function reduceAndCross(call: SharedCall, x: Exchange, off: number[]): AroundHooks | undefined {
  const { c, across } = call;
  const first = off[c.rank];
  const count = off[c.rank + 1] - first;
  if (across?.by === 'leader' && count > 0) {
    return {
      before: (f, n) => reduceRange(call, x, f, n),
      after: (f, n) => (across.leaderCopies ? spreadRange(call, x, f, n) : undefined),
    };
  }
  reduceRange(call, x, first, count);
  return undefined;
}

/** Blocking shared allreduce; false when some rank's arrays are not shared (use the ring). */
export function sharedAllreduceSync(call: SharedCall): boolean {
  const { c, board, across } = call;
  const x: Exchange = { ins: new Array(c.size), outs: new Array(c.size), unshared: -1 };
  board.exchangeSync(record(call), c.sig, c, reader(call, x));
  if (x.unshared >= 0) return false;
  const off = chunkOffsets(call);
  const around = reduceAndCross(call, x, off);
  if (across && off[c.rank + 1] > off[c.rank]) across.sync(off[c.rank], off[c.rank + 1] - off[c.rank], around);
  board.exchangeSync(EMPTY, c.sig, c);
  // With leaderCopies the leader has written everyone's output: that board call was the last.
  if (!across?.leaderCopies) {
    gatherTheirs(call, x, off);
    board.exchangeSync(EMPTY, c.sig, c);
  }
  return true;
}

/** Promise form of sharedAllreduceSync. */
export function sharedAllreduce(call: SharedCall): Promise<boolean> {
  const { c, board, across } = call;
  return board.holdAsync(async (held) => {
    const x: Exchange = { ins: new Array(c.size), outs: new Array(c.size), unshared: -1 };
    await held(record(call), c.sig, c, reader(call, x));
    if (x.unshared >= 0) return false;
    const off = chunkOffsets(call);
    const around = reduceAndCross(call, x, off);
    if (across && off[c.rank + 1] > off[c.rank]) await across.async(off[c.rank], off[c.rank + 1] - off[c.rank], around);
    await held(EMPTY, c.sig, c);
    if (!across?.leaderCopies) {
      gatherTheirs(call, x, off);
      await held(EMPTY, c.sig, c);
    }
    return true;
  });
}
