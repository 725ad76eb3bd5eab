/**
 * Collectives for a job that spans hosts: each one is a few calls on the job's subgroups, so
 * the bulk of the bytes moves over shared memory inside a host and only what must cross the
 * network goes over the fabric, once per host (or once per local rank, in parallel).
 *
 * allreduce, three plans:
 * - several leaders per host (every host runs the same number L of ranks, and the array has
 *   at least MULTI_LEADER_MIN_BYTES and does not fit the host board): reduce-scatter inside
 *   the host (each local rank gets a 1/L shard), allreduce of each shard among the ranks with
 *   the same local rank on every host (L allreduces across hosts at once), allgather inside
 *   the host; untagged calls over ctx.alloc arrays run the two steps inside the host on shared
 *   memory, reading the peers' arrays in place (hostShared), the others through the rings;
 * - arrays the host board holds (untagged, up to 64 KiB): the host's sum on the host board,
 *   allreduce of it among the leaders (local rank 0 of every host), the leader's result on the
 *   host board again; the host's ranks hold the board from the first step to the last
 *   (hostBoardAllreduce), and only one rank per host crosses the network;
 * - one leader per host otherwise (hosts with different numbers of ranks, or a host without a
 *   board): reduce to local rank 0, allreduce among the leaders, broadcast inside the host;
 *   tagged small arrays on hosts with the same number of ranks: allreduce inside the host, then
 *   among the same local rank of every host (two steps).
 * broadcast: inside the root's host, then among the leaders, then inside the other hosts (the
 *   steps inside a host on the host board, held across the leaders' step, for untagged arrays
 *   the board holds: hostBoardBroadcast).
 * allgather / reduceScatter (hosts holding contiguous blocks of ranks, as weft run places
 * them; otherwise the flat algorithm): gather to the leader, allgatherv among leaders, broadcast
 * inside the host; reduce to the leader, reduce-scatter among leaders by host, scatter inside.
 * barrier: inside the host, among the leaders, inside again; on the host board (held from its
 * first step to its last) when the host has one and the call is untagged, else messages.
 *
 * Each step is an ordinary collective call on a subgroup (own slots, own checks); a failure in
 * any aborts the job as usual. The same steps run with the Promise or the blocking calls.
 */
import type { ReduceOp } from '../reduce/index.js';
import { Deadline } from '../util/deadline.js';
import { collectiveSlot, signature } from '../transport/signature.js';
import { beginCall, CollectiveCall, driveAsync, driveSync, isTag, refused, type CollectiveOptions, type Group } from './call.js';
import type { CollectiveName } from '../transport/signature.js';
import { reduceMany } from '../reduce/index.js';
import { agreement, CHECK_CALLS } from './agreement.js';
import { copyInto } from '../host/copy.js';
import { bytesOf, checkArray, checkInOut, checkLength, dtypeName, reduction, type TypedArray } from './checks.js';
import { sharedAllreduce, sharedAllreduceSync, type AcrossHosts, type SharedCall } from './allreduce-shared.js';
import type { Board, BoardFold, BoardRead } from '../transport/board.js';
import { allreduce, allreduceSync, boardFits, type AllreduceOptions } from './allreduce.js';
import { allgather, allgatherSync, allgatherv, allgathervSync } from './allgather.js';
import { barrier, barrierSync } from './barrier.js';
import { broadcast, broadcastSync, type RootOptions } from './broadcast.js';
import { gather, gatherSync, scatter, scatterSync } from './gather.js';
import { reduce, reduceSync } from './reduce.js';
import { reduceScatter, reduceScatterSync, type ReduceScatterOptions } from './reduce-scatter.js';

const EMPTY = new Uint8Array(0);

/**
 * Several leaders per host pay off from this size (below, one leader's 3 steps are cheaper),
 * unless the array fits the host board (allreduce's boardFits).
 */
export const MULTI_LEADER_MIN_BYTES = 64 * 1024;

/** Where every rank of a job that spans hosts sits, and the subgroups the plans use. */
export interface Hierarchy {
  /** The ranks of this rank's host. */
  readonly local: Group;
  /** One rank per host (local rank 0): defined on leaders only. */
  readonly leaders: Group | undefined;
  /** The ranks with this rank's local rank on every host, when all hosts run as many ranks. */
  readonly peers: Group | undefined;
  /** hostOf[r]: the host (index) of job rank r; localRankOf[r]: its place there. */
  readonly hostOf: readonly number[];
  readonly localRankOf: readonly number[];
  /** This rank's host (index). */
  readonly host: number;
  /** Ranks per host, by host index. */
  readonly hostSizes: readonly number[];
  /** Every host holds one block of consecutive ranks, hosts in order. */
  readonly contiguous: boolean;
}

type Step = (sync: boolean) => unknown;

/** Runs steps one after another with the Promise calls. */
async function runAsync(steps: Iterable<Step>): Promise<void> {
  for (const s of steps) await s(false);
}

function runSync(steps: Iterable<Step>): void {
  for (const s of steps) s(true);
}

/**
 * What a plan checks before its first step (the arrays, the timeout): a failure aborts the
 * job, as a flat call's checks do, so every rank fails at once instead of the others waiting
 * out their timeout in a step this rank never joins.
 */
function begin(g: Group, options: CollectiveOptions, check?: () => void): Deadline {
  try {
    check?.();
    return new Deadline(options.timeoutMs, options.signal);
  } catch (err) {
    throw refused(g, err);
  }
}

/** What a step's call may take: every collective's options in one shape. */
interface StepOptions extends CollectiveOptions {
  op?: ReduceOp;
  float?: 'float16' | 'bfloat16';
  root: number;
  output?: TypedArray;
  counts?: readonly number[];
}

/**
 * Options for one step: the call's tag, signal and reduction, what is left of its timeout,
 * and the step's root, output and counts. Built field by field in one shape: object spreads
 * here copied through the runtime and were the largest allocation of a small hierarchical
 * allreduce (with the call names), about a kilobyte per step.
 */
function stepOptions(o: CollectiveOptions & { op?: ReduceOp; float?: 'float16' | 'bfloat16' }, d: Deadline, root = 0, output?: TypedArray, counts?: readonly number[]): StepOptions {
  return { tag: o.tag, signal: o.signal, timeoutMs: Math.max(1, d.remaining()), op: o.op, float: o.float, root, output, counts };
}

/**
 * A typed view of `count` elements over scratch bytes of `g` (like `like`). Registered memory
 * where the group lends it: every plan sends its scratch across hosts, and from 512 KiB the
 * fabric writes from registered memory in place instead of through a staging copy (allgather
 * and reduceScatter; allreduce stages its sends: allreduce.ts).
 */
function scratchOf<T extends TypedArray>(g: Group, like: T, count: number): { view: T; area: Uint8Array } {
  const bytes = Math.max(1, count * like.BYTES_PER_ELEMENT);
  const area = g.acquireRegistered ? g.acquireRegistered(bytes) : g.acquire(bytes);
  const Ctor = like.constructor as new (b: ArrayBufferLike, o: number, n: number) => T;
  return { view: new Ctor(area.buffer, area.byteOffset, count), area };
}

function evenCounts(n: number, parts: number): number[] {
  const q = Math.floor(n / parts);
  const r = n % parts;
  return Array.from({ length: parts }, (_, i) => q + (i < r ? 1 : 0));
}

/**
 * The steps of a hierarchical allreduce of `input` into `out` (the same array in place). Out of
 * place, the first step reads `input` and the later ones work on `out`: no step copies the
 * whole array first (such a copy of 1 MiB of ctx.alloc memory cost 80-150 us per rank on 2
 * emulated hosts x 2 ranks).
 */
function* allreduceSteps<T extends TypedArray>(h: Hierarchy, input: T, out: T, options: AllreduceOptions, d: Deadline, g: Group): Generator<Step> {
  const L = h.local.size;
  // This rank is its host's only rank, so its leader.
  if (L === 1) {
    yield (s) => (s ? allreduceSync : allreduce)(h.leaders!, input, stepOptions(options, d, 0, out));
    return;
  }
  // An array the host board holds takes the two steps below, the first on the board: 2 x 2
  // emulated hosts, 64 KiB, barrier then one timed call, max over ranks, 324 / 324 us against
  // 418 / 462 us for several leaders (whose two steps inside the host are messages); from
  // 128 KiB on, several leaders win (494 / 517 against 687 / 735 us). Decided from the call
  // alone (size, tag, ranks per host), never from whether this host has a board: every rank
  // of the job must pick the same plan, or their steps across hosts would not match.
  if (h.peers && input.byteLength >= MULTI_LEADER_MIN_BYTES && input.length >= L && !boardFits(L, input.byteLength, options)) {
    // Arrays from ctx.alloc on every rank of the host: the steps inside the host read the
    // peers' arrays in place (see hostShared); otherwise, or tagged, messages.
    const board = options.tag ? undefined : h.local.transport.hostBoard;
    if (board) {
      let done = false;
      const call = hostShared(h, board, input, out, options, d);
      yield (s) => (s ? (done = sharedAllreduceSync(call)) : sharedAllreduce(call).then((ok) => void (done = ok)));
      // Its board calls are over either way; heap arrays somewhere on this host: the rings below.
      call.c.device.markFinished(call.c.slot, call.c.call);
      if (done) return;
    }
    const counts = evenCounts(input.length, L);
    const { view: shard, area } = scratchOf(g, input, counts[h.local.rank]);
    try {
      yield (s) => (s ? reduceScatterSync : reduceScatter)(h.local, input, shard, stepOptions(options, d, 0, undefined, counts));
      yield (s) => (s ? allreduceSync : allreduce)(h.peers!, shard, stepOptions(options, d));
      yield (s) => (s ? allgathervSync : allgatherv)(h.local, shard, out, counts, stepOptions(options, d));
    } finally {
      g.release(area);
    }
    return;
  }
  // What crosses the network is decided from the call alone (size, tag, ranks per host), never
  // from whether this host has a board: an array the board holds crosses among the leaders on
  // every host, with the steps inside the host on the board where there is one, else messages.
  if (boardFits(L, input.byteLength, options)) {
    const board = h.local.transport.hostBoard;
    if (board) {
      yield hostBoardAllreduce(h, board, input, out, options, d);
      return;
    }
  } else if (h.peers) {
    // Tagged (no board): allreduce inside the host, then among the same local rank of every host.
    yield (s) => (s ? allreduceSync : allreduce)(h.local, input, stepOptions(options, d, 0, out));
    yield (s) => (s ? allreduceSync : allreduce)(h.peers!, out, stepOptions(options, d));
    return;
  }
  // The leader's reduce writes its `out`; the broadcast writes everyone else's.
  yield (s) => (s ? reduceSync : reduce)(h.local, input, stepOptions(options, d, 0, out));
  if (h.leaders) yield (s) => (s ? allreduceSync : allreduce)(h.leaders!, out, stepOptions(options, d));
  yield (s) => (s ? broadcastSync : broadcast)(h.local, out, stepOptions(options, d));
}

/**
 * A small allreduce on a host with a board: every rank folds the host's arrays on the host
 * board (no messages), the leader allreduces that sum with the other hosts' leaders, and
 * publishes the result on the board, where the others copy it. The board is held from the
 * first step to the last (Board.holdAsync), so no other board call pairs with the last one.
 * One rank per host crosses the network, the others wait on the board and leave the core to
 * it: on 2 x 2 emulated hosts with a core each, timed after the barrier, 8 B took 66-92 us
 * against 147-148 us with every local rank crossing with its counterparts, 64 KiB 134-171 us
 * against 260-333 us (docs/hosts.md, 2026-12-06, morning).
 */
function hostBoardAllreduce<T extends TypedArray>(h: Hierarchy, board: Board, input: T, out: T, options: AllreduceOptions, d: Deadline): Step {
  return (sync) => {
    const red = reduction(`rank ${h.local.rank}: allreduce`, input, options.op, options.float);
    const c = new CollectiveCall(h.local, 'allreduce', signature('allreduce', red.dtype, red.op), stepOptions(options, d), input.byteLength);
    const inB = bytesOf(input);
    const outB = bytesOf(out);
    const fold: BoardFold = { op: red.op, dtype: red.dtype, count: input.length, out: outB };
    const leaders = h.leaders;
    // Member 0 of the host board is the leader (the host's lowest rank, local rank 0).
    const take: BoardRead = (srcs) => {
      if (!leaders) copyInto(outB, 0, srcs[0], 0, outB.byteLength);
    };
    if (sync) {
      if (CHECK_CALLS) driveSync(c, agreement(c));
      board.exchangeSync(inB, c.sig, c, fold);
      if (leaders) allreduceSync(leaders, out, stepOptions(options, d));
      board.exchangeSync(outB, c.sig, c, take);
      c.device.markFinished(c.slot, c.call);
      return;
    }
    return board.holdAsync(async (held) => {
      if (CHECK_CALLS) await driveAsync(c, agreement(c));
      await held(inB, c.sig, c, fold);
      if (leaders) await allreduce(leaders, out, stepOptions(options, d));
      await held(outB, c.sig, c, take);
      c.device.markFinished(c.slot, c.call);
    });
  };
}

/**
 * A broadcast of an array the host board holds, on a host with a board: on the root's host,
 * when the root is not its leader, the root publishes it on the board (the leader takes it
 * there) before the leaders' broadcast; elsewhere the leader publishes what it has after it. One board call per
 * host, the board held across the leaders' step, so a board call made meanwhile cannot pair with
 * it; the step across hosts is the leaders' broadcast from the root's host, as without a board.
 */
function hostBoardBroadcast(h: Hierarchy, board: Board, data: TypedArray, rootHost: number, rootLocal: number, options: RootOptions, d: Deadline): Step {
  return (sync) => {
    const onRootHost = h.host === rootHost;
    const source = onRootHost ? rootLocal : 0;
    const c = beginCall(h.local, 'broadcast', stepOptions(options, d), dtypeName(`rank ${h.local.rank}: broadcast`, data), undefined, source, data.byteLength);
    const bytes = bytesOf(data);
    const leaders = h.leaders;
    // Member i of the host board is local rank i.
    const take: BoardRead = (srcs) => {
      if (h.local.rank !== source) copyInto(bytes, 0, srcs[source], 0, bytes.byteLength);
    };
    // The board first only where the root is not its host's leader: a leader that is the root
    // sends across at once, without waiting for its host's other ranks to arrive.
    const boardFirst = source !== 0;
    if (sync) {
      if (CHECK_CALLS) driveSync(c, agreement(c));
      if (boardFirst) board.exchangeSync(bytes, c.sig, c, take);
      if (leaders) broadcastSync(leaders, data, stepOptions(options, d, rootHost));
      if (!boardFirst) board.exchangeSync(bytes, c.sig, c, take);
      c.device.markFinished(c.slot, c.call);
      return;
    }
    return board.holdAsync(async (held) => {
      if (CHECK_CALLS) await driveAsync(c, agreement(c));
      if (boardFirst) await held(bytes, c.sig, c, take);
      if (leaders) await broadcast(leaders, data, stepOptions(options, d, rootHost));
      if (!boardFirst) await held(bytes, c.sig, c, take);
      c.device.markFinished(c.slot, c.call);
    });
  };
}

/**
 * An allgather whose output the host board holds, on a host with a board: every rank publishes
 * its input on the board and the leader lays them out as the host's block; the leaders
 * allgather the blocks (the same step as without a board); the leader publishes the whole
 * output, which the others copy. The board is held across the leaders' step.
 */
function hostBoardAllgather<T extends TypedArray>(g: Group, h: Hierarchy, board: Board, input: T, output: T, options: CollectiveOptions, d: Deadline): Step {
  return (sync) => {
    const c = beginCall(h.local, 'allgather', stepOptions(options, d), dtypeName(`rank ${h.local.rank}: allgather`, input), undefined, 0, output.byteLength);
    const inB = bytesOf(input);
    const outB = bytesOf(output);
    const leaders = h.leaders;
    const { view: block, area } = scratchOf(g, input, h.local.size * input.length);
    const blockB = bytesOf(block);
    // The host's inputs in rank order (member i is local rank i), at the leader.
    const lay: BoardRead = (srcs) => {
      if (leaders) for (let r = 0; r < srcs.length; r++) copyInto(blockB, r * inB.byteLength, srcs[r], 0, inB.byteLength);
    };
    // Every rank publishes as many bytes (the board pairs calls by size); the others' are not read.
    const take: BoardRead = (srcs) => {
      if (!leaders) copyInto(outB, 0, srcs[0], 0, outB.byteLength);
    };
    const counts = h.hostSizes.map((k) => k * input.length);
    const done = () => {
      g.release(area);
      c.device.markFinished(c.slot, c.call);
    };
    if (sync) {
      try {
        if (CHECK_CALLS) driveSync(c, agreement(c));
        board.exchangeSync(inB, c.sig, c, lay);
        if (leaders) allgathervSync(leaders, block, output, counts, stepOptions(options, d));
        board.exchangeSync(outB, c.sig, c, take);
      } finally {
        done();
      }
      return;
    }
    return board
      .holdAsync(async (held) => {
        if (CHECK_CALLS) await driveAsync(c, agreement(c));
        await held(inB, c.sig, c, lay);
        if (leaders) await allgatherv(leaders, block, output, counts, stepOptions(options, d));
        await held(outB, c.sig, c, take);
      })
      .finally(done);
  };
}

/**
 * A reduceScatter whose input the host board holds, on a host with a board: every rank
 * publishes its input on the board and the leader folds them (the host's sum); the leaders
 * reduce-scatter the sums by host (the same step as without a board); the leader publishes its
 * host's block, and every rank copies its part. The board is held across the leaders' step.
 */
function hostBoardReduceScatter<T extends TypedArray>(g: Group, h: Hierarchy, board: Board, input: T, output: T, options: ReduceScatterOptions, d: Deadline): Step {
  return (sync) => {
    const red = reduction(`rank ${h.local.rank}: reduceScatter`, input, options.op, options.float);
    const c = beginCall(h.local, 'reduce_scatter', stepOptions(options, d), red.dtype, red.op, 0, input.byteLength);
    const n = output.length;
    const inB = bytesOf(input);
    const outB = bytesOf(output);
    const leaders = h.leaders;
    const { view: sum, area } = scratchOf(g, input, input.length);
    const { view: part, area: partArea } = scratchOf(g, input, h.local.size * n);
    const sumB = bytesOf(sum);
    const partB = bytesOf(part);
    const fold: BoardRead = (srcs) => {
      if (leaders) reduceMany(red.op, red.dtype, input.length, sumB, srcs);
    };
    // The leader's part is the host's block; the others publish as many bytes, not read.
    const take: BoardRead = (srcs) => copyInto(outB, 0, srcs[0], h.local.rank * outB.byteLength, outB.byteLength);
    const counts = h.hostSizes.map((k) => k * n);
    const done = () => {
      g.release(partArea);
      g.release(area);
      c.device.markFinished(c.slot, c.call);
    };
    if (sync) {
      try {
        if (CHECK_CALLS) driveSync(c, agreement(c));
        board.exchangeSync(inB, c.sig, c, fold);
        if (leaders) reduceScatterSync(leaders, sum, part, stepOptions(options, d, 0, undefined, counts));
        board.exchangeSync(partB, c.sig, c, take);
      } finally {
        done();
      }
      return;
    }
    return board
      .holdAsync(async (held) => {
        if (CHECK_CALLS) await driveAsync(c, agreement(c));
        await held(inB, c.sig, c, fold);
        if (leaders) await reduceScatter(leaders, sum, part, stepOptions(options, d, 0, undefined, counts));
        await held(partB, c.sig, c, take);
      })
      .finally(done);
  };
}

/**
 * The several-leaders allreduce with its steps inside the host on shared memory: the shared
 * allreduce among the host's ranks on the host board (allreduce-shared.ts), each rank reducing
 * its chunk of everyone's input in place, allreducing that chunk with the same local rank of
 * every other host, then copying the others' chunks. Per rank of 2 x 2 hosts at 1 MiB this
 * reads 0.75 MiB and writes 0.5 MiB in place where the message steps (reduce-scatter and
 * allgather through the rings) copy each byte in and out. The step across hosts is the same
 * call as in the message plan (the chunk is the shard), so hosts may differ in which plan
 * they take (a host whose ranks pass heap arrays falls back alone).
 */
function hostShared<T extends TypedArray>(h: Hierarchy, board: Board, input: T, out: T, options: AllreduceOptions, d: Deadline): SharedCall {
  const red = reduction(`rank ${h.local.rank}: allreduce`, input, options.op, options.float);
  const c = new CollectiveCall(h.local, 'allreduce', signature('allreduce', red.dtype, red.op), stepOptions(options, d), input.byteLength);
  const peers = h.peers!;
  const across: AcrossHosts = {
    sync: (first, count) => void allreduceSync(peers, out.subarray(first, first + count), stepOptions(options, d)),
    async: async (first, count) => void (await allreduce(peers, out.subarray(first, first + count), stepOptions(options, d))),
  };
  return { c, board, inB: bytesOf(input), outB: bytesOf(out), red, count: input.length, forced: false, across };
}

/**
 * Claims the job's slot of `collective` for the call's tag until the call ends. A small
 * allreduce's first step, and a barrier's, runs on the host board, which queues a second call
 * made beside it instead of refusing it; without this claim that second call failed in its
 * fabric step or went through, depending on timing. Now it is refused when it is made, on
 * every rank, as a flat call is. Undefined for a bad tag (the first step refuses it, naming it).
 */
function claimCall(g: Group, collective: CollectiveName, options: CollectiveOptions): number | undefined {
  const tag = options.tag ?? 0;
  if (!isTag(tag)) return undefined;
  const slot = collectiveSlot(collective, tag) + g.transport.slotBase;
  try {
    g.transport.claimSlot(slot, () => `${g.label ?? `rank ${g.rank}`}: ${collective} (tag ${tag})`);
  } catch (err) {
    throw refused(g, err);
  }
  return slot;
}

/** Hierarchical allreduce (see the file comment); `input` is checked by the caller. */
export async function hierarchicalAllreduce<T extends TypedArray>(g: Group, h: Hierarchy, input: T, options: AllreduceOptions): Promise<T> {
  const out = (options.output as T | undefined) ?? input;
  const d = begin(g, options);
  const slot = claimCall(g, 'allreduce', options);
  try {
    await runAsync(allreduceSteps(h, input, out, options, d, g));
  } finally {
    if (slot !== undefined) g.transport.releaseSlot(slot);
  }
  return out;
}

export function hierarchicalAllreduceSync<T extends TypedArray>(g: Group, h: Hierarchy, input: T, options: AllreduceOptions): T {
  const out = (options.output as T | undefined) ?? input;
  const d = begin(g, options);
  const slot = claimCall(g, 'allreduce', options);
  try {
    runSync(allreduceSteps(h, input, out, options, d, g));
  } finally {
    if (slot !== undefined) g.transport.releaseSlot(slot);
  }
  return out;
}

function* broadcastSteps(h: Hierarchy, data: TypedArray, root: number, options: RootOptions, d: Deadline): Generator<Step> {
  const rootHost = h.hostOf[root];
  const rootLocal = h.localRankOf[root];
  const onRootHost = h.host === rootHost;
  // An array the host board holds: the host's step on the board (the leaders' step is the same).
  const board = h.local.size > 1 && boardFits(h.local.size, data.byteLength, options) ? h.local.transport.hostBoard : undefined;
  if (board) {
    yield hostBoardBroadcast(h, board, data, rootHost, rootLocal, options, d);
    return;
  }
  // 1. Inside the root's host, from the root (its leader gets it too).
  if (onRootHost && rootLocal !== 0 && h.local.size > 1) yield (s) => (s ? broadcastSync : broadcast)(h.local, data, stepOptions(options, d, rootLocal));
  // 2. Among the leaders, from the root's host's leader.
  if (h.leaders) yield (s) => (s ? broadcastSync : broadcast)(h.leaders!, data, stepOptions(options, d, rootHost));
  // 3. Inside every other host (and the root's, when the root is its leader).
  if (h.local.size > 1 && (!onRootHost || rootLocal === 0)) yield (s) => (s ? broadcastSync : broadcast)(h.local, data, stepOptions(options, d));
}

export async function hierarchicalBroadcast<T extends TypedArray>(g: Group, h: Hierarchy, data: T, root: number, options: RootOptions): Promise<T> {
  const d = begin(g, options);
  const slot = claimCall(g, 'broadcast', options);
  try {
    await runAsync(broadcastSteps(h, data, root, options, d));
  } finally {
    if (slot !== undefined) g.transport.releaseSlot(slot);
  }
  return data;
}

export function hierarchicalBroadcastSync<T extends TypedArray>(g: Group, h: Hierarchy, data: T, root: number, options: RootOptions): T {
  const d = begin(g, options);
  const slot = claimCall(g, 'broadcast', options);
  try {
    runSync(broadcastSteps(h, data, root, options, d));
  } finally {
    if (slot !== undefined) g.transport.releaseSlot(slot);
  }
  return data;
}

function* allgatherSteps<T extends TypedArray>(g: Group, h: Hierarchy, input: T, output: T, options: CollectiveOptions, d: Deadline): Generator<Step> {
  const n = input.length;
  // An output the host board holds: both steps inside the host on it (the leaders' step is the same).
  const board = h.local.size > 1 && boardFits(h.local.size, output.byteLength, options) ? h.local.transport.hostBoard : undefined;
  if (board) {
    yield hostBoardAllgather(g, h, board, input, output, options, d);
    return;
  }
  // Gather this host's ranks' inputs at the leader (ranks of a host are consecutive, so they
  // form one block of the output), share the blocks among leaders, spread inside the host.
  const { view: block, area } = scratchOf(g, input, h.local.size * n);
  try {
    yield (s) => (s ? gatherSync : gather)(h.local, input, h.local.rank === 0 ? block : undefined, stepOptions(options, d));
    if (h.leaders) {
      const counts = h.hostSizes.map((k) => k * n);
      yield (s) => (s ? allgathervSync : allgatherv)(h.leaders!, block, output, counts, stepOptions(options, d));
    }
  } finally {
    g.release(area);
  }
  if (h.local.size > 1) yield (s) => (s ? broadcastSync : broadcast)(h.local, output, stepOptions(options, d));
}

export async function hierarchicalAllgather<T extends TypedArray>(g: Group, h: Hierarchy, input: T, output: T, options: CollectiveOptions): Promise<T> {
  const d = begin(g, options, () => checkBlocks(g, 'allgather', input, 'input', output, 'output'));
  const slot = claimCall(g, 'allgather', options);
  try {
    await runAsync(allgatherSteps(g, h, input, output, options, d));
  } finally {
    if (slot !== undefined) g.transport.releaseSlot(slot);
  }
  return output;
}

export function hierarchicalAllgatherSync<T extends TypedArray>(g: Group, h: Hierarchy, input: T, output: T, options: CollectiveOptions): T {
  const d = begin(g, options, () => checkBlocks(g, 'allgatherSync', input, 'input', output, 'output'));
  const slot = claimCall(g, 'allgather', options);
  try {
    runSync(allgatherSteps(g, h, input, output, options, d));
  } finally {
    if (slot !== undefined) g.transport.releaseSlot(slot);
  }
  return output;
}

function* reduceScatterSteps<T extends TypedArray>(g: Group, h: Hierarchy, input: T, output: T, options: ReduceScatterOptions, d: Deadline): Generator<Step> {
  const n = output.length;
  // An input the host board holds: both steps inside the host on it (the leaders' step is the same).
  const board = h.local.size > 1 && boardFits(h.local.size, input.byteLength, options) ? h.local.transport.hostBoard : undefined;
  if (board) {
    yield hostBoardReduceScatter(g, h, board, input, output, options, d);
    return;
  }
  // Reduce the whole input to the leader (in a scratch copy: the input stays as it was).
  const { view: sum, area } = scratchOf(g, input, input.length);
  try {
    sum.set(input as never);
    if (h.local.size > 1) yield (s) => (s ? reduceSync : reduce)(h.local, sum, stepOptions(options, d));
    let first = 0;
    for (let k = 0; k < h.host; k++) first += h.hostSizes[k];
    const mine = sum.subarray(first * n, (first + h.local.size) * n) as T;
    if (h.leaders) {
      const { view: part, area: partArea } = scratchOf(g, input, h.local.size * n);
      try {
        yield (s) => (s ? reduceScatterSync : reduceScatter)(h.leaders!, sum, part, stepOptions(options, d, 0, undefined, h.hostSizes.map((k) => k * n)));
        mine.set(part as never);
      } finally {
        g.release(partArea);
      }
    }
    yield (s) => (s ? scatterSync : scatter)(h.local, h.local.rank === 0 ? mine : undefined, output, stepOptions(options, d));
  } finally {
    g.release(area);
  }
}

export async function hierarchicalReduceScatter<T extends TypedArray>(g: Group, h: Hierarchy, input: T, output: T, options: ReduceScatterOptions): Promise<T> {
  const d = begin(g, options, () => checkBlocks(g, 'reduceScatter', output, 'output', input, 'input'));
  const slot = claimCall(g, 'reduce_scatter', options);
  try {
    await runAsync(reduceScatterSteps(g, h, input, output, options, d));
  } finally {
    if (slot !== undefined) g.transport.releaseSlot(slot);
  }
  return output;
}

export function hierarchicalReduceScatterSync<T extends TypedArray>(g: Group, h: Hierarchy, input: T, output: T, options: ReduceScatterOptions): T {
  const d = begin(g, options, () => checkBlocks(g, 'reduceScatterSync', output, 'output', input, 'input'));
  const slot = claimCall(g, 'reduce_scatter', options);
  try {
    runSync(reduceScatterSteps(g, h, input, output, options, d));
  } finally {
    if (slot !== undefined) g.transport.releaseSlot(slot);
  }
  return output;
}

/**
 * Inside the host first, on the host board (a first step may take it). Hosts with as many
 * ranks each then need one more step: every local rank waits for the same local rank of every
 * other host, which left its own host's step only once all its host's ranks had arrived. Other
 * hosts: among the leaders, then inside the host again, over messages (a later step may not
 * take the board).
 */
function* barrierSteps(h: Hierarchy, options: CollectiveOptions, d: Deadline): Generator<Step> {
  const board = h.local.size > 1 && !options.tag ? h.local.transport.hostBoard : undefined;
  if (board) {
    yield hostBoardBarrier(h, board, options, d);
    return;
  }
  if (h.local.size > 1) yield (s) => (s ? barrierSync : barrier)(h.local, stepOptions(options, d));
  if (h.leaders) yield (s) => (s ? barrierSync : barrier)(h.leaders!, stepOptions(options, d));
  if (h.local.size > 1) yield (s) => (s ? barrierSync : barrier)(h.local, stepOptions(options, d));
}

/**
 * A barrier among the leaders between two calls on the host board, the board held from the
 * first to the last. A rank leaves once its leader has heard from every host, and the ranks of
 * a host leave within a scheduler turn of each other: 2 x 2 emulated hosts with a core each,
 * a 8 B allreduce timed after it, ranks left 16-26 us apart against 50-68 us when every local
 * rank crossed with its counterparts (docs/hosts.md, 2026-12-06, morning).
 */
function hostBoardBarrier(h: Hierarchy, board: Board, options: CollectiveOptions, d: Deadline): Step {
  return (sync) => {
    const c = new CollectiveCall(h.local, 'barrier', signature('barrier'), stepOptions(options, d));
    const leaders = h.leaders;
    if (sync) {
      if (CHECK_CALLS) driveSync(c, agreement(c));
      board.exchangeSync(EMPTY, c.sig, c);
      if (leaders) barrierSync(leaders, stepOptions(options, d));
      board.exchangeSync(EMPTY, c.sig, c);
      c.device.markFinished(c.slot, c.call);
      return;
    }
    return board.holdAsync(async (held) => {
      if (CHECK_CALLS) await driveAsync(c, agreement(c));
      await held(EMPTY, c.sig, c);
      if (leaders) await barrier(leaders, stepOptions(options, d));
      await held(EMPTY, c.sig, c);
      c.device.markFinished(c.slot, c.call);
    });
  };
}

export async function hierarchicalBarrier(g: Group, h: Hierarchy, options: CollectiveOptions): Promise<void> {
  const d = begin(g, options);
  const slot = claimCall(g, 'barrier', options);
  try {
    await runAsync(barrierSteps(h, options, d));
  } finally {
    if (slot !== undefined) g.transport.releaseSlot(slot);
  }
}

export function hierarchicalBarrierSync(g: Group, h: Hierarchy, options: CollectiveOptions): void {
  const d = begin(g, options);
  const slot = claimCall(g, 'barrier', options);
  try {
    runSync(barrierSteps(h, options, d));
  } finally {
    if (slot !== undefined) g.transport.releaseSlot(slot);
  }
}

/** allgather / reduceScatter: `whole` holds world-size blocks of `part`'s length, of its type. */
function checkBlocks(g: Group, what: string, part: unknown, pn: string, whole: unknown, wn: string): void {
  const where = `rank ${g.rank}: ${what}`;
  checkArray(where, pn, part);
  checkArray(where, wn, whole);
  checkInOut(where, part, whole, pn, wn);
  checkLength(where, wn, whole, part.length * g.size, `${pn} length x world size`);
}
