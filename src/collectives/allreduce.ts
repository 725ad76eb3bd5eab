/**
 * allreduce: every rank ends with the element-wise reduction of all ranks' arrays.
 *
 * - `direct` (small inputs, up to 8 ranks): one round; every rank sends its array to every
 *   other and reduces all of them in rank order, so every rank computes bit-identical results.
 * - `ring` (bandwidth-optimal): ring reduce-scatter then ring allgather; each incoming chunk is
 *   reduced straight from the peer's ring into the output while later chunks are in flight.
 * - `board` (one host, shm provider, inputs up to 64 KiB): no messages at all; every rank
 *   publishes its bytes on its board and reduces its peers' boards in rank order, read in place
 *   through the shm mapping (transport/board.ts).
 * - `shared` (one host, shm provider, inputs and outputs from `ctx.alloc`, above 64 KiB): every
 *   rank reads its peers' arrays in place; no rings (allreduce-shared.ts). Tried first for
 *   large untagged calls on shm; when some rank's arrays are in the JS heap, all take the ring.
 */
import { WeftError } from '../errors.js';
import { reduceMany } from '../reduce/index.js';
import { Board, type BoardFold } from '../transport/board.js';
import type { ReduceOp } from '../reduce/index.js';
import type { TransportOp } from '../transport/ops.js';
import { bytesOf, checkArray, checkLength, evenCounts, offsets, reduction, checkInOut, type TypedArray } from './checks.js';
import { agreement, CHECK_CALLS } from './agreement.js';
import { CollectiveCall, copy, driveAsync, driveSync, runAsync, runSync, type Algorithm, type CollectiveOptions, type Group, type Reduction, refused } from './call.js';
import { signature } from '../transport/signature.js';
import { ringAllgather, ringReduceScatter, staggered, type SegmentHooks } from './ring.js';
import { sharedAllreduce, sharedAllreduceSync, type SharedCall } from './allreduce-shared.js';

/**
 * 'hierarchical': inside each host, then across hosts (collectives/hierarchical.ts); what
 * 'auto' picks when the job spans hosts, and the same as 'auto' when it does not.
 */
export type AllreduceAlgorithm = 'auto' | 'board' | 'direct' | 'ring' | 'shared' | 'hierarchical';
const ALGORITHMS: readonly AllreduceAlgorithm[] = ['auto', 'board', 'direct', 'ring', 'shared', 'hierarchical'];

export interface AllreduceOptions extends CollectiveOptions {
  /** Reduction (default 'sum'). */
  op?: ReduceOp;
  /** Out of place: the result goes here, `input` is left alone. Default: in place. */
  output?: TypedArray;
  /** Force an algorithm (default 'auto'). */
  algorithm?: AllreduceAlgorithm;
  /** Uint16Array data is float16 or bfloat16 (default: uint16). */
  float?: 'float16' | 'bfloat16';
}

/** Inputs up to this many bytes take the one-round direct exchange (with at most 8 ranks). */
export const DIRECT_MAX_BYTES = 64 * 1024;

interface Plan {
  c: CollectiveCall;
  alg: Algorithm | undefined;
  out: TypedArray;
  /** Set when the call takes the board instead of messages. */
  board?: { board: Board; inB: Uint8Array; fold: BoardFold };
  /** Set when the call tries the shared path first (alg is then the ring to fall back to). */
  shared?: SharedCall;
}

/** What the checks of one call established, reused when the next call passes the same arrays and options. */
interface Checked {
  input: TypedArray;
  output: TypedArray;
  length: number;
  op: ReduceOp | undefined;
  float: AllreduceOptions['float'];
  red: Reduction;
  sig: number;
}

/**
 * The last call's checks, per group: a training loop reduces the same arrays call after call,
 * and type, dtype and length checks cost more than an 8-byte board allreduce itself.
 */
const lastChecked = new WeakMap<Group, Checked>();

/** The argument checks of an allreduce (cached per group for a loop over the same arrays). */
function checked(g: Group, input: TypedArray, options: AllreduceOptions, where: string): Checked {
  const output = options.output ?? input;
  let k = lastChecked.get(g);
  if (k === undefined || k.input !== input || k.output !== output || k.op !== options.op || k.float !== options.float || k.length !== input.length || input.length !== output.length) {
    checkArray(where, 'input', input);
    checkArray(where, 'output', output);
    checkInOut(where, input, output);
    checkLength(where, 'output', output, input.length, 'an allreduce output has as many elements as its input');
    const red = reduction(where, input, options.op, options.float);
    k = { input, output, length: input.length, op: options.op, float: options.float, red, sig: signature('allreduce', red.dtype, red.op) };
    lastChecked.set(g, k);
  }
  return k;
}

/**
 * Checks an allreduce's arguments without starting a call (a hierarchical allreduce runs as
 * calls on subgroups); refuses them as a call would (the job is aborted).
 */
export function checkAllreduce(g: Group, input: TypedArray, options: AllreduceOptions, where: string): void {
  try {
    checked(g, input, options, where);
    if (options.algorithm !== undefined && !ALGORITHMS.includes(options.algorithm)) throw new WeftError('EINVAL', `${where}: unknown algorithm ${JSON.stringify(options.algorithm)}; use one of ${ALGORITHMS.join(', ')}`);
  } catch (err) {
    throw refused(g, err);
  }
}

/**
 * An 'auto' call of `bytes` among `size` ranks takes the board when there is one: untagged
 * (board calls pair up in call order, not by tag), at most Board.capacity bytes, at most 8 ranks.
 */
export function boardFits(size: number, bytes: number, options: CollectiveOptions): boolean {
  return !options.tag && bytes <= Board.capacity && size <= 8;
}

/**
 * Work of the caller's own on the array around an allreduce's messages (allreduceAround): each
 * range of elements is handed to `before` just before the messages that read it are posted,
 * and to `after` once the call no longer reads or writes it, while other ranges' messages may
 * be on the wire.
 */
export interface AroundHooks {
  before(first: number, count: number): void;
  after(first: number, count: number): void;
}

function plan(g: Group, input: TypedArray, options: AllreduceOptions, where: string, around?: AroundHooks): Plan {
  try {
    const output = options.output ?? input;
    const k = checked(g, input, options, where);
    const red = k.red;
    const c = new CollectiveCall(g, 'allreduce', k.sig, options, input.byteLength);
    const inB = bytesOf(input);
    const outB = bytesOf(output);
    const algorithm = options.algorithm === undefined || options.algorithm === 'hierarchical' ? 'auto' : options.algorithm;
    // The job's board on one host (a host board is the hierarchical plans' alone: hierarchical.ts).
    const board = g.transport.board;
    if (algorithm === 'board' && (!board || inB.byteLength > Board.capacity)) {
      throw new WeftError('EINVAL', `${where}: algorithm 'board' needs the shm provider on one host and at most ${Board.capacity} bytes`);
    }
    // Board calls pair up in call order, not by tag: a tagged call (maybe one of several in
    // flight, issued in different orders on different ranks) takes tag-matched messages.
    if (g.size > 1 && board && (algorithm === 'board' || (algorithm === 'auto' && boardFits(g.size, inB.byteLength, options)))) {
      return { c, alg: undefined, out: output, board: { board, inB, fold: { op: red.op, dtype: red.dtype, count: input.length, out: outB } } };
    }
    // The shared path reads every rank's arrays through the job's board.
    const jobBoard = g.transport.board;
    if (algorithm === 'shared' && (!jobBoard || g.size === 1 || options.tag)) {
      throw new WeftError('EINVAL', `${where}: algorithm 'shared' needs the shm provider on one host, more than one rank and no tag`);
    }
    let alg: Algorithm;
    if (g.size > 1 && jobBoard && !options.tag && (algorithm === 'shared' || (algorithm === 'auto' && inB.byteLength > DIRECT_MAX_BYTES))) {
      const shared: SharedCall = { c, board: jobBoard, inB, outB, red, count: input.length, forced: algorithm === 'shared' };
      return { c, alg: ring(c, inB, outB, red, input.length), out: output, shared };
    }
    if (g.size === 1) alg = single(inB, outB);
    else if (algorithm === 'direct' || (algorithm === 'auto' && inB.byteLength <= DIRECT_MAX_BYTES && g.size <= 8)) alg = direct(c, inB, outB, red, input.length);
    else return { c, alg: ring(c, inB, outB, red, input.length, around), out: output };
    return { c, alg: around ? whole(alg, around, input.length) : alg, out: output };
  } catch (err) {
    throw refused(g, err);
  }
}

/** An algorithm that is not cut into segments, with the hooks around all of it. */
function* whole(alg: Algorithm, around: AroundHooks, count: number): Algorithm {
  around.before(0, count);
  yield* alg;
  around.after(0, count);
}

function* single(inB: Uint8Array, outB: Uint8Array): Algorithm {
  copy(outB, inB);
}

function* direct(c: CollectiveCall, inB: Uint8Array, outB: Uint8Array, red: Reduction, count: number): Algorithm {
  const n = c.size;
  const bytes = inB.byteLength;
  const scratch = c.scratch(bytes * n);
  const srcs: Uint8Array[] = new Array(n);
  const ops: TransportOp[] = [];
  for (let p = 0; p < n; p++) {
    if (p === c.rank) continue;
    srcs[p] = scratch.subarray(p * bytes, (p + 1) * bytes);
    ops.push(c.recv(p, srcs[p]));
  }
  for (let k = 1; k < n; k++) ops.push(c.send((c.rank + k) % n, inB));
  yield ops;
  // In place, the output is this rank's input: keep a copy so the rank-order fold reads it intact.
  if (inB.buffer === outB.buffer && inB.byteOffset === outB.byteOffset && c.rank !== 0) {
    srcs[c.rank] = scratch.subarray(c.rank * bytes, (c.rank + 1) * bytes);
    copy(srcs[c.rank], inB);
  } else {
    srcs[c.rank] = inB;
  }
  reduceMany(red.op, red.dtype, count, outB, srcs);
}

/**
 * Over ofi, ring blocks of at most this many bytes: a larger array is cut into segments of
 * `size` such blocks, two in flight, so a step's network latency is not a gap in the pipeline
 * (4 ranks, 32 MiB: 61-68 -> 50-61 ms here). On shm a step boundary costs next to nothing and
 * segments measured slightly slower, so shm rings run whole.
 */
export const SEGMENT_BLOCK_BYTES = 1024 * 1024;

function ring(c: CollectiveCall, inB: Uint8Array, outB: Uint8Array, red: Reduction, count: number, around?: AroundHooks): Algorithm {
  const segments = Math.min(Math.ceil(inB.byteLength / (c.size * SEGMENT_BLOCK_BYTES)), Math.floor(count / c.size));
  if (segments <= 1 || !c.device.stagedRings) {
    const alg = ringSegment(c, inB, outB, red, count);
    return around ? whole(alg, around, count) : alg;
  }
  const eb = red.elementBytes;
  const at = offsets(evenCounts(count, segments));
  const hooks: SegmentHooks | undefined = around && {
    before: (k) => around.before(at[k], at[k + 1] - at[k]),
    after: (k) => around.after(at[k], at[k + 1] - at[k]),
    flush: () => c.device.flush(),
  };
  return staggered((k) => ringSegment(c, inB.subarray(at[k] * eb, at[k + 1] * eb), outB.subarray(at[k] * eb, at[k + 1] * eb), red, at[k + 1] - at[k]), segments, 2, hooks);
}

function* ringSegment(c: CollectiveCall, inB: Uint8Array, outB: Uint8Array, red: Reduction, count: number): Algorithm {
  const off = offsets(evenCounts(count, c.size)).map((e) => e * red.elementBytes);
  yield* ringReduceScatter(c, inB, outB, off, red);
  yield* ringAllgather(c, outB, off);
}

/**
 * Reduces `input` across all ranks; resolves to the result (input itself unless `output`).
 *
 * @example
 * const grad = new Float32Array(1 << 20).fill(ctx.rank);
 * await allreduce(ctx, grad);                 // grad[i] === 0 + 1 + ... + (size-1)
 */
export async function allreduce<T extends TypedArray>(g: Group, input: T, options: AllreduceOptions = {}): Promise<T> {
  const p = plan(g, input, options, `rank ${g.rank}: allreduce`);
  await runPlan(p);
  return p.out as T;
}

/** Blocking allreduce: busy-polls the calling thread (lowest latency, blocks the event loop). */
export function allreduceSync<T extends TypedArray>(g: Group, input: T, options: AllreduceOptions = {}): T {
  const p = plan(g, input, options, `rank ${g.rank}: allreduceSync`);
  runPlanSync(p);
  return p.out as T;
}

/**
 * allreduce of `data` in place with work of the caller's own around its messages (AroundHooks):
 * the messages are allreduce(g, data, options)'s, so a rank that calls allreduce meets it. The
 * hierarchical plans' leader reduces its host's arrays into each range just before it goes
 * out, and copies each finished range to its host's ranks, while other ranges are on the wire.
 * In place: `options.output` is not set (the steps' options never set it).
 */
export async function allreduceAround(g: Group, data: TypedArray, options: AllreduceOptions, around: AroundHooks): Promise<void> {
  const p = plan(g, data, options, `rank ${g.rank}: allreduce`, around);
  // The board and shared plans (one host) read every rank's array at once: no ranges.
  const all = p.board !== undefined || p.shared !== undefined;
  if (all) around.before(0, data.length);
  await runPlan(p);
  if (all) around.after(0, data.length);
}

/** Blocking form of allreduceAround. */
export function allreduceAroundSync(g: Group, data: TypedArray, options: AllreduceOptions, around: AroundHooks): void {
  const p = plan(g, data, options, `rank ${g.rank}: allreduceSync`, around);
  const all = p.board !== undefined || p.shared !== undefined;
  if (all) around.before(0, data.length);
  runPlanSync(p);
  if (all) around.after(0, data.length);
}

async function runPlan(p: Plan): Promise<void> {
  if (CHECK_CALLS && (p.board || p.shared)) await driveAsync(p.c, agreement(p.c));
  if (p.board) {
    await p.board.board.exchangeAsync(p.board.inB, p.c.sig, p.c, p.board.fold);
    p.c.device.markFinished(p.c.slot, p.c.call);
  } else if (p.shared && (await sharedAllreduce(p.shared))) {
    p.c.device.markFinished(p.c.slot, p.c.call);
  } else {
    await runAsync(p.c, p.alg as Algorithm);
  }
}

function runPlanSync(p: Plan): void {
  if (CHECK_CALLS && (p.board || p.shared)) driveSync(p.c, agreement(p.c));
  if (p.board) {
    p.board.board.exchangeSync(p.board.inB, p.c.sig, p.c, p.board.fold);
    p.c.device.markFinished(p.c.slot, p.c.call);
  } else if (p.shared && sharedAllreduceSync(p.shared)) {
    p.c.device.markFinished(p.c.slot, p.c.call);
  } else {
    runSync(p.c, p.alg as Algorithm);
  }
}
