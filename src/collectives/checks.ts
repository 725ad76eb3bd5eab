/** Argument checks shared by the collectives: every bad input is an EINVAL before anything is sent. */
import { WeftError } from '../errors.js';
import { describeValue } from '../util/describe.js';
import { checkReducible, dtypeOf, elementSize, type DType, type ReduceOp } from '../reduce/index.js';
import type { Reduction } from './call.js';

import type { TypedArray } from '../reduce/index.js';
export type { TypedArray };

export function isTypedArray(v: unknown): v is TypedArray {
  return ArrayBuffer.isView(v) && !(v instanceof DataView);
}

export { bytesOf } from '../transport/bytes.js';

export function checkArray(where: string, name: string, v: unknown): asserts v is TypedArray {
  if (!isTypedArray(v)) throw new WeftError('EINVAL', `${where}: ${name} must be a typed array (Float32Array, Int32Array, BigInt64Array, ...), got ${describeValue(v)}`);
  if (v.byteLength === 0 && isDetached(v.buffer)) {
    throw new WeftError('EINVAL', `${where}: ${name}'s ArrayBuffer is detached (transferred to a worker or by structuredClone); pass an array whose memory this thread still owns`);
  }
}

/** A view of a detached buffer reads as empty; only constructing a view on it tells (rare path: empty views only). */
function isDetached(buffer: ArrayBufferLike): boolean {
  if (buffer.byteLength !== 0) return false;
  try {
    new Uint8Array(buffer);
    return false;
  } catch {
    return true;
  }
}

export function dtypeName(where: string, v: TypedArray, hint?: 'float16' | 'bfloat16'): DType {
  try {
    return dtypeOf(v, hint);
  } catch (err) {
    throw new WeftError('EINVAL', `${where}: ${(err as Error).message}`);
  }
}

/**
 * An input and an output array of one call: the same element type, and either the same view
 * (in place, where the collective allows it) or no shared bytes at all. A partial overlap
 * would be overwritten while it is still being read.
 */
export function checkInOut(where: string, a: TypedArray, b: TypedArray, an = 'input', bn = 'output'): void {
  if (a.constructor !== b.constructor) throw new WeftError('EINVAL', `${where}: ${an} is a ${a.constructor.name} but ${bn} is a ${b.constructor.name}; use the same element type`);
  if (a.buffer !== b.buffer) return;
  const same = a.byteOffset === b.byteOffset && a.byteLength === b.byteLength;
  const apart = a.byteOffset + a.byteLength <= b.byteOffset || b.byteOffset + b.byteLength <= a.byteOffset;
  if (!same && !apart) {
    throw new WeftError('EINVAL', `${where}: ${an} (bytes ${a.byteOffset}..${a.byteOffset + a.byteLength}) and ${bn} (bytes ${b.byteOffset}..${b.byteOffset + b.byteLength}) partly overlap in one buffer; pass the same array (in place) or separate memory`);
  }
}

export function reduction(where: string, v: TypedArray, op: ReduceOp | undefined, hint?: 'float16' | 'bfloat16'): Reduction {
  const dtype = dtypeName(where, v, hint);
  const o = op ?? 'sum';
  try {
    checkReducible(o, dtype, where);
  } catch (err) {
    throw err instanceof WeftError ? err : new WeftError('EINVAL', `${where}: ${(err as Error).message}`);
  }
  return { op: o, dtype, elementBytes: elementSize(dtype) };
}

export function checkRoot(where: string, root: number | undefined, size: number): number {
  const r = root ?? 0;
  if (!Number.isInteger(r) || r < 0 || r >= size) throw new WeftError('EINVAL', `${where}: root ${r} is not a rank (world size ${size})`);
  return r;
}

export function checkLength(where: string, name: string, v: TypedArray, expected: number, why: string): void {
  if (v.length !== expected) throw new WeftError('EINVAL', `${where}: ${name} has ${v.length} elements, expected ${expected} (${why})`);
}

export function checkCounts(where: string, counts: readonly number[] | undefined, size: number, name = 'counts'): number[] {
  if (!Array.isArray(counts) || counts.length !== size || counts.some((c) => !Number.isInteger(c) || c < 0)) {
    throw new WeftError('EINVAL', `${where}: ${name} must be an array of ${size} non-negative integers (one per rank)`);
  }
  return counts as number[];
}

/** Element offsets of blocks with the given counts. */
export function offsets(counts: readonly number[]): number[] {
  const out = new Array<number>(counts.length + 1);
  out[0] = 0;
  for (let i = 0; i < counts.length; i++) out[i + 1] = out[i] + counts[i];
  return out;
}

/** Splits `count` elements into `n` near-equal blocks. */
export function evenCounts(count: number, n: number): number[] {
  const base = Math.floor(count / n);
  const rem = count % n;
  return Array.from({ length: n }, (_, i) => base + (i < rem ? 1 : 0));
}
