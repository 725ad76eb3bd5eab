/**
 * Scalar JS references for the reduction kernels, and the dtype x op matrix that holds the
 * native results to them. Shared by test/reduce/kernels.test.ts (in process) and
 * reduce-child.ts (the same matrix under a forced WEFT_REDUCE_ISA).
 *
 * The references are written from the definitions, not from the C++: BigInt with asIntN/asUintN
 * for 64-bit wrapping, typed-array stores for narrower wrapping, Math.fround for float32, and a
 * numeric (not bit-twiddling) rounding to float16/bfloat16.
 */
import { REDUCE_DTYPES, REDUCE_OPS, elementSize, isBitwiseOp, isFloatDType, reduceInto, reduceMany, type DType, type ReduceOp, type TypedArray } from '../../src/reduce/index.js';

type Elem = number | bigint;
type Storage = new (buffer: ArrayBufferLike, byteOffset?: number, length?: number) => TypedArray;

export const STORAGE: Record<DType, Storage> = {
  float32: Float32Array,
  float64: Float64Array,
  int8: Int8Array,
  uint8: Uint8Array,
  int16: Int16Array,
  uint16: Uint16Array,
  int32: Int32Array,
  uint32: Uint32Array,
  int64: BigInt64Array,
  uint64: BigUint64Array,
  float16: Uint16Array,
  bfloat16: Uint16Array,
};

/** A binary16-like format: `mant` fraction bits, `expBits` exponent bits. */
interface HalfFormat {
  mant: number;
  expBits: number;
}
export const FLOAT16: HalfFormat = { mant: 10, expBits: 5 };
export const BFLOAT16: HalfFormat = { mant: 7, expBits: 8 };

export function decodeHalf(bits: number, f: HalfFormat): number {
  const expAll = (1 << f.expBits) - 1;
  const bias = (expAll >> 1);
  const field = (bits >> f.mant) & expAll;
  const frac = bits & ((1 << f.mant) - 1);
  const sign = bits & (1 << (f.mant + f.expBits)) ? -1 : 1;
  if (field === expAll) return frac ? NaN : sign * Infinity;
  if (field === 0) return sign * frac * 2 ** (1 - bias - f.mant);
  return sign * (2 ** f.mant + frac) * 2 ** (field - bias - f.mant);
}

function roundHalfEven(v: number): number {
  const lo = Math.floor(v);
  const frac = v - lo;
  if (frac > 0.5) return lo + 1;
  if (frac < 0.5) return lo;
  return lo % 2 === 0 ? lo : lo + 1;
}

/** Rounds a number to the nearest representable value of the format (ties to even). */
export function encodeHalf(x: number, f: HalfFormat): number {
  const expAll = (1 << f.expBits) - 1;
  const bias = expAll >> 1;
  if (Number.isNaN(x)) return (expAll << f.mant) | (1 << (f.mant - 1));
  const sign = x < 0 || Object.is(x, -0) ? 1 << (f.mant + f.expBits) : 0;
  const a = Math.abs(x);
  if (a === Infinity) return sign | (expAll << f.mant);
  const emin = 1 - bias;
  let e = emin;
  if (a >= 2 ** emin) {
    e = Math.floor(Math.log2(a));
    while (2 ** e > a) e--;
    while (2 ** (e + 1) <= a) e++;
  }
  let n = roundHalfEven(a / 2 ** (e - f.mant));
  if (n === 2 ** (f.mant + 1)) {
    n /= 2;
    e++;
  }
  if (e > bias) return sign | (expAll << f.mant);
  if (n < 2 ** f.mant) return sign | n; // subnormal; rounding up to 2^mant lands in the normal branch
  return sign | ((e + bias) << f.mant) | (n - 2 ** f.mant);
}

function halfFormat(dtype: DType): HalfFormat | undefined {
  return dtype === 'float16' ? FLOAT16 : dtype === 'bfloat16' ? BFLOAT16 : undefined;
}

/** Reference of one element: numbers for <= 32-bit and floats, bigint for 64-bit, bits for halves. */
export function referenceOf(op: ReduceOp, dtype: DType): (x: Elem, y: Elem) => Elem {
  if (dtype === 'int64' || dtype === 'uint64') {
    const wrap = dtype === 'int64' ? (v: bigint) => BigInt.asIntN(64, v) : (v: bigint) => BigInt.asUintN(64, v);
    const ops: Record<ReduceOp, (x: bigint, y: bigint) => bigint> = {
      sum: (x, y) => wrap(x + y),
      prod: (x, y) => wrap(x * y),
      min: (x, y) => (x < y ? x : y),
      max: (x, y) => (x > y ? x : y),
      band: (x, y) => wrap(x & y),
      bor: (x, y) => wrap(x | y),
      bxor: (x, y) => wrap(x ^ y),
    };
    return ops[op] as (x: Elem, y: Elem) => Elem;
  }
  const float: Record<'sum' | 'prod' | 'min' | 'max', (x: number, y: number) => number> = {
    sum: (x, y) => x + y,
    prod: (x, y) => x * y,
    min: Math.min,
    max: Math.max,
  };
  const fmt = halfFormat(dtype);
  if (fmt) {
    // Computed in float32 and rounded once more to the half format, as documented.
    const f = float[op as 'sum'];
    return ((x: number, y: number) => encodeHalf(Math.fround(f(decodeHalf(x, fmt), decodeHalf(y, fmt))), fmt)) as (x: Elem, y: Elem) => Elem;
  }
  if (dtype === 'float32') {
    const f = float[op as 'sum'];
    return ((x: number, y: number) => Math.fround(f(x, y))) as (x: Elem, y: Elem) => Elem;
  }
  if (dtype === 'float64') return float[op as 'sum'] as (x: Elem, y: Elem) => Elem;
  // 8/16/32-bit integers: exact in doubles except 32-bit products (Math.imul); the store into
  // the typed array then wraps modulo 2^bits.
  const ints: Record<ReduceOp, (x: number, y: number) => number> = {
    sum: (x, y) => x + y,
    prod: dtype === 'int32' || dtype === 'uint32' ? Math.imul : (x, y) => x * y,
    min: Math.min,
    max: Math.max,
    band: (x, y) => x & y,
    bor: (x, y) => x | y,
    bxor: (x, y) => x ^ y,
  };
  return ints[op] as (x: Elem, y: Elem) => Elem;
}

/** Deterministic random numbers (mulberry32), so a failure reproduces. */
export function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const F32_SPECIALS = [NaN, -0, 0, Infinity, -Infinity, 1e-45, -1e-45, 3.4028234663852886e38, -3.4028234663852886e38, 1.1754943508222875e-38];
const F64_SPECIALS = [NaN, -0, 0, Infinity, -Infinity, 5e-324, -5e-324, Number.MAX_VALUE, -Number.MAX_VALUE, 2.2250738585072014e-308];
const HALF_SPECIALS = [0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe00, 0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x3c00, 0xbc00, 0x7f80, 0xff80, 0x7fc0, 0x0080, 0x007f];

/**
 * Test data: random bit patterns (every integer value, every half including NaN payloads and
 * subnormals), floats over a wide range of magnitudes, and a share of specials and of small
 * integers so that min/max see ties, -0 against +0, NaN and infinities.
 */
export function randomData(dtype: DType, n: number, rand: () => number): TypedArray {
  const Ctor = STORAGE[dtype];
  const size = elementSize(dtype);
  const bytes = new Uint8Array(n * size);
  for (let i = 0; i < bytes.length; i++) bytes[i] = (rand() * 256) | 0;
  const out = new Ctor(bytes.buffer, 0, n);
  for (let i = 0; i < n; i++) {
    const r = rand();
    const pick = <T>(xs: readonly T[]) => xs[(rand() * xs.length) | 0];
    if (dtype === 'float32' || dtype === 'float64') {
      const specials = dtype === 'float32' ? F32_SPECIALS : F64_SPECIALS;
      const maxExp = dtype === 'float32' ? 127 : 1023;
      if (r < 0.15) out[i] = pick(specials);
      else if (r < 0.3) out[i] = Math.round(rand() * 6) - 3;
      else out[i] = (rand() * 2 - 1) * 2 ** Math.round((rand() * 2 - 1) * maxExp);
    } else if (dtype === 'float16' || dtype === 'bfloat16') {
      if (r < 0.15) out[i] = pick(HALF_SPECIALS);
      else if (r < 0.3) out[i] = encodeHalf(Math.round(rand() * 6) - 3, halfFormat(dtype)!);
    } else if (r < 0.2) {
      const v = Math.round(rand() * 4) - 2;
      out[i] = (dtype === 'int64' || dtype === 'uint64' ? BigInt(v) : v) as never;
    }
  }
  return out;
}

function same(dtype: DType, got: Elem, want: Elem): boolean {
  if (got === want || Object.is(got, want)) return true;
  const fmt = halfFormat(dtype);
  if (fmt) return Number.isNaN(decodeHalf(got as number, fmt)) && Number.isNaN(decodeHalf(want as number, fmt));
  return isFloatDType(dtype) && Number.isNaN(got) && Number.isNaN(want);
}

function show(dtype: DType, v: Elem): string {
  if (halfFormat(dtype)) return `0x${(v as number).toString(16).padStart(4, '0')}`;
  return Object.is(v, -0) ? '-0' : String(v);
}

/** Copies `data` into `sab` at byteOffset `at` and returns the byte view there. */
function place(sab: SharedArrayBuffer, at: number, data: TypedArray): Uint8Array {
  const view = new Uint8Array(sab, at, data.byteLength);
  view.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
  return view;
}

function read(dtype: DType, view: ArrayBufferView, n: number): TypedArray {
  const copy = new Uint8Array(view.buffer, view.byteOffset, n * elementSize(dtype)).slice();
  return new STORAGE[dtype](copy.buffer, 0, n);
}

function compare(what: string, dtype: DType, got: TypedArray, want: TypedArray, inputs: TypedArray[]): string | undefined {
  for (let i = 0; i < want.length; i++) {
    if (!same(dtype, got[i], want[i])) {
      return `${what} [${i}]: inputs ${inputs.map((x) => show(dtype, x[i])).join(', ')}: got ${show(dtype, got[i])}, want ${show(dtype, want[i])}`;
    }
  }
  return undefined;
}

function expected(op: ReduceOp, dtype: DType, inputs: TypedArray[], n: number): TypedArray {
  const f = referenceOf(op, dtype);
  const out = new STORAGE[dtype](new ArrayBuffer(n * elementSize(dtype)), 0, n);
  for (let i = 0; i < n; i++) {
    let acc: Elem = inputs[0][i];
    for (let k = 1; k < inputs.length; k++) {
      out[i] = f(acc, inputs[k][i]) as never; // the store wraps (or rounds) to dtype at each step
      acc = out[i];
    }
    out[i] = acc as never;
  }
  return out;
}

/** Vector bodies, tails of every residue class and the scalar-sized cases. */
export const LENGTHS = [0, 1, 7, 31, 33, 1000, 4099];

/**
 * reduceInto for one op x dtype at every length: typed arrays as they are, byte views at odd
 * offsets of a SharedArrayBuffer, and dst aliasing a and b. Returns the first mismatch of each
 * case.
 */
export function checkBinary(op: ReduceOp, dtype: DType, seed = 1): string[] {
  const failures: string[] = [];
  const rand = rng(seed * 7919 + REDUCE_OPS.indexOf(op) * 131 + REDUCE_DTYPES.indexOf(dtype));
  const size = elementSize(dtype);
  for (const n of LENGTHS) {
    const a = randomData(dtype, n, rand);
    const b = randomData(dtype, n, rand);
    const want = expected(op, dtype, [a, b], n);
    const tag = `${dtype} ${op} n=${n}`;
    const note = (what: string, got: TypedArray) => {
      const f = compare(`${tag} ${what}`, dtype, got, want, [a, b]);
      if (f) failures.push(f);
    };
    // Plain typed arrays.
    const dst = new STORAGE[dtype](new ArrayBuffer(n * size), 0, n);
    reduceInto(op, dtype, n, dst, a, b);
    note('typed arrays', dst);
    // Byte views at odd offsets of one shared buffer.
    const sab = new SharedArrayBuffer(3 * n * size + 64);
    const va = place(sab, 1, a);
    const vb = place(sab, 3 + n * size, b);
    const vd = new Uint8Array(sab, 13 + 2 * n * size, n * size);
    reduceInto(op, dtype, n, vd, va, vb);
    note('unaligned byte views', read(dtype, vd, n));
    // In place: dst is a, then dst is b.
    reduceInto(op, dtype, n, va, va, vb);
    note('dst === a', read(dtype, va, n));
    const inPlace = b.slice();
    reduceInto(op, dtype, n, inPlace, a, inPlace);
    note('dst === b', inPlace);
  }
  return failures;
}

/**
 * reduceMany for one op x dtype with 1..9 sources at short lengths and at a length spanning
 * several 8 KiB blocks plus a tail, with dst separate, dst === srcs[0] and dst === srcs[1].
 */
export function checkMany(op: ReduceOp, dtype: DType, seed = 1): string[] {
  const failures: string[] = [];
  const rand = rng(seed * 104729 + REDUCE_OPS.indexOf(op) * 17 + REDUCE_DTYPES.indexOf(dtype));
  const size = elementSize(dtype);
  const long = Math.ceil((2.5 * 8192) / size) + 3;
  const cases: Array<[number, number]> = [];
  for (let k = 1; k <= 9; k++) for (const n of [0, 7, 33]) cases.push([k, n]);
  for (const k of [1, 2, 3, 9]) cases.push([k, long]);
  for (const [k, n] of cases) {
    const srcs = Array.from({ length: k }, () => randomData(dtype, n, rand));
    const want = expected(op, dtype, srcs, n);
    const tag = `${dtype} ${op} reduceMany k=${k} n=${n}`;
    const note = (what: string, got: TypedArray) => {
      const f = compare(`${tag} ${what}`, dtype, got, want, srcs);
      if (f) failures.push(f);
    };
    const dst = new STORAGE[dtype](new ArrayBuffer(n * size), 0, n);
    reduceMany(op, dtype, n, dst, srcs);
    note('separate dst', dst);
    const first = srcs.map((s) => s.slice());
    reduceMany(op, dtype, n, first[0], first);
    note('dst === srcs[0]', first[0]);
    if (k >= 2) {
      const second = srcs.map((s) => s.slice());
      reduceMany(op, dtype, n, second[1], second);
      note('dst === srcs[1]', second[1]);
    }
  }
  return failures;
}

/** Every defined op x dtype pair. */
export function definedPairs(): Array<[ReduceOp, DType]> {
  const out: Array<[ReduceOp, DType]> = [];
  for (const dtype of REDUCE_DTYPES) for (const op of REDUCE_OPS) if (!(isBitwiseOp(op) && isFloatDType(dtype))) out.push([op, dtype]);
  return out;
}
