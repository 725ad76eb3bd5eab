/** alltoall(v): block p of every rank's input goes to rank p, landing at the sender's place. */
import { WeftError } from '../errors.js';
import { bytesOf, checkArray, checkCounts, checkLength, dtypeName, offsets, checkInOut, type TypedArray } from './checks.js';
import { copy, beginCall, runAsync, runSync, type Algorithm, type CollectiveOptions, type CollectiveCall, type Group, refused } from './call.js';
import type { TransportOp } from '../transport/ops.js';

function* exchange(c: CollectiveCall, inB: Uint8Array, outB: Uint8Array, inOff: number[], outOff: number[]): Algorithm {
  const n = c.size;
  const ops: TransportOp[] = [];
  for (let k = 1; k < n; k++) {
    const p = (c.rank - k + n) % n;
    ops.push(c.recv(p, outB.subarray(outOff[p], outOff[p + 1])));
  }
  // Staggered destinations spread the load: at step k everyone sends to rank + k.
  for (let k = 1; k < n; k++) {
    const p = (c.rank + k) % n;
    ops.push(c.send(p, inB.subarray(inOff[p], inOff[p + 1])));
  }
  copy(outB.subarray(outOff[c.rank], outOff[c.rank + 1]), inB.subarray(inOff[c.rank], inOff[c.rank + 1]));
  if (ops.length) yield ops;
}

function plan(g: Group, input: TypedArray, output: TypedArray, sendCounts: readonly number[] | undefined, recvCounts: readonly number[] | undefined, options: CollectiveOptions, where: string) {
  try {
    checkArray(where, 'input', input);
    checkArray(where, 'output', output);
    checkInOut(where, input, output);
    if (input.buffer === output.buffer && input.byteOffset < output.byteOffset + output.byteLength && output.byteOffset < input.byteOffset + input.byteLength) {
      throw new WeftError("EINVAL", `${where}: input and output overlap; alltoall is out of place only`);
    }
    let sc: number[];
    let rc: number[];
    if (sendCounts || recvCounts) {
      sc = checkCounts(where, sendCounts, g.size, 'sendCounts');
      rc = checkCounts(where, recvCounts, g.size, 'recvCounts');
      checkLength(where, 'input', input, sc.reduce((a, b) => a + b, 0), 'the sum of sendCounts');
      checkLength(where, 'output', output, rc.reduce((a, b) => a + b, 0), 'the sum of recvCounts');
    } else {
      if (input.length % g.size !== 0) checkLength(where, 'input', input, Math.ceil(input.length / g.size) * g.size, 'a multiple of the world size');
      checkLength(where, 'output', output, input.length, 'as many elements as the input');
      sc = rc = new Array<number>(g.size).fill(input.length / g.size);
    }
    const c = beginCall(g, sendCounts ? 'alltoallv' : 'alltoall', options, dtypeName(where, input), undefined, undefined, sendCounts ? 0 : input.byteLength);
    const e = input.BYTES_PER_ELEMENT;
    return { c, alg: exchange(c, bytesOf(input), bytesOf(output), offsets(sc).map((x) => x * e), offsets(rc).map((x) => x * e)) };
  } catch (err) {
    throw refused(g, err);
  }
}

/**
 * Rank r's input block p (input.length / size elements) lands in rank p's output block r.
 *
 * @example
 * const out = new Int32Array(ctx.size);
 * await alltoall(ctx, Int32Array.from({ length: ctx.size }, (_, p) => ctx.rank * 100 + p), out);
 */
export async function alltoall<T extends TypedArray>(g: Group, input: T, output: T, options: CollectiveOptions = {}): Promise<T> {
  const p = plan(g, input, output, undefined, undefined, options, `rank ${g.rank}: alltoall`);
  await runAsync(p.c, p.alg);
  return output;
}

export function alltoallSync<T extends TypedArray>(g: Group, input: T, output: T, options: CollectiveOptions = {}): T {
  const p = plan(g, input, output, undefined, undefined, options, `rank ${g.rank}: alltoallSync`);
  runSync(p.c, p.alg);
  return output;
}

/** alltoall with counts: sendCounts[p] elements go to rank p, recvCounts[p] come from it (contiguous blocks). */
export async function alltoallv<T extends TypedArray>(g: Group, input: T, sendCounts: readonly number[], output: T, recvCounts: readonly number[], options: CollectiveOptions = {}): Promise<T> {
  const p = plan(g, input, output, sendCounts, recvCounts, options, `rank ${g.rank}: alltoallv`);
  await runAsync(p.c, p.alg);
  return output;
}

export function alltoallvSync<T extends TypedArray>(g: Group, input: T, sendCounts: readonly number[], output: T, recvCounts: readonly number[], options: CollectiveOptions = {}): T {
  const p = plan(g, input, output, sendCounts, recvCounts, options, `rank ${g.rank}: alltoallvSync`);
  runSync(p.c, p.alg);
  return output;
}
