/** allgather(v): every rank's block, concatenated in rank order, on every rank (ring). */
import { bytesOf, checkArray, checkCounts, checkLength, dtypeName, offsets, checkInOut, type TypedArray } from './checks.js';
import { copy, beginCall, runAsync, runSync, type CollectiveOptions, type Group, refused, countsShape } from './call.js';
import { ringAllgather } from './ring.js';

function plan(g: Group, input: TypedArray, output: TypedArray, counts: readonly number[] | undefined, options: CollectiveOptions, name: 'allgather' | 'allgatherv', where: string) {
  try {
    checkArray(where, 'input', input);
    checkArray(where, 'output', output);
    checkInOut(where, input, output);
    const cnt = counts ? checkCounts(where, counts, g.size) : new Array<number>(g.size).fill(input.length);
    checkLength(where, 'input', input, cnt[g.rank], counts ? `counts[${g.rank}]` : 'every rank contributes its whole input');
    const total = cnt.reduce((a, b) => a + b, 0);
    checkLength(where, 'output', output, total, counts ? 'the sum of counts' : `world size x input length = ${g.size} x ${input.length}`);
    const c = beginCall(g, name, options, dtypeName(where, input), undefined, undefined, counts ? countsShape(counts) : input.byteLength);
    const esize = input.BYTES_PER_ELEMENT;
    const off = offsets(cnt).map((e) => e * esize);
    const outB = bytesOf(output);
    copy(outB.subarray(off[g.rank], off[g.rank + 1]), bytesOf(input));
    return { c, alg: ringAllgather(c, outB, off) };
  } catch (err) {
    throw refused(g, err);
  }
}

/**
 * Gathers every rank's `input` into `output` (size x input.length elements) on every rank.
 *
 * @example
 * const all = new Int32Array(ctx.size);
 * await allgather(ctx, Int32Array.of(ctx.rank), all);   // [0, 1, ..., size-1]
 */
export async function allgather<T extends TypedArray>(g: Group, input: T, output: T, options: CollectiveOptions = {}): Promise<T> {
  const p = plan(g, input, output, undefined, options, 'allgather', `rank ${g.rank}: allgather`);
  await runAsync(p.c, p.alg);
  return output;
}

export function allgatherSync<T extends TypedArray>(g: Group, input: T, output: T, options: CollectiveOptions = {}): T {
  const p = plan(g, input, output, undefined, options, 'allgather', `rank ${g.rank}: allgatherSync`);
  runSync(p.c, p.alg);
  return output;
}

/** allgather with per-rank element counts (`counts[r]` elements from rank r). */
export async function allgatherv<T extends TypedArray>(g: Group, input: T, output: T, counts: readonly number[], options: CollectiveOptions = {}): Promise<T> {
  const p = plan(g, input, output, counts, options, 'allgatherv', `rank ${g.rank}: allgatherv`);
  await runAsync(p.c, p.alg);
  return output;
}

export function allgathervSync<T extends TypedArray>(g: Group, input: T, output: T, counts: readonly number[], options: CollectiveOptions = {}): T {
  const p = plan(g, input, output, counts, options, 'allgatherv', `rank ${g.rank}: allgathervSync`);
  runSync(p.c, p.alg);
  return output;
}
