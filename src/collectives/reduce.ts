/** reduce: the reduction of every rank's array, at the root only (binomial tree). */
import type { ReduceOp } from '../reduce/index.js';
import { bytesOf, checkArray, checkLength, checkRoot, reduction, checkInOut, type TypedArray } from './checks.js';
import { copy, beginCall, runAsync, runSync, type Algorithm, type CollectiveCall, type Group, type Reduction, refused } from './call.js';
import type { RootOptions } from './broadcast.js';

export interface ReduceOptions extends RootOptions {
  op?: ReduceOp;
  /** Root only: where the result goes (default: the root's input, in place). */
  output?: TypedArray;
  float?: 'float16' | 'bfloat16';
}

function* binomialReduce(c: CollectiveCall, inB: Uint8Array, outB: Uint8Array, red: Reduction, root: number): Algorithm {
  const n = c.size;
  const vr = (c.rank - root + n) % n;
  // Non-roots accumulate in scratch: their input is left alone.
  const acc = vr === 0 ? outB : c.scratch(inB.byteLength);
  let have = inB;
  for (let mask = 1; mask < n; mask <<= 1) {
    if (vr & mask) {
      yield [c.send((vr - mask + root) % n, have)];
      return;
    }
    if (vr + mask < n) {
      yield [c.recvReduce((vr + mask + root) % n, acc, have, red)];
      have = acc;
    }
  }
  if (have !== outB) copy(outB, have);
}

function plan(g: Group, input: TypedArray, options: ReduceOptions, where: string) {
  try {
    checkArray(where, 'input', input);
    const root = checkRoot(where, options.root, g.size);
    const output = g.rank === root ? (options.output ?? input) : input;
    checkArray(where, 'output', output);
    checkInOut(where, input, output);
    checkLength(where, 'output', output, input.length, 'a reduce output has as many elements as its input');
    const red = reduction(where, input, options.op, options.float);
    const c = beginCall(g, 'reduce', options, red.dtype, red.op, root, input.byteLength);
    return { c, alg: binomialReduce(c, bytesOf(input), bytesOf(output), red, root), output };
  } catch (err) {
    throw refused(g, err);
  }
}

/**
 * Reduces `input` across ranks into the root's output (its input unless `output` is given).
 *
 * @example
 * const loss = Float64Array.of(localLoss);
 * await reduce(ctx, loss, { root: 0 });   // rank 0: the sum over ranks
 */
export async function reduce<T extends TypedArray>(g: Group, input: T, options: ReduceOptions = {}): Promise<T> {
  const p = plan(g, input, options, `rank ${g.rank}: reduce`);
  await runAsync(p.c, p.alg);
  return p.output as T;
}

export function reduceSync<T extends TypedArray>(g: Group, input: T, options: ReduceOptions = {}): T {
  const p = plan(g, input, options, `rank ${g.rank}: reduceSync`);
  runSync(p.c, p.alg);
  return p.output as T;
}
