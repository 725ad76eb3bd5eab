/** Which dtype a typed array holds. */
import { WeftError } from '../errors.js';
import type { DType } from './codes.js';

/** The typed arrays the reductions accept (Uint8ClampedArray is left out on purpose). */
export type TypedArray =
  | Int8Array
  | Uint8Array
  | Int16Array
  | Uint16Array
  | Int32Array
  | Uint32Array
  | Float32Array
  | Float64Array
  | BigInt64Array
  | BigUint64Array;

// By Symbol.toStringTag rather than instanceof, so arrays from another realm (vm, workers'
// transferred views) are recognised too.
const BY_TAG = new Map<string, DType>([
  ['Int8Array', 'int8'],
  ['Uint8Array', 'uint8'],
  ['Int16Array', 'int16'],
  ['Uint16Array', 'uint16'],
  ['Int32Array', 'int32'],
  ['Uint32Array', 'uint32'],
  ['Float32Array', 'float32'],
  ['Float64Array', 'float64'],
  ['BigInt64Array', 'int64'],
  ['BigUint64Array', 'uint64'],
]);

function tagOf(view: unknown): string {
  return ArrayBuffer.isView(view) ? String((view as unknown as Record<symbol, unknown>)[Symbol.toStringTag] ?? 'DataView') : typeof view;
}

/**
 * The dtype of a typed array. A Uint16Array is uint16 unless `hint` says it holds float16 or
 * bfloat16 bits (JS has no array type for either). Uint8ClampedArray is rejected: its stores
 * clamp, while the kernels wrap like C, so neither reading would be what its owner meant; view
 * the same buffer as a Uint8Array to reduce bytes modulo 256. A DataView has no element type.
 *
 * @example
 * dtypeOf(new Float32Array(4));                // 'float32'
 * dtypeOf(new BigInt64Array(4));               // 'int64'
 * dtypeOf(new Uint16Array(4), 'bfloat16');     // 'bfloat16'
 */
export function dtypeOf(view: TypedArray, hint?: 'float16' | 'bfloat16'): DType {
  const tag = tagOf(view);
  const dtype = BY_TAG.get(tag);
  if (dtype === undefined) {
    if (tag === 'Uint8ClampedArray') {
      throw new WeftError('EINVAL', 'dtypeOf: a Uint8ClampedArray is not reducible (its stores clamp, the kernels wrap); view the same buffer as a Uint8Array');
    }
    throw new WeftError('EINVAL', `dtypeOf: expected a typed array, got ${tag}${tag === 'DataView' ? '; a DataView has no element type, so name the dtype explicitly' : ''}`);
  }
  if (hint === undefined) return dtype;
  if (hint !== 'float16' && hint !== 'bfloat16') throw new WeftError('EINVAL', `dtypeOf: hint must be 'float16' or 'bfloat16', got '${String(hint)}'`);
  if (dtype !== 'uint16') throw new WeftError('EINVAL', `dtypeOf: ${hint} data lives in a Uint16Array, got a ${tag}`);
  return hint;
}
