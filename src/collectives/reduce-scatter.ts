/** reduceScatter: reduce across ranks, rank r keeps block r of the result (ring). */
import type { ReduceOp } from '../reduce/index.js';
import { bytesOf, checkArray, checkCounts, checkLength, offsets, reduction, checkInOut, type TypedArray } from './checks.js';
import { copy, beginCall, runAsync, runSync, type Algorithm, type CollectiveOptions, type CollectiveCall, type Group, type Reduction, refused } from './call.js';
import { ringReduceScatter } from './ring.js';

export interface ReduceScatterOptions extends CollectiveOptions {
  op?: ReduceOp;
  /** Elements of the result each rank keeps (default: input split evenly, output.length each). */
  counts?: readonly number[];
  float?: 'float16' | 'bfloat16';
}

function* run(c: CollectiveCall, inB: Uint8Array, outB: Uint8Array, off: number[], red: Reduction): Algorithm {
  if (c.size === 1) return copy(outB, inB.subarray(0, outB.byteLength));
  const work = c.scratch(inB.byteLength);
  yield* ringReduceScatter(c, inB, work, off, red, outB);
}

function plan(g: Group, input: TypedArray, output: TypedArray, options: ReduceScatterOptions, where: string) {
  try {
    checkArray(where, 'input', input);
    checkArray(where, 'output', output);
    checkInOut(where, input, output);
    const counts = options.counts ? checkCounts(where, options.counts, g.size) : new Array<number>(g.size).fill(output.length);
    checkLength(where, 'output', output, counts[g.rank], options.counts ? `counts[${g.rank}]` : 'each rank keeps output.length elements');
    checkLength(where, 'input', input, counts.reduce((a, b) => a + b, 0), options.counts ? 'the sum of counts' : `world size x output length = ${g.size} x ${output.length}`);
    const red = reduction(where, input, options.op, options.float);
    const c = beginCall(g, 'reduce_scatter', options, red.dtype, red.op, undefined, input.byteLength);
    const off = offsets(counts).map((e) => e * red.elementBytes);
    return { c, alg: run(c, bytesOf(input), bytesOf(output), off, red) };
  } catch (err) {
    throw refused(g, err);
  }
}

/**
 * Reduces `input` (size x output.length elements) across ranks; rank r gets block r in `output`.
 *
 * @example
 * const mine = new Float32Array(256);
 * await reduceScatter(ctx, new Float32Array(256 * ctx.size).fill(1), mine);  // mine[i] === size
 */
export async function reduceScatter<T extends TypedArray>(g: Group, input: T, output: T, options: ReduceScatterOptions = {}): Promise<T> {
  const p = plan(g, input, output, options, `rank ${g.rank}: reduceScatter`);
  await runAsync(p.c, p.alg);
  return output;
}

export function reduceScatterSync<T extends TypedArray>(g: Group, input: T, output: T, options: ReduceScatterOptions = {}): T {
  const p = plan(g, input, output, options, `rank ${g.rank}: reduceScatterSync`);
  runSync(p.c, p.alg);
  return output;
}
