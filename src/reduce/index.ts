/**
 * Reductions: the arithmetic layer between the native core and the collectives.
 *
 * @example
 * import { reduceInto, dtypeOf } from 'weftjs';
 * const a = new Float64Array([1, 2]), b = new Float64Array([3, 4]);
 * reduceInto('max', dtypeOf(a), a.length, a, a, b); // a = [3, 4]
 */
export {
  REDUCE_OPS,
  REDUCE_DTYPES,
  MAX_SOURCES,
  opCode,
  dtypeCode,
  elementSize,
  isFloatDType,
  isBitwiseOp,
  type ReduceOp,
  type DType,
} from './codes.js';
export { dtypeOf, type TypedArray } from './dtype.js';
export { checkReducible, reduceInto, reduceMany, reduceIsa, supportedReduceIsas, type ReduceIsa } from './kernels.js';
