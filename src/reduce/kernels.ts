/**
 * Elementwise reductions over typed-array memory, run by the native SIMD kernels: one native
 * call per reduction, nothing allocated. See docs/reduce.md for the NaN and overflow rules.
 */
import { native, type ReduceIsa } from '../native/binding.js';
import { WeftError } from '../errors.js';
import { MAX_SOURCES, REDUCE_DTYPES, REDUCE_OPS, dtypeCode, isBitwiseOp, isFloatDType, opCode, type DType, type ReduceOp } from './codes.js';

export type { ReduceIsa };

/**
 * Throws EINVAL naming `where` unless `op` is defined for `dtype` (bitwise ops need an
 * integer dtype). Collectives call it once when an operation is set up, so a bad pairing
 * fails before any data moves.
 *
 * @example
 * checkReducible('band', 'float32', 'rank 0 allreduce');
 * // WeftError EINVAL: rank 0 allreduce: op 'band' is not defined for float32; use an integer typed array or a different op
 */
export function checkReducible(op: ReduceOp, dtype: DType, where: string): void {
  if (opCode(op) === undefined) throw new WeftError('EINVAL', `${where}: unknown op '${String(op)}'; expected one of ${REDUCE_OPS.join(', ')}`);
  if (dtypeCode(dtype) === undefined) throw new WeftError('EINVAL', `${where}: unknown dtype '${String(dtype)}'; expected one of ${REDUCE_DTYPES.join(', ')}`);
  if (isBitwiseOp(op) && isFloatDType(dtype)) {
    throw new WeftError('EINVAL', `${where}: op '${op}' is not defined for ${dtype}; use an integer typed array or a different op`);
  }
}

// Called only for a pairing the fast check refused, so checkReducible always throws here.
function refuse(op: ReduceOp, dtype: DType, where: string): never {
  checkReducible(op, dtype, where);
  throw new WeftError('EINVAL', `${where}: op '${op}' is not defined for ${dtype}`);
}

// The addon throws TypeError/RangeError with a "reduce: " prefix; the library speaks WeftError.
function rethrow(where: string, err: unknown): never {
  const message = err instanceof Error ? err.message.replace(/^reduce(Many)?: /, '') : String(err);
  throw new WeftError('EINVAL', `${where}: ${message}`, { cause: err });
}

/**
 * dst[i] = a[i] op b[i] for i < count. Views may be any typed array or DataView (a Uint8Array
 * over a shared segment is typical) and are read from their byteOffset, at any alignment; each
 * must hold count elements of dtype. dst may be a or b itself, but must not partly overlap
 * either. Integer sum/prod wrap like C; float min/max return NaN if either input is NaN.
 *
 * @example
 * const acc = new Float32Array([1, 2, 3]);
 * reduceInto('sum', 'float32', 3, acc, acc, new Float32Array([10, 20, 30])); // acc = [11, 22, 33]
 */
export function reduceInto(op: ReduceOp, dtype: DType, count: number, dst: ArrayBufferView, a: ArrayBufferView, b: ArrayBufferView): void {
  const o = opCode(op);
  const d = dtypeCode(dtype);
  if (o === undefined || d === undefined || (isBitwiseOp(op) && isFloatDType(dtype))) refuse(op, dtype, 'reduceInto');
  try {
    native.reduce(o, d, count, dst, a, b);
  } catch (err) {
    rethrow('reduceInto', err);
  }
}

/**
 * dst = srcs[0] op srcs[1] op ... op srcs[n-1] (1 to 64 sources), left to right with each step
 * rounded to dtype, so it equals n-1 reduceInto calls, but in one blocked pass over memory:
 * the way to combine several peers' shared buffers. dst may be srcs[0] or srcs[1] itself;
 * any other overlap with dst is rejected. One source is a copy.
 *
 * @example
 * const peers = [new Int32Array([1, 2]), new Int32Array([3, 4]), new Int32Array([5, 6])];
 * const out = new Int32Array(2);
 * reduceMany('sum', 'int32', 2, out, peers); // out = [9, 12]
 */
export function reduceMany(op: ReduceOp, dtype: DType, count: number, dst: ArrayBufferView, srcs: readonly ArrayBufferView[]): void {
  const o = opCode(op);
  const d = dtypeCode(dtype);
  if (o === undefined || d === undefined || (isBitwiseOp(op) && isFloatDType(dtype))) refuse(op, dtype, 'reduceMany');
  if (!Array.isArray(srcs) || srcs.length < 1 || srcs.length > MAX_SOURCES) {
    const got = Array.isArray(srcs) ? `${srcs.length} views` : `a ${typeof srcs}`;
    throw new WeftError('EINVAL', `reduceMany: srcs must be an array of 1..${MAX_SOURCES} views, got ${got}`);
  }
  try {
    // Spread: the addon then gets every view in one argument read instead of a lookup each.
    native.reduceMany(o, d, count, dst, ...srcs);
  } catch (err) {
    rethrow('reduceMany', err);
  }
}

/**
 * The SIMD level the kernels run at: the best this CPU supports, or the lower one named by
 * WEFT_REDUCE_ISA (sse2, avx2, avx512) when the process started.
 *
 * @example
 * console.log(`reductions use ${reduceIsa()}`); // 'avx512' on a recent Xeon
 */
export function reduceIsa(): ReduceIsa {
  return native.reduceIsa();
}

/**
 * The levels this CPU can run, lowest first; each is a valid WEFT_REDUCE_ISA value.
 *
 * @example
 * supportedReduceIsas(); // ['sse2', 'avx2', 'avx512']
 */
export function supportedReduceIsas(): ReduceIsa[] {
  return native.reduceIsas();
}
