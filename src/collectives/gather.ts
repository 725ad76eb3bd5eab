/** gather(v) and scatter: blocks between the root and every rank, exchanged directly. */
import { WeftError } from '../errors.js';
import { bytesOf, checkArray, checkCounts, checkLength, checkRoot, dtypeName, offsets, checkInOut, type TypedArray } from './checks.js';
import { copy, beginCall, runAsync, runSync, type Algorithm, type CollectiveCall, type Group, refused, countsShape } from './call.js';
import type { RootOptions } from './broadcast.js';
import type { TransportOp } from '../transport/ops.js';

function* gatherAlg(c: CollectiveCall, inB: Uint8Array, outB: Uint8Array | undefined, off: number[], root: number): Algorithm {
  if (c.rank !== root) {
    yield [c.send(root, inB)];
    return;
  }
  const o = outB as Uint8Array;
  const ops: TransportOp[] = [];
  for (let p = 0; p < c.size; p++) if (p !== root) ops.push(c.recv(p, o.subarray(off[p], off[p + 1])));
  copy(o.subarray(off[root], off[root + 1]), inB);
  if (ops.length) yield ops;
}

function* scatterAlg(c: CollectiveCall, inB: Uint8Array | undefined, outB: Uint8Array, off: number[], root: number): Algorithm {
  if (c.rank !== root) {
    yield [c.recv(root, outB)];
    return;
  }
  const i = inB as Uint8Array;
  const ops: TransportOp[] = [];
  for (let p = 0; p < c.size; p++) if (p !== root) ops.push(c.send(p, i.subarray(off[p], off[p + 1])));
  copy(outB, i.subarray(off[root], off[root + 1]));
  if (ops.length) yield ops;
}

function planGather(g: Group, input: TypedArray, output: TypedArray | undefined, counts: readonly number[] | undefined, options: RootOptions, name: 'gather' | 'gatherv', where: string) {
  try {
    checkArray(where, 'input', input);
    const root = checkRoot(where, options.root, g.size);
    const cnt = counts ? checkCounts(where, counts, g.size) : new Array<number>(g.size).fill(input.length);
    checkLength(where, 'input', input, cnt[g.rank], counts ? `counts[${g.rank}]` : 'every rank sends its whole input');
    if (g.rank === root) {
      if (output === undefined) throw new WeftError("EINVAL", `${where}: the root needs an output array`);
      checkArray(where, 'output', output);
      checkInOut(where, input, output);
      checkLength(where, 'output', output, cnt.reduce((a, b) => a + b, 0), counts ? 'the sum of counts' : `world size x input length = ${g.size} x ${input.length}`);
    }
    const c = beginCall(g, name, options, dtypeName(where, input), undefined, root, counts ? countsShape(counts) : input.byteLength);
    const off = offsets(cnt).map((e) => e * input.BYTES_PER_ELEMENT);
    return { c, alg: gatherAlg(c, bytesOf(input), output && g.rank === root ? bytesOf(output) : undefined, off, root) };
  } catch (err) {
    throw refused(g, err);
  }
}

/**
 * Collects every rank's `input` at the root, in rank order (`output` matters at the root only).
 *
 * @example
 * const all = ctx.rank === 0 ? new Float64Array(ctx.size) : undefined;
 * await gather(ctx, Float64Array.of(score), all, { root: 0 });
 */
export async function gather<T extends TypedArray>(g: Group, input: T, output: T | undefined, options: RootOptions = {}): Promise<T | undefined> {
  const p = planGather(g, input, output, undefined, options, 'gather', `rank ${g.rank}: gather`);
  await runAsync(p.c, p.alg);
  return output;
}

export function gatherSync<T extends TypedArray>(g: Group, input: T, output: T | undefined, options: RootOptions = {}): T | undefined {
  const p = planGather(g, input, output, undefined, options, 'gather', `rank ${g.rank}: gatherSync`);
  runSync(p.c, p.alg);
  return output;
}

/** gather with per-rank element counts. */
export async function gatherv<T extends TypedArray>(g: Group, input: T, output: T | undefined, counts: readonly number[], options: RootOptions = {}): Promise<T | undefined> {
  const p = planGather(g, input, output, counts, options, 'gatherv', `rank ${g.rank}: gatherv`);
  await runAsync(p.c, p.alg);
  return output;
}

export function gathervSync<T extends TypedArray>(g: Group, input: T, output: T | undefined, counts: readonly number[], options: RootOptions = {}): T | undefined {
  const p = planGather(g, input, output, counts, options, 'gatherv', `rank ${g.rank}: gathervSync`);
  runSync(p.c, p.alg);
  return output;
}

function planScatter(g: Group, input: TypedArray | undefined, output: TypedArray, options: RootOptions, where: string) {
  try {
    checkArray(where, 'output', output);
    const root = checkRoot(where, options.root, g.size);
    if (g.rank === root) {
      checkArray(where, 'input', input);
      checkInOut(where, input, output);
      checkLength(where, 'input', input, g.size * output.length, `world size x output length = ${g.size} x ${output.length}`);
    }
    const c = beginCall(g, 'scatter', options, dtypeName(where, output), undefined, root, output.byteLength);
    const esize = output.BYTES_PER_ELEMENT;
    const off = Array.from({ length: g.size + 1 }, (_, i) => i * output.length * esize);
    return { c, alg: scatterAlg(c, input && g.rank === root ? bytesOf(input) : undefined, bytesOf(output), off, root) };
  } catch (err) {
    throw refused(g, err);
  }
}

/**
 * The root's `input` (size x output.length elements) split in rank order: rank r gets block r.
 *
 * @example
 * const mine = new Int32Array(4);
 * await scatter(ctx, ctx.rank === 0 ? Int32Array.from({ length: 4 * ctx.size }, (_, i) => i) : undefined, mine);
 */
export async function scatter<T extends TypedArray>(g: Group, input: T | undefined, output: T, options: RootOptions = {}): Promise<T> {
  const p = planScatter(g, input, output, options, `rank ${g.rank}: scatter`);
  await runAsync(p.c, p.alg);
  return output;
}

export function scatterSync<T extends TypedArray>(g: Group, input: T | undefined, output: T, options: RootOptions = {}): T {
  const p = planScatter(g, input, output, options, `rank ${g.rank}: scatterSync`);
  runSync(p.c, p.alg);
  return output;
}
