/**
 * The reduction kernels: every dtype x op against a scalar JS reference (in this process at the
 * default ISA level, and in a child process per other level the CPU runs), the documented NaN,
 * signed-zero, rounding and wrapping rules spelled out, and bad arguments throwing.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { native } from '../../src/native/binding.js';
import { WeftError } from '../../src/errors.js';
import {
  REDUCE_DTYPES,
  REDUCE_OPS,
  checkReducible,
  dtypeCode,
  dtypeOf,
  elementSize,
  isBitwiseOp,
  isFloatDType,
  opCode,
  reduceInto,
  reduceIsa,
  reduceMany,
  supportedReduceIsas,
  type DType,
  type ReduceOp,
  type TypedArray,
} from '../../src/reduce/index.js';
import { BFLOAT16, FLOAT16, STORAGE, checkBinary, checkMany, decodeHalf, definedPairs, encodeHalf } from './reference.js';

const CHILD = path.join(path.dirname(fileURLToPath(import.meta.url)), 'workers', 'reduce-child.js');
const isa = reduceIsa();

/** a op b elementwise through reduceInto, on fresh typed arrays of dtype's storage. */
function apply(op: ReduceOp, dtype: DType, a: ArrayLike<number | bigint>, b: ArrayLike<number | bigint>): TypedArray {
  const make = (xs: ArrayLike<number | bigint>) => {
    const out = new STORAGE[dtype](new ArrayBuffer(xs.length * elementSize(dtype)), 0, xs.length);
    for (let i = 0; i < xs.length; i++) out[i] = xs[i] as never;
    return out;
  };
  const dst = make(a);
  reduceInto(op, dtype, a.length, dst, dst, make(b));
  return dst;
}

const isWeft = (code: string, re: RegExp) => (e: unknown) => e instanceof WeftError && e.code === code && re.test(e.message);

test('the op and dtype codes agree with the addon', () => {
  const t = native.reduceCodes();
  assert.equal(t.ops, [...REDUCE_OPS]);
  assert.equal(t.dtypes, [...REDUCE_DTYPES]);
  assert.equal(t.elementSizes, REDUCE_DTYPES.map(elementSize));
  assert.is(opCode('bxor'), 6);
  assert.is(dtypeCode('bfloat16'), 11);
  assert.is(opCode('nope' as ReduceOp), undefined);
  assert.ok(supportedReduceIsas().includes(isa), `${isa} in ${supportedReduceIsas().join(',')}`);
});

for (const [op, dtype] of definedPairs()) {
  test(`${dtype} ${op} matches the scalar reference (${isa}; lengths 0..4099, unaligned, in place)`, () => {
    assert.equal(checkBinary(op, dtype), []);
  });
}

for (const dtype of REDUCE_DTYPES) {
  test(`${dtype} reduceMany with 1..9 sources matches the left fold (${isa})`, () => {
    for (const op of REDUCE_OPS) if (!(isBitwiseOp(op) && isFloatDType(dtype))) assert.equal(checkMany(op, dtype), []);
  });
}

test('float min/max: NaN on either side wins, -0 < +0, infinities order', () => {
  const a = [NaN, 1, NaN, -0, 0, -Infinity, Infinity, 5, -0];
  const b = [1, NaN, NaN, 0, -0, 3, 3, 5, -0];
  for (const dtype of ['float32', 'float64'] as const) {
    const min = [...apply('min', dtype, a, b)];
    const max = [...apply('max', dtype, a, b)];
    assert.equal(min.slice(0, 3).map(Number.isNaN), [true, true, true]);
    assert.equal(max.slice(0, 3).map(Number.isNaN), [true, true, true]);
    assert.ok(Object.is(min[3], -0) && Object.is(min[4], -0), `${dtype} min(-0, +0) is -0 in both orders`);
    assert.ok(Object.is(max[3], 0) && Object.is(max[4], 0), `${dtype} max(-0, +0) is +0 in both orders`);
    assert.equal(min.slice(5), [-Infinity, 3, 5, -0]);
    assert.equal(max.slice(5), [3, Infinity, 5, -0]);
  }
  for (const [dtype, fmt] of [['float16', FLOAT16], ['bfloat16', BFLOAT16]] as const) {
    const enc = (xs: number[]) => xs.map((x) => encodeHalf(x, fmt));
    const min = [...apply('min', dtype, enc(a), enc(b))].map((h) => decodeHalf(h as number, fmt));
    const max = [...apply('max', dtype, enc(a), enc(b))].map((h) => decodeHalf(h as number, fmt));
    assert.equal(min.slice(0, 3).map(Number.isNaN), [true, true, true]);
    assert.ok(Object.is(min[3], -0) && Object.is(min[4], -0) && Object.is(max[3], 0) && Object.is(max[4], 0), `${dtype} signed zeros`);
    assert.equal(min.slice(5), [-Infinity, 3, 5, -0]);
    assert.equal(max.slice(5), [3, Infinity, 5, -0]);
  }
});

test('float sum/prod: NaN propagates, inf - inf is NaN, overflow goes to infinity', () => {
  const s = apply('sum', 'float32', [NaN, Infinity, 3e38, 1, 2 ** 24], [1, -Infinity, 3e38, -1, 1]);
  assert.ok(Number.isNaN(s[0]) && Number.isNaN(s[1]));
  assert.equal([...s.slice(2)], [Infinity, 0, 2 ** 24], 'float32 sum rounds to float32 (2^24 + 1 is a tie to even)');
  assert.equal([...apply('prod', 'float64', [1e300, -0, 3], [1e300, 5, 0.1])], [Infinity, -0, 0.30000000000000004]);
});

test('float16/bfloat16 round to nearest even, including subnormals and overflow', () => {
  const h = (xs: number[]) => xs.map((x) => encodeHalf(x, FLOAT16));
  // 1 + 2^-11 is a tie between 1 and 1 + 2^-10: even wins. 65504 + 16 ties to infinity.
  const got = apply('sum', 'float16', h([1, 1, 65504, 65504, 2 ** -24, 2 ** -14]), h([2 ** -11, 3 * 2 ** -11, 8, 16, 2 ** -24, -(2 ** -24)]));
  assert.equal([...got].map((x) => decodeHalf(x as number, FLOAT16)), [1, 1 + 2 ** -9, 65504, Infinity, 2 ** -23, 2 ** -14 - 2 ** -24]);
  const b = (xs: number[]) => xs.map((x) => encodeHalf(x, BFLOAT16));
  const gotB = apply('sum', 'bfloat16', b([1, 1, 3e38]), b([2 ** -8, 3 * 2 ** -8, 3e38]));
  assert.equal([...gotB].map((x) => decodeHalf(x as number, BFLOAT16)), [1, 1 + 2 ** -6, Infinity]);
});

test('integer sum/prod wrap like C, for every width', () => {
  assert.equal([...apply('sum', 'int8', [127, -128], [1, -1])], [-128, 127]);
  assert.equal([...apply('sum', 'uint8', [255], [1])], [0]);
  assert.equal([...apply('prod', 'int16', [300, -32768], [300, -1])], [(90000 << 16) >> 16, -32768]);
  assert.equal([...apply('sum', 'int32', [2147483647], [1])], [-2147483648]);
  assert.equal([...apply('prod', 'uint32', [0x10000, 0xffffffff], [0x10000, 0xffffffff])], [0, 1]);
  const i64max = 2n ** 63n - 1n;
  assert.equal([...apply('sum', 'int64', [i64max, -(2n ** 63n)], [1n, -1n])], [-(2n ** 63n), i64max]);
  assert.equal([...apply('prod', 'int64', [i64max, 3n ** 30n], [2n, 3n ** 30n])], [-2n, BigInt.asIntN(64, 3n ** 60n)]);
  assert.equal([...apply('sum', 'uint64', [2n ** 64n - 1n], [2n])], [1n]);
  assert.equal([...apply('bxor', 'uint64', [2n ** 64n - 1n], [2n ** 63n])], [2n ** 63n - 1n]);
  assert.equal([...apply('min', 'uint64', [2n ** 64n - 1n], [1n])], [1n], 'unsigned compare');
  assert.equal([...apply('max', 'int64', [-1n], [1n])], [1n], 'signed compare');
});

test('dtypeOf: typed arrays, half hints, refusals', () => {
  assert.is(dtypeOf(new Float32Array(1)), 'float32');
  assert.is(dtypeOf(new BigUint64Array(1)), 'uint64');
  assert.is(dtypeOf(new Uint16Array(1)), 'uint16');
  assert.is(dtypeOf(new Uint16Array(1), 'float16'), 'float16');
  assert.is(dtypeOf(new Uint16Array(1), 'bfloat16'), 'bfloat16');
  assert.throws(() => dtypeOf(new Uint8ClampedArray(1) as unknown as Uint8Array), isWeft('EINVAL', /Uint8ClampedArray.*Uint8Array/));
  assert.throws(() => dtypeOf(new DataView(new ArrayBuffer(4)) as unknown as Uint8Array), isWeft('EINVAL', /DataView has no element type/));
  assert.throws(() => dtypeOf(new Float32Array(1), 'float16'), isWeft('EINVAL', /float16 data lives in a Uint16Array, got a Float32Array/));
  assert.throws(() => dtypeOf([1, 2] as unknown as Uint8Array), isWeft('EINVAL', /expected a typed array/));
});

test('checkReducible and the wrappers reject what is not defined', () => {
  assert.throws(
    () => checkReducible('band', 'float32', 'rank 0 allreduce'),
    isWeft('EINVAL', /^rank 0 allreduce: op 'band' is not defined for float32; use an integer typed array or a different op$/),
  );
  checkReducible('bxor', 'uint64', 'x');
  const f = new Float32Array(4);
  assert.throws(() => reduceInto('bor', 'bfloat16', 4, f, f, f), isWeft('EINVAL', /reduceInto: op 'bor' is not defined for bfloat16/));
  assert.throws(() => reduceInto('avg' as ReduceOp, 'float32', 4, f, f, f), isWeft('EINVAL', /unknown op 'avg'/));
  assert.throws(() => reduceInto('sum', 'complex64' as DType, 4, f, f, f), isWeft('EINVAL', /unknown dtype 'complex64'/));
  assert.throws(() => reduceMany('sum', 'float32', 4, f, []), isWeft('EINVAL', /reduceMany: srcs must be an array of 1..64 views, got 0 views/));
});

test('bad views throw with a clear message, never crash', () => {
  const f = new Float32Array(8);
  const short = new Float32Array(7);
  assert.throws(() => reduceInto('sum', 'float32', 8, short, f, f), isWeft('EINVAL', /reduceInto: dst holds 28 bytes but 8 float32 need 32/));
  assert.throws(() => reduceInto('sum', 'float64', 8, f, f, f), isWeft('EINVAL', /dst holds 32 bytes but 8 float64 need 64/));
  assert.throws(() => reduceInto('sum', 'float32', 8, f, f, new Uint8Array(31)), isWeft('EINVAL', /b holds 31 bytes/));
  assert.throws(() => reduceInto('sum', 'float32', 2, f, f, {} as Float32Array), isWeft('EINVAL', /b must be a TypedArray or DataView/));
  assert.throws(() => reduceInto('sum', 'float32', 2, f, null as unknown as Float32Array, f), isWeft('EINVAL', /a must be a TypedArray/));
  assert.throws(() => reduceInto('sum', 'float32', -1, f, f, f), isWeft('EINVAL', /count must be a non-negative integer, got -1/));
  assert.throws(() => reduceInto('sum', 'float32', 1.5, f, f, f), isWeft('EINVAL', /count must be a non-negative integer, got 1.5/));
  assert.throws(() => reduceInto('sum', 'float32', NaN, f, f, f), isWeft('EINVAL', /count must be/));
  assert.throws(() => reduceInto('sum', 'float32', '2' as unknown as number, f, f, f), isWeft('EINVAL', /must be numbers/));
  // A detached buffer reads as empty.
  const buf = new ArrayBuffer(32);
  const gone = new Float32Array(buf);
  structuredClone(buf, { transfer: [buf] });
  assert.throws(() => reduceInto('sum', 'float32', 4, f, gone, f), isWeft('EINVAL', /a holds 0 bytes but 4 float32 need 16 \(is its buffer detached\?\)/));
  reduceInto('sum', 'float32', 0, f, gone, f); // nothing to do is fine
  // A DataView works as a byte view; a partial overlap of dst is refused.
  const bytes = new Uint8Array(64).fill(3);
  const view = new DataView(new ArrayBuffer(9), 1, 8);
  reduceInto('sum', 'uint8', 8, view, bytes, bytes);
  assert.is(view.getUint8(7), 6);
  assert.throws(() => reduceInto('sum', 'float32', 4, bytes.subarray(4), bytes, bytes.subarray(32)), isWeft('EINVAL', /dst partly overlaps a or b/));
});

test('reduceMany: argument and aliasing checks', () => {
  const k = Array.from({ length: 4 }, () => new Int32Array(16).fill(1));
  const out = new Int32Array(16);
  reduceMany('sum', 'int32', 16, out, k);
  assert.is(out[15], 4);
  assert.throws(() => reduceMany('sum', 'int32', 16, k[2], k), isWeft('EINVAL', /dst overlaps srcs\[2\]; it may only be the very same memory as srcs\[0\] or srcs\[1\]/));
  assert.throws(() => reduceMany('sum', 'int32', 16, out, [k[0], k[1].subarray(1)]), isWeft('EINVAL', /srcs\[1\] holds 60 bytes but 16 int32 need 64/));
  assert.throws(() => reduceMany('sum', 'int32', 16, out, [k[0], 5 as unknown as Int32Array]), isWeft('EINVAL', /srcs\[1\] must be a TypedArray/));
  assert.throws(() => reduceMany('sum', 'int32', 16, out, k[0] as unknown as Int32Array[]), isWeft('EINVAL', /srcs must be an array of 1..64 views, got a object/));
  assert.throws(() => reduceMany('sum', 'int32', 16, out, Array(65).fill(k[0])), isWeft('EINVAL', /1..64 views, got 65 views/));
  reduceMany('max', 'int32', 16, out, Array(64).fill(k[0]));
  assert.is(out[0], 1);
});

test('the raw native entry points validate codes and arity', () => {
  const f = new Float32Array(4);
  const err = (kind: ErrorConstructor, re: RegExp) => (e: unknown) => e instanceof kind && re.test((e as Error).message);
  assert.throws(() => native.reduce(7, 0, 4, f, f, f), err(RangeError, /unknown op code 7/));
  assert.throws(() => native.reduce(-1, 0, 4, f, f, f), err(RangeError, /unknown op code -1/));
  assert.throws(() => native.reduce(0.5, 0, 4, f, f, f), err(RangeError, /unknown op code 0.5/));
  assert.throws(() => native.reduce(0, 12, 4, f, f, f), err(RangeError, /unknown dtype code 12/));
  assert.throws(() => native.reduce(4, 0, 4, f, f, f), err(TypeError, /op 'band' is not defined for float32/));
  assert.throws(() => (native.reduce as unknown as (...a: unknown[]) => void)(0, 0, 4, f), err(TypeError, /expected 6 arguments/));
  assert.throws(() => (native.reduceMany as unknown as (...a: unknown[]) => void)(0, 0, 4, f), err(TypeError, /expected 5 arguments/));
  // Sources as one array or spread; not both, and at most 64 either way.
  const one = new Float32Array([1, 2, 3, 4]);
  native.reduceMany(0, 0, 4, f, [one, one, one]);
  assert.equal([...f], [3, 6, 9, 12]);
  native.reduceMany(3, 0, 4, f, one, f);
  assert.equal([...f], [3, 6, 9, 12]);
  assert.throws(() => (native.reduceMany as unknown as (...a: unknown[]) => void)(0, 0, 4, f, [one], one), err(TypeError, /one array or as trailing views, not both/));
  assert.throws(() => native.reduceMany(0, 0, 4, f, ...Array(65).fill(one)), err(RangeError, /1..64 views, got 65/));
  assert.throws(() => native.reduceMany(0, 0, 4, f, Array(65).fill(one)), err(RangeError, /1..64 views, got 65/));
  assert.throws(() => native.reduceMany(0, 0, 4, f, [one, 7 as unknown as Float32Array]), err(TypeError, /srcs\[1\] must be a TypedArray/));
  // An element getter that detaches dst runs before any address is taken: a clean error.
  const victim = new ArrayBuffer(16);
  const tricky: Float32Array[] = [one];
  Object.defineProperty(tricky, 1, { enumerable: true, get: () => (structuredClone(victim, { transfer: [victim] }), one) });
  assert.throws(() => native.reduceMany(0, 0, 4, new Float32Array(victim), tricky), err(RangeError, /dst holds 0 bytes/));
  // The benchmark hook checks the same way.
  assert.ok(native.reduceKernelSeconds(0, 0, 64, 2) >= 0);
  assert.throws(() => native.reduceKernelSeconds(5, 1, 64, 2), /op 'bor' is not defined for float64/);
  assert.throws(() => native.reduceKernelSeconds(0, 0, 0, 2), /count in 1\.\.1 GiB/);
});

test('every ISA level this CPU runs passes the whole matrix (one child process each)', async () => {
  const levels = supportedReduceIsas().filter((l) => l !== isa);
  const run = (env: Record<string, string>, args = [CHILD]) =>
    new Promise<{ code: number | null; out: string }>((resolve) => {
      const child = spawn(process.execPath, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
      let out = '';
      child.stdout.on('data', (d) => (out += d));
      child.on('exit', (code) => resolve({ code, out }));
    });
  const results = await Promise.all(levels.map((level) => run({ WEFT_REDUCE_ISA: level })));
  levels.forEach((level, i) => {
    const r = JSON.parse(results[i].out) as { isa: string; pairs: number; failures: string[]; failed: number };
    assert.is(r.isa, level, 'WEFT_REDUCE_ISA forces the level');
    assert.is(r.pairs, 72);
    assert.equal(r.failures, [], `${level}: ${r.failed} failures`);
    assert.is(results[i].code, 0);
  });
  // An unknown level keeps the best one.
  const best = supportedReduceIsas().at(-1);
  const binding = new URL('../../src/native/binding.js', import.meta.url).href;
  const script = `import { native } from '${binding}'; console.log(JSON.stringify({ isa: native.reduceIsa() }));`;
  const bogus = await run({ WEFT_REDUCE_ISA: 'avx9000' }, ['--input-type=module', '-e', script]);
  assert.is((JSON.parse(bogus.out) as { isa: string }).isa, best);
});

test.run();
