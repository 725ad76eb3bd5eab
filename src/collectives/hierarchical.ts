/**
 * Collectives for a job that spans hosts: each one is a few calls on the job's subgroups, so
 * the bulk of the bytes moves over shared memory inside a host and only what must cross the
 * network goes over the fabric, once per host (or once per local rank, in parallel).
 *
 * allreduce, three plans:
 * - several leaders per host (every host runs the same number L of ranks on at least L cores,
 *   and the array has at least MULTI_LEADER_MIN_BYTES and does not fit the host board):
 *   reduce-scatter inside the host (each local rank gets a 1/L shard), allreduce of each shard
 *   among the ranks with the same local rank on every host (L allreduces across hosts at
 *   once), allgather inside the host; untagged calls over ctx.alloc arrays run the two steps
 *   inside the host on shared memory, reading the peers' arrays in place (hostShared), the
 *   others through the rings. When some host has fewer cores than ranks, large arrays take
 *   the one-leader plan below instead, in place over ctx.alloc arrays too;
 * - arrays the host board holds (untagged, up to 64 KiB): the host's sum on the host board,
 *   allreduce of it among the leaders (local rank 0 of every host), the leader's result on the
 *   host board again; the host's ranks hold the board from the first step to the last
 *   (hostBoardAllreduce), and only one rank per host crosses the network;
 * - one leader per host otherwise (hosts with different numbers of ranks or fewer cores than
 *   ranks, or a host without a board): reduce to local rank 0, allreduce among the leaders,
 *   broadcast inside the host; for large untagged ctx.alloc arrays the leader reduces the
 *   host's arrays in place and its result goes straight into theirs (hostShared); tagged small arrays on hosts with the same number of ranks: allreduce inside the host, then
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
 * any aborts the job as usual. The same steps run with the Promise or the blocking calls. The
 * plans whose steps inside a host take the host board are in host-board.ts.
 */
import { Deadline } from '../util/deadline.js';
import { collectiveSlot, type CollectiveName } from '../transport/signature.js';
import { isTag, refused, type CollectiveOptions, type Group } from './call.js';
import { checkArray, checkInOut, checkLength, evenCounts, type TypedArray } from './checks.js';
import { sharedAllreduce, sharedAllreduceSync } from './allreduce-shared.js';
import { allreduce, allreduceSync, boardFits, type AllreduceOptions } from './allreduce.js';
import { allgather, allgatherSync, allgatherv, allgathervSync } from './allgather.js';
import { barrier, barrierSync } from './barrier.js';
import { broadcast, broadcastSync, type RootOptions } from './broadcast.js';
import { gather, gatherSync, scatter, scatterSync } from './gather.js';
import { reduce, reduceSync } from './reduce.js';
import { reduceScatter, reduceScatterSync, type ReduceScatterOptions } from './reduce-scatter.js';
import { scratchOf, stepOptions, type Step } from './steps.js';
import { hostBoardAllgather, hostBoardAllreduce, hostBoardBarrier, hostBoardBroadcast, hostBoardReduceScatter, hostShared } from './host-board.js';

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
  /** Some host runs more ranks than it has cores (the same on every rank: from the host map). */
  readonly oversubscribed: boolean;
  /** This rank's host runs more ranks than it has cores (the same on every rank of the host). */
  readonly hostOversubscribed: boolean;
}


/**
 * Runs steps one after another with the Promise calls, holding the job's slot of `collective`
 * for the call's tag meanwhile (claimCall).
 */
async function runClaimedAsync(g: Group, collective: CollectiveName, options: CollectiveOptions, steps: Iterable<Step>): Promise<void> {
  const slot = claimCall(g, collective, options);
  try {
    for (const s of steps) await s(false);
  } finally {
    if (slot !== undefined) g.transport.releaseSlot(slot);
  }
}

/** runClaimedAsync with the blocking calls. */
function runClaimedSync(g: Group, collective: CollectiveName, options: CollectiveOptions, steps: Iterable<Step>): void {
  const slot = claimCall(g, collective, options);
  try {
    for (const s of steps) s(true);
  } finally {
    if (slot !== undefined) g.transport.releaseSlot(slot);
  }
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
  // Large arrays from 128 KiB (and tagged from 64 KiB); an array the host board holds takes
  // the host-board plan below (at 64 KiB: 180 / 181 / 178 us against 228 / 280 / 234 us for
  // several leaders with their steps in place, docs/hosts.md, 2026-12-06, morning). Decided
  // from the call and the host map alone (size, tag, ranks and cores per host), never from
  // whether this host has a board: every rank of the job must pick the same plan, or their
  // steps across hosts would not match. The split of the array (evenCounts) is the same in
  // place and through the rings, so the steps across hosts match between a host that reads in
  // place and one that falls back.
  const large = input.byteLength >= MULTI_LEADER_MIN_BYTES && input.length >= L && !boardFits(L, input.byteLength, options);
  // Several leaders when every host has a core per rank. A host with fewer runs its ranks'
  // steps across hosts on the same cores, where one rank crossing with the whole array was
  // faster (2 hosts x 2 ranks, a core each, in place, ABBA blocks in one job: 1 MiB 0.78-1.07
  // against 1.07-1.27 ms, 4 MiB 3.59-3.88 against 4.11-4.42 ms; docs/hosts.md).
  const by = h.peers && !h.oversubscribed ? 'chunks' : 'leader';
  // Arrays from ctx.alloc on every rank of the host: the steps inside the host read the
  // peers' arrays in place (see hostShared); otherwise, or tagged, messages.
  const board = large && !options.tag ? h.local.transport.hostBoard : undefined;
  if (board) {
    let done = false;
    const call = hostShared(g, h, board, input, out, options, d, by);
    yield (s) => (s ? (done = sharedAllreduceSync(call)) : sharedAllreduce(call).then((ok) => void (done = ok)));
    // Its board calls are over either way; heap arrays somewhere on this host: the rings below.
    call.c.device.markFinished(call.c.slot, call.c.call);
    if (done) return;
  }
  if (large && by === 'chunks') {
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
      yield hostBoardAllreduce(g, h, board, input, out, options, d);
      return;
    }
  } else if (h.peers && !large) {
    // Tagged and small (no board): allreduce inside the host, then among the same local rank of
    // every host. Large arrays with one leader crossing take the three steps below.
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
 * Claims the job's slot of `collective` for the call's tag until the call ends. The host-board
 * plans (host-board.ts) queue a second call made beside them on the board instead of refusing
 * it; without this claim that second call failed in its fabric step or went through,
 * depending on timing. Now it is refused when it is made, on every rank, as a flat call is.
 * Undefined for a bad tag (the first step refuses it, naming it).
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
  await runClaimedAsync(g, 'allreduce', options, allreduceSteps(h, input, out, options, d, g));
  return out;
}

export function hierarchicalAllreduceSync<T extends TypedArray>(g: Group, h: Hierarchy, input: T, options: AllreduceOptions): T {
  const out = (options.output as T | undefined) ?? input;
  const d = begin(g, options);
  runClaimedSync(g, 'allreduce', options, allreduceSteps(h, input, out, options, d, g));
  return out;
}

function* broadcastSteps(g: Group, h: Hierarchy, data: TypedArray, root: number, options: RootOptions, d: Deadline): Generator<Step> {
  const rootHost = h.hostOf[root];
  const rootLocal = h.localRankOf[root];
  const onRootHost = h.host === rootHost;
  // An array the host board holds: the host's step on the board (the leaders' step is the same).
  const board = h.local.size > 1 && boardFits(h.local.size, data.byteLength, options) ? h.local.transport.hostBoard : undefined;
  if (board) {
    yield hostBoardBroadcast(g, h, board, data, rootHost, rootLocal, options, d);
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
  await runClaimedAsync(g, 'broadcast', options, broadcastSteps(g, h, data, root, options, d));
  return data;
}

export function hierarchicalBroadcastSync<T extends TypedArray>(g: Group, h: Hierarchy, data: T, root: number, options: RootOptions): T {
  const d = begin(g, options);
  runClaimedSync(g, 'broadcast', options, broadcastSteps(g, h, data, root, options, d));
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
  await runClaimedAsync(g, 'allgather', options, allgatherSteps(g, h, input, output, options, d));
  return output;
}

export function hierarchicalAllgatherSync<T extends TypedArray>(g: Group, h: Hierarchy, input: T, output: T, options: CollectiveOptions): T {
  const d = begin(g, options, () => checkBlocks(g, 'allgatherSync', input, 'input', output, 'output'));
  runClaimedSync(g, 'allgather', options, allgatherSteps(g, h, input, output, options, d));
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
  await runClaimedAsync(g, 'reduce_scatter', options, reduceScatterSteps(g, h, input, output, options, d));
  return output;
}

export function hierarchicalReduceScatterSync<T extends TypedArray>(g: Group, h: Hierarchy, input: T, output: T, options: ReduceScatterOptions): T {
  const d = begin(g, options, () => checkBlocks(g, 'reduceScatterSync', output, 'output', input, 'input'));
  runClaimedSync(g, 'reduce_scatter', options, reduceScatterSteps(g, h, input, output, options, d));
  return output;
}

/**
 * Inside the host first, on the host board (a first step may take it). Hosts with as many
 * ranks each then need one more step: every local rank waits for the same local rank of every
 * other host, which left its own host's step only once all its host's ranks had arrived. Other
 * hosts: among the leaders, then inside the host again, over messages (a later step may not
 * take the board).
 */
function* barrierSteps(g: Group, h: Hierarchy, options: CollectiveOptions, d: Deadline): Generator<Step> {
  const board = h.local.size > 1 && !options.tag ? h.local.transport.hostBoard : undefined;
  if (board) {
    yield hostBoardBarrier(g, h, board, options, d);
    return;
  }
  if (h.local.size > 1) yield (s) => (s ? barrierSync : barrier)(h.local, stepOptions(options, d));
  if (h.leaders) yield (s) => (s ? barrierSync : barrier)(h.leaders!, stepOptions(options, d));
  if (h.local.size > 1) yield (s) => (s ? barrierSync : barrier)(h.local, stepOptions(options, d));
}


export async function hierarchicalBarrier(g: Group, h: Hierarchy, options: CollectiveOptions): Promise<void> {
  const d = begin(g, options);
  await runClaimedAsync(g, 'barrier', options, barrierSteps(g, h, options, d));
}

export function hierarchicalBarrierSync(g: Group, h: Hierarchy, options: CollectiveOptions): void {
  const d = begin(g, options);
  runClaimedSync(g, 'barrier', options, barrierSteps(g, h, options, d));
}

/** allgather / reduceScatter: `whole` holds world-size blocks of `part`'s length, of its type. */
function checkBlocks(g: Group, what: string, part: unknown, pn: string, whole: unknown, wn: string): void {
  const where = `rank ${g.rank}: ${what}`;
  checkArray(where, pn, part);
  checkArray(where, wn, whole);
  checkInOut(where, part, whole, pn, wn);
  checkLength(where, wn, whole, part.length * g.size, `${pn} length x world size`);
}
