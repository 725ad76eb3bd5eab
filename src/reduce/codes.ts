/**
 * The one table of reduction ops and element types, numbered as native/reduce.h numbers them.
 * The addon reports its own copy at load and this module refuses to load when they differ, so
 * a stale build fails loudly instead of summing int32 as float32.
 */
import { native } from '../native/binding.js';

/** An elementwise reduction. Bitwise ops are defined for integer dtypes only. */
export type ReduceOp = 'sum' | 'prod' | 'min' | 'max' | 'band' | 'bor' | 'bxor';

/**
 * An element type. 64-bit integers live in BigInt64Array/BigUint64Array; float16 and
 * bfloat16 are raw bits in a Uint16Array.
 */
export type DType =
  | 'float32'
  | 'float64'
  | 'int8'
  | 'uint8'
  | 'int16'
  | 'uint16'
  | 'int32'
  | 'uint32'
  | 'int64'
  | 'uint64'
  | 'float16'
  | 'bfloat16';

interface DTypeInfo {
  code: number;
  size: number;
  float: boolean;
}

const OPS = new Map<ReduceOp, number>([
  ['sum', 0],
  ['prod', 1],
  ['min', 2],
  ['max', 3],
  ['band', 4],
  ['bor', 5],
  ['bxor', 6],
]);

const DTYPES = new Map<DType, DTypeInfo>([
  ['float32', { code: 0, size: 4, float: true }],
  ['float64', { code: 1, size: 8, float: true }],
  ['int8', { code: 2, size: 1, float: false }],
  ['uint8', { code: 3, size: 1, float: false }],
  ['int16', { code: 4, size: 2, float: false }],
  ['uint16', { code: 5, size: 2, float: false }],
  ['int32', { code: 6, size: 4, float: false }],
  ['uint32', { code: 7, size: 4, float: false }],
  ['int64', { code: 8, size: 8, float: false }],
  ['uint64', { code: 9, size: 8, float: false }],
  ['float16', { code: 10, size: 2, float: true }],
  ['bfloat16', { code: 11, size: 2, float: true }],
]);

/**
 * Every op, in code order.
 * @example
 * for (const op of REDUCE_OPS) console.log(op, opCode(op));
 */
export const REDUCE_OPS: readonly ReduceOp[] = Object.freeze([...OPS.keys()]);

/**
 * Every dtype, in code order.
 * @example
 * const floats = REDUCE_DTYPES.filter(isFloatDType); // float32, float64, float16, bfloat16
 */
export const REDUCE_DTYPES: readonly DType[] = Object.freeze([...DTYPES.keys()]);

/** Most sources one reduceMany call takes (the addon keeps their pointers in a fixed table). */
export const MAX_SOURCES = 64;

/**
 * The native code of an op, or undefined for a name that is not an op.
 * @example
 * opCode('max'); // 3
 */
export function opCode(op: ReduceOp): number | undefined {
  return OPS.get(op);
}

/**
 * The native code of a dtype, or undefined for a name that is not a dtype.
 * @example
 * dtypeCode('bfloat16'); // 11
 */
export function dtypeCode(dtype: DType): number | undefined {
  return DTYPES.get(dtype)?.code;
}

/**
 * Bytes per element.
 * @example
 * const bytes = count * elementSize('float64');
 */
export function elementSize(dtype: DType): number {
  const info = DTYPES.get(dtype);
  if (!info) throw new TypeError(`elementSize: unknown dtype '${String(dtype)}'`);
  return info.size;
}

/**
 * True for the floating-point dtypes (which have no bitwise ops and follow the NaN rules).
 * @example
 * isFloatDType('bfloat16'); // true
 */
export function isFloatDType(dtype: DType): boolean {
  return DTYPES.get(dtype)?.float ?? false;
}

/**
 * True for band, bor and bxor.
 * @example
 * isBitwiseOp('bxor'); // true
 */
export function isBitwiseOp(op: ReduceOp): boolean {
  return op === 'band' || op === 'bor' || op === 'bxor';
}

function checkNativeAgrees(): void {
  const t = native.reduceCodes();
  const same = (xs: readonly unknown[], ys: readonly unknown[]) => xs.length === ys.length && xs.every((x, i) => x === ys[i]);
  const ours = [...DTYPES.values()];
  const ok =
    same(t.ops, REDUCE_OPS) &&
    same(t.dtypes, REDUCE_DTYPES) &&
    same(t.elementSizes, ours.map((d) => d.size)) &&
    same(t.isFloat, ours.map((d) => d.float)) &&
    t.maxSources === MAX_SOURCES &&
    ours.every((d, i) => d.code === i) &&
    [...OPS.values()].every((c, i) => c === i);
  if (!ok) {
    throw new Error(
      `weft: the native reduction codes (${t.ops.join(',')} / ${t.dtypes.join(',')}) disagree with src/reduce/codes.ts; ` +
        'the addon is stale: rebuild it with `npx node-gyp rebuild`',
    );
  }
}

checkNativeAgrees();
