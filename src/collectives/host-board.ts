/**
 * The plans of a job that spans hosts whose steps inside a host run on the host board (shared
 * memory, no messages: transport/board.ts). Every one has the same shape: a board call, the
 * leaders' step across hosts (one rank per host crosses the network, the others wait on the
 * board and leave it the core), a board call; either board call may be left out. The board is
 * held from the first board call to the last (Board.holdAsync): board calls pair up in call
 * order, and a call made while another is between its board calls would pair with one of them
 * on one rank and not on another. The step across hosts is always the one the plan without a
 * board takes (hierarchical.ts), so hosts with and without a board still meet.
 *
 * The large allreduce over ctx.alloc arrays (hostShared) is the one-host shared allreduce
 * among the host's ranks with every local rank crossing with its counterparts in its middle
 * (allreduce-shared.ts).
 */
import type { Board, BoardFold, BoardRead } from '../transport/board.js';
import type { Deadline } from '../util/deadline.js';
import { reduceMany } from '../reduce/index.js';
import { copyInto } from '../host/copy.js';
import { signature } from '../transport/signature.js';
import { agreement, CHECK_CALLS } from './agreement.js';
import { beginCall, CollectiveCall, driveAsync, driveSync, refused, type CollectiveOptions, type Group } from './call.js';
import { bytesOf, dtypeName, reduction, type TypedArray } from './checks.js';
import { allreduce, allreduceAround, allreduceAroundSync, allreduceSync, type AllreduceOptions, type AroundHooks } from './allreduce.js';
import { allgatherv, allgathervSync } from './allgather.js';
import { barrier, barrierSync } from './barrier.js';
import { broadcast, broadcastSync, type RootOptions } from './broadcast.js';
import { reduceScatter, reduceScatterSync, type ReduceScatterOptions } from './reduce-scatter.js';
import type { AcrossHosts, SharedCall } from './allreduce-shared.js';
import { scratchOf, stepOptions, type Step } from './steps.js';
import type { Hierarchy } from './hierarchical.js';

const EMPTY = new Uint8Array(0);

/** One board call of a plan: what this rank publishes, and what it does with the host's bytes. */
interface BoardCallOf {
  readonly bytes: Uint8Array;
  readonly read?: BoardFold | BoardRead;
}

/** The leaders' step across hosts, in both forms (run on the host's leader only). */
interface LeadersStep {
  sync(): unknown;
  async(): Promise<unknown>;
}

/**
 * What a plan sets up from its arguments (the call, its reduction, scratch), made so that a
 * refusal (a bad op or tag on one rank) aborts the job as a flat call's does, instead of
 * leaving this host's other ranks waiting on the board until their timeout.
 */
function prepared<P>(g: Group, make: () => P): P {
  try {
    return make();
  } catch (err) {
    throw refused(g, err);
  }
}

/**
 * Runs a plan's shape for call `c` (a call on the host group): `before` on the board, the
 * leaders' step (when this rank leads its host), `after` on the board; `release` gives back
 * its scratch when the plan ends, however it ends.
 */
function onHostBoard(sync: boolean, c: CollectiveCall, board: Board, before: BoardCallOf | undefined, leadersStep: LeadersStep | undefined, after: BoardCallOf | undefined, release?: () => void): unknown {
  const end = () => {
    release?.();
    c.device.markFinished(c.slot, c.call);
  };
  if (sync) {
    try {
      if (CHECK_CALLS) driveSync(c, agreement(c));
      if (before) board.exchangeSync(before.bytes, c.sig, c, before.read);
      leadersStep?.sync();
      if (after) board.exchangeSync(after.bytes, c.sig, c, after.read);
    } finally {
      end();
    }
    return undefined;
  }
  return board
    .holdAsync(async (held) => {
      if (CHECK_CALLS) await driveAsync(c, agreement(c));
      if (before) await held(before.bytes, c.sig, c, before.read);
      if (leadersStep) await leadersStep.async();
      if (after) await held(after.bytes, c.sig, c, after.read);
    })
    .finally(end);
}

/**
 * A small allreduce on a host with a board: every rank folds the host's arrays on the host
 * board (no messages), the leader allreduces that sum with the other hosts' leaders, and
 * publishes the result on the board, where the others copy it. On 2 x 2 emulated hosts with
 * a core each, timed after the barrier, 8 B took 66-92 us against 147-148 us with every local
 * rank crossing with its counterparts, 64 KiB 134-171 us against 260-333 us (docs/hosts.md,
 * 2026-12-06, morning).
 */
export function hostBoardAllreduce<T extends TypedArray>(g: Group, h: Hierarchy, board: Board, input: T, out: T, options: AllreduceOptions, d: Deadline): Step {
  return (sync) => {
    const { red, c } = prepared(g, () => {
      const red = reduction(`rank ${h.local.rank}: allreduce`, input, options.op, options.float);
      return { red, c: new CollectiveCall(h.local, 'allreduce', signature('allreduce', red.dtype, red.op), stepOptions(options, d), input.byteLength) };
    });
    const outB = bytesOf(out);
    const leaders = h.leaders;
    // Member 0 of the host board is the leader (the host's lowest rank, local rank 0).
    const take: BoardRead = (srcs) => {
      if (!leaders) copyInto(outB, 0, srcs[0], 0, outB.byteLength);
    };
    const across: LeadersStep | undefined = leaders && {
      sync: () => allreduceSync(leaders, out, stepOptions(options, d)),
      async: () => allreduce(leaders, out, stepOptions(options, d)),
    };
    return onHostBoard(sync, c, board, { bytes: bytesOf(input), read: { op: red.op, dtype: red.dtype, count: input.length, out: outB } }, across, { bytes: outB, read: take });
  };
}

/**
 * A barrier among the leaders between two empty calls on the host board. A rank leaves once
 * its leader has heard from every host, and the ranks of a host leave within a scheduler turn
 * of each other: on 2 x 2 emulated hosts with a core each, before an 8 B allreduce, ranks left
 * 16-31 us apart against 52-72 us when every local rank crossed with its counterparts
 * (docs/hosts.md, 2026-12-06, morning).
 */
export function hostBoardBarrier(g: Group, h: Hierarchy, board: Board, options: CollectiveOptions, d: Deadline): Step {
  return (sync) => {
    const c = prepared(g, () => new CollectiveCall(h.local, 'barrier', signature('barrier'), stepOptions(options, d)));
    const leaders = h.leaders;
    const across: LeadersStep | undefined = leaders && {
      sync: () => barrierSync(leaders, stepOptions(options, d)),
      async: () => barrier(leaders, stepOptions(options, d)),
    };
    return onHostBoard(sync, c, board, { bytes: EMPTY }, across, { bytes: EMPTY });
  };
}

/**
 * A broadcast of an array the host board holds: on the root's host, when the root is not its
 * leader, the root publishes it on the board (the leader takes it there) before the leaders'
 * broadcast; elsewhere the leader publishes what it has after it. A leader that is the root
 * thus sends across at once, without waiting for its host's other ranks.
 */
export function hostBoardBroadcast(g: Group, h: Hierarchy, board: Board, data: TypedArray, rootHost: number, rootLocal: number, options: RootOptions, d: Deadline): Step {
  return (sync) => {
    const source = h.host === rootHost ? rootLocal : 0;
    const c = prepared(g, () => beginCall(h.local, 'broadcast', stepOptions(options, d), dtypeName(`rank ${h.local.rank}: broadcast`, data), undefined, source, data.byteLength));
    const bytes = bytesOf(data);
    const leaders = h.leaders;
    // Member i of the host board is local rank i.
    const share: BoardCallOf = {
      bytes,
      read: (srcs) => {
        if (h.local.rank !== source) copyInto(bytes, 0, srcs[source], 0, bytes.byteLength);
      },
    };
    const across: LeadersStep | undefined = leaders && {
      sync: () => broadcastSync(leaders, data, stepOptions(options, d, rootHost)),
      async: () => broadcast(leaders, data, stepOptions(options, d, rootHost)),
    };
    return source !== 0 ? onHostBoard(sync, c, board, share, across, undefined) : onHostBoard(sync, c, board, undefined, across, share);
  };
}

/**
 * An allgather whose output the host board holds: every rank publishes its input on the board
 * and the leader lays them out as the host's block; the leaders allgather the blocks; the
 * leader publishes the whole output, which the others copy.
 */
export function hostBoardAllgather<T extends TypedArray>(g: Group, h: Hierarchy, board: Board, input: T, output: T, options: CollectiveOptions, d: Deadline): Step {
  return (sync) => {
    const c = prepared(g, () => beginCall(h.local, 'allgather', stepOptions(options, d), dtypeName(`rank ${h.local.rank}: allgather`, input), undefined, 0, output.byteLength));
    const inB = bytesOf(input);
    const outB = bytesOf(output);
    const leaders = h.leaders;
    const { view: block, area } = scratchOf(g, input, h.local.size * input.length);
    const blockB = bytesOf(block);
    // The host's inputs in rank order (member i is local rank i), at the leader.
    const lay: BoardRead = (srcs) => {
      if (leaders) for (let r = 0; r < srcs.length; r++) copyInto(blockB, r * inB.byteLength, srcs[r], 0, inB.byteLength);
    };
    // Every rank publishes as many bytes (the board pairs calls by size); only the leader's are read.
    const take: BoardRead = (srcs) => {
      if (!leaders) copyInto(outB, 0, srcs[0], 0, outB.byteLength);
    };
    const counts = h.hostSizes.map((k) => k * input.length);
    const across: LeadersStep | undefined = leaders && {
      sync: () => allgathervSync(leaders, block, output, counts, stepOptions(options, d)),
      async: () => allgatherv(leaders, block, output, counts, stepOptions(options, d)),
    };
    return onHostBoard(sync, c, board, { bytes: inB, read: lay }, across, { bytes: outB, read: take }, () => g.release(area));
  };
}

/**
 * A reduceScatter whose input the host board holds: every rank publishes its input on the
 * board and the leader folds them (the host's sum); the leaders reduce-scatter the sums by
 * host; the leader publishes its host's block, and every rank copies its part.
 */
export function hostBoardReduceScatter<T extends TypedArray>(g: Group, h: Hierarchy, board: Board, input: T, output: T, options: ReduceScatterOptions, d: Deadline): Step {
  return (sync) => {
    const { red, c } = prepared(g, () => {
      const red = reduction(`rank ${h.local.rank}: reduceScatter`, input, options.op, options.float);
      return { red, c: beginCall(h.local, 'reduce_scatter', stepOptions(options, d), red.dtype, red.op, 0, input.byteLength) };
    });
    const n = output.length;
    const outB = bytesOf(output);
    const leaders = h.leaders;
    // One scratch area: the host's sum (at the leader), then the host's block.
    const { view: scratch, area } = scratchOf(g, input, input.length + h.local.size * n);
    const sum = scratch.subarray(0, input.length) as T;
    const part = scratch.subarray(input.length) as T;
    const sumB = bytesOf(sum);
    const fold: BoardRead = (srcs) => {
      if (leaders) reduceMany(red.op, red.dtype, input.length, sumB, srcs);
    };
    // The leader's part is the host's block; the others publish as many bytes, not read.
    const take: BoardRead = (srcs) => copyInto(outB, 0, srcs[0], h.local.rank * outB.byteLength, outB.byteLength);
    const counts = h.hostSizes.map((k) => k * n);
    const across: LeadersStep | undefined = leaders && {
      sync: () => reduceScatterSync(leaders, sum, part, stepOptions(options, d, 0, undefined, counts)),
      async: () => reduceScatter(leaders, sum, part, stepOptions(options, d, 0, undefined, counts)),
    };
    return onHostBoard(sync, c, board, { bytes: bytesOf(input), read: fold }, across, { bytes: bytesOf(part), read: take }, () => g.release(area));
  };
}

/** Hooks over a view that starts at element `first` of the array they work on. */
function shifted(around: AroundHooks, first: number): AroundHooks {
  if (first === 0) return around;
  return { before: (f, n) => around.before(first + f, n), after: (f, n) => around.after(first + f, n) };
}

/**
 * A large allreduce with its steps inside the host on shared memory: the shared allreduce
 * among the host's ranks on the host board (allreduce-shared.ts), read in place.
 * - by 'chunks' (several leaders): each rank reduces its chunk of everyone's input,
 *   allreduces that chunk with the same local rank of every other host, then copies the
 *   others' chunks. Per rank of 2 x 2 hosts at 1 MiB this reads 0.75 MiB and writes 0.5 MiB
 *   where the message steps (reduce-scatter and allgather through the rings) copy each byte
 *   in and out.
 * - by 'leader': local rank 0 reduces the whole array, allreduces it among the leaders, and
 *   the others copy its result (in place of reduce, leaders' allreduce, broadcast); on a host
 *   with fewer cores than ranks the leader writes it into their outputs itself.
 * The step across hosts is the same call as in the message plan (the chunk is the shard, or
 * the whole array), so hosts may differ in which plan they take (a host whose ranks pass heap
 * arrays falls back alone).
 */
export function hostShared<T extends TypedArray>(g: Group, h: Hierarchy, board: Board, input: T, out: T, options: AllreduceOptions, d: Deadline, by: AcrossHosts['by']): SharedCall {
  const { red, c } = prepared(g, () => {
    const red = reduction(`rank ${h.local.rank}: allreduce`, input, options.op, options.float);
    return { red, c: new CollectiveCall(h.local, 'allreduce', signature('allreduce', red.dtype, red.op), stepOptions(options, d), input.byteLength) };
  });
  // The leader crosses among the leaders, as the fallback through the rings does (its steps
  // across must meet theirs); only rank 0 of the host crosses then, and it is a leader.
  const peers = by === 'leader' ? h.leaders! : h.peers!;
  const across: AcrossHosts = {
    by,
    leaderCopies: by === 'leader' && h.hostOversubscribed,
    sync: (first, count, around) => {
      const view = out.subarray(first, first + count);
      if (around) allreduceAroundSync(peers, view, stepOptions(options, d), shifted(around, first));
      else allreduceSync(peers, view, stepOptions(options, d));
    },
    async: async (first, count, around) => {
      const view = out.subarray(first, first + count);
      if (around) await allreduceAround(peers, view, stepOptions(options, d), shifted(around, first));
      else await allreduce(peers, view, stepOptions(options, d));
    },
  };
  return { c, board, inB: bytesOf(input), outB: bytesOf(out), red, count: input.length, forced: false, across };
}
