// Reduction kernels of one ISA level, written once with GCC vector extensions.
//
// Deliberately without an include guard: reduce_isa.cc includes this file once per level,
// inside that level's namespace and an unnamed namespace, after defining
//   WEFT_VEC_BYTES  bytes per vector register (16, 32 or 64)
//   WEFT_TARGET     the level's GCC target attribute (empty for the baseline)
//   WEFT_F16C       1 when float16 may use the F16C conversion instructions
// Internal linkage matters: were these templates merged across levels as inline functions,
// the linker could hand an AVX-512 body to the SSE2 path. System headers are included by
// the includer, never here (this text sits inside a namespace).
//
// Why vector extensions rather than auto-vectorized scalar loops: plain sum/prod/bitwise
// loops do auto-vectorize (GCC 12 keeps the vector path even for dst == a), but a scalar loop
// with the NaN and signed-zero rules of min/max below stayed scalar (1.3 G floats/s against
// 11 G/s for sum), and half-precision conversions need vector code anyway. Writing every op
// once in vector form gives one code path for all of them; each vector is loaded before its
// result is stored, so dst == a is safe by construction.

#define WEFT_INLINE WEFT_TARGET inline __attribute__((always_inline))

constexpr size_t kVecBytes = WEFT_VEC_BYTES;

template <class T, size_t Bytes>
struct VecOf {
  typedef T type __attribute__((vector_size(Bytes)));
};
template <class T>
using Vec = typename VecOf<T, kVecBytes>::type;

template <size_t N> struct IntOfSize;
template <> struct IntOfSize<4> { using type = int32_t; };
template <> struct IntOfSize<8> { using type = int64_t; };

// Each op maps two vectors of lane type T to one. Integer sum/prod/bitwise run on unsigned
// lanes, so overflow wraps modulo 2^bits exactly as C unsigned arithmetic (and the signed
// result is the same bits); min/max run on the element's own signedness.
struct Sum {
  template <class T, class V> static WEFT_INLINE V Apply(V x, V y) { return x + y; }
};
struct Prod {
  template <class T, class V> static WEFT_INLINE V Apply(V x, V y) { return x * y; }
};
struct Band {
  template <class T, class V> static WEFT_INLINE V Apply(V x, V y) { return x & y; }
};
struct Bor {
  template <class T, class V> static WEFT_INLINE V Apply(V x, V y) { return x | y; }
};
struct Bxor {
  template <class T, class V> static WEFT_INLINE V Apply(V x, V y) { return x ^ y; }
};

// Float min/max follow JS Math.min/Math.max (and torch.minimum): a NaN in either input gives
// NaN, and -0 counts as smaller than +0. Hardware minps would instead return the second
// operand for NaN and for +-0 ties, making the result depend on argument order.
template <bool kIsMax>
struct MinMax {
  template <class T, class V> static WEFT_INLINE V Apply(V x, V y) {
    if constexpr (std::is_floating_point_v<T>) {
      using M = typename VecOf<typename IntOfSize<sizeof(T)>::type, sizeof(V)>::type;
      // Equal operands differ in bits only as -0 vs +0: OR picks -0 for min, AND +0 for max.
      V tie = kIsMax ? (V)((M)x & (M)y) : (V)((M)x | (M)y);
      V r = kIsMax ? (x > y ? x : (y > x ? y : tie)) : (x < y ? x : (y < x ? y : tie));
      // x + y is a quiet NaN whenever either input is NaN.
      return (x == x) & (y == y) ? r : x + y;
    } else {
      return kIsMax ? (x > y ? x : y) : (x < y ? x : y);
    }
  }
};
using Min = MinMax<false>;
using Max = MinMax<true>;

template <class T, class Op>
WEFT_INLINE void Step(char* d, const char* a, const char* b) {
  using V = Vec<T>;
  V x, y;
  __builtin_memcpy(&x, a, sizeof(V));
  __builtin_memcpy(&y, b, sizeof(V));
  V r = Op::template Apply<T, V>(x, y);
  __builtin_memcpy(d, &r, sizeof(V));
}

template <class T, class Op>
WEFT_TARGET void Binary(void* dst, const void* a, const void* b, size_t n) {
  char* d = static_cast<char*>(dst);
  const char* pa = static_cast<const char*>(a);
  const char* pb = static_cast<const char*>(b);
  const size_t bytes = n * sizeof(T);
  size_t i = 0;
  // Four vectors per trip keep enough loads in flight for L1-resident blocks.
  for (; i + 4 * kVecBytes <= bytes; i += 4 * kVecBytes) {
    Step<T, Op>(d + i, pa + i, pb + i);
    Step<T, Op>(d + i + kVecBytes, pa + i + kVecBytes, pb + i + kVecBytes);
    Step<T, Op>(d + i + 2 * kVecBytes, pa + i + 2 * kVecBytes, pb + i + 2 * kVecBytes);
    Step<T, Op>(d + i + 3 * kVecBytes, pa + i + 3 * kVecBytes, pb + i + 3 * kVecBytes);
  }
  for (; i + kVecBytes <= bytes; i += kVecBytes) Step<T, Op>(d + i, pa + i, pb + i);
  if (i < bytes) {
    // The tail goes through the same vector op on a zero-padded copy, so it cannot disagree
    // with the body on NaN or overflow rules.
    char ta[kVecBytes] = {}, tb[kVecBytes] = {}, td[kVecBytes];
    __builtin_memcpy(ta, pa + i, bytes - i);
    __builtin_memcpy(tb, pb + i, bytes - i);
    Step<T, Op>(td, ta, tb);
    __builtin_memcpy(d + i, td, bytes - i);
  }
}

// bfloat16 is the top half of a float32: widening is a shift, narrowing rounds the dropped
// 16 bits to nearest even. NaNs need no special case: every NaN here is an input's (payload in
// the top half, low 16 bits zero) or the default NaN, and rounding zero low bits carries nothing.
struct Bf16 {
  static constexpr size_t kLanes = kVecBytes / 4;
  using F = Vec<float>;
  using U = Vec<uint32_t>;
  using H = typename VecOf<uint16_t, kVecBytes / 2>::type;
  static WEFT_INLINE F Load(const char* p) {
    H h;
    __builtin_memcpy(&h, p, sizeof(H));
    return (F)(__builtin_convertvector(h, U) << 16);
  }
  static WEFT_INLINE void Store(char* p, F f) {
    U u = (U)f;
    H h = __builtin_convertvector((u + 0x7fffu + ((u >> 16) & 1u)) >> 16, H);
    __builtin_memcpy(p, &h, sizeof(H));
  }
};

#if WEFT_F16C
// IEEE half through the F16C instructions; vcvtps2ph rounds to nearest even.
struct F16 {
  static constexpr size_t kLanes = kVecBytes / 4;
  using F = Vec<float>;
#if WEFT_VEC_BYTES == 64
  static WEFT_INLINE F Load(const char* p) {
    return (F)_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static WEFT_INLINE void Store(char* p, F f) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtps_ph((__m512)f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
#else
  static_assert(WEFT_VEC_BYTES == 32, "F16C path expects 256-bit vectors");
  static WEFT_INLINE F Load(const char* p) {
    return (F)_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static WEFT_INLINE void Store(char* p, F f) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph((__m256)f, _MM_FROUND_TO_NEAREST_INT));
  }
#endif
};
#else
// IEEE half in integer vector code, for CPUs without F16C. Bit-exact with the F16C path.
struct F16 {
  static constexpr size_t kLanes = kVecBytes / 4;
  using F = Vec<float>;
  using U = Vec<uint32_t>;
  using I = Vec<int32_t>;  // signed lanes for compares: SSE2 has no unsigned vector compare
  using H = typename VecOf<uint16_t, kVecBytes / 2>::type;
  static WEFT_INLINE F Load(const char* p) {
    H h;
    __builtin_memcpy(&h, p, sizeof(H));
    U v = __builtin_convertvector(h, U);
    U sign = (v & 0x8000u) << 16;
    I em = (I)(v & 0x7fffu);
    U normal = ((U)em << 13) + (112u << 23);       // rebias the exponent: 127 - 15
    U special = ((U)em << 13) | 0x7f800000u;       // inf/NaN keep the mantissa (NaN payload)
    U tiny = (U)(__builtin_convertvector(em, F) * 0x1p-24f);  // zero/subnormal: em * 2^-24, exact
    U bits = em >= 0x7c00 ? special : (em >= 0x0400 ? normal : tiny);
    return (F)(bits | sign);
  }
  static WEFT_INLINE void Store(char* p, F f) {
    const U inf = U{} + 0x7c00u;
    U u = (U)f;
    U sign = (u >> 16) & 0x8000u;
    U ua = u & 0x7fffffffu;
    I a = (I)ua;  // non-negative, so signed compares order it correctly
    U nan = 0x7e00u | ((ua >> 13) & 0x3ffu);
    // Normal halves: round the 13 dropped mantissa bits to nearest even, then rebias; a carry
    // out of the mantissa bumps the exponent, which is the right result.
    U normal = (ua + 0xfffu + ((ua >> 13) & 1u) - (112u << 23)) >> 13;
    // Below 2^-14 the half is subnormal: adding 0.5 makes the FPU round |f| to a multiple of
    // 2^-24 (the ulp at 0.5), which then sits in the low mantissa bits. 2^-14 itself comes
    // out as 0x400, the smallest normal, as it should.
    U tiny = (U)((F)ua + 0.5f) - 0x3f000000u;
    // 0x477ff000 is 65520, halfway between 65504 (odd mantissa) and 65536: ties go to infinity.
    U h = a > 0x7f800000 ? nan : (a >= 0x477ff000 ? inf : (a >= 0x38800000 ? normal : tiny));
    H out = __builtin_convertvector(h | sign, H);
    __builtin_memcpy(p, &out, sizeof(H));
  }
};
#endif

// float16/bfloat16: widen to float32, apply the float op, round back to nearest even. For +
// and * float32 carries more than twice the precision of either format, so the double
// rounding equals a single correct rounding of the exact result.
template <class Codec, class Op>
WEFT_INLINE void Step16(char* d, const char* a, const char* b) {
  using F = typename Codec::F;
  Codec::Store(d, Op::template Apply<float, F>(Codec::Load(a), Codec::Load(b)));
}

template <class Codec, class Op>
WEFT_TARGET void Binary16(void* dst, const void* a, const void* b, size_t n) {
  constexpr size_t kStep = Codec::kLanes * 2;  // bytes of halves per vector of floats
  char* d = static_cast<char*>(dst);
  const char* pa = static_cast<const char*>(a);
  const char* pb = static_cast<const char*>(b);
  const size_t bytes = n * 2;
  size_t i = 0;
  for (; i + 2 * kStep <= bytes; i += 2 * kStep) {
    Step16<Codec, Op>(d + i, pa + i, pb + i);
    Step16<Codec, Op>(d + i + kStep, pa + i + kStep, pb + i + kStep);
  }
  for (; i + kStep <= bytes; i += kStep) Step16<Codec, Op>(d + i, pa + i, pb + i);
  if (i < bytes) {
    char ta[kStep] = {}, tb[kStep] = {}, td[kStep];
    __builtin_memcpy(ta, pa + i, bytes - i);
    __builtin_memcpy(tb, pb + i, bytes - i);
    Step16<Codec, Op>(td, ta, tb);
    __builtin_memcpy(d + i, td, bytes - i);
  }
}

template <class T>
void FillInteger(KernelTable* t, int dtype) {
  using U = std::make_unsigned_t<T>;
  t->fn[dtype][kSum] = &Binary<U, Sum>;
  t->fn[dtype][kProd] = &Binary<U, Prod>;
  t->fn[dtype][kMin] = &Binary<T, Min>;
  t->fn[dtype][kMax] = &Binary<T, Max>;
  t->fn[dtype][kBand] = &Binary<U, Band>;
  t->fn[dtype][kBor] = &Binary<U, Bor>;
  t->fn[dtype][kBxor] = &Binary<U, Bxor>;
}

template <class T>
void FillFloat(KernelTable* t, int dtype) {
  t->fn[dtype][kSum] = &Binary<T, Sum>;
  t->fn[dtype][kProd] = &Binary<T, Prod>;
  t->fn[dtype][kMin] = &Binary<T, Min>;
  t->fn[dtype][kMax] = &Binary<T, Max>;
}

template <class Codec>
void FillHalf(KernelTable* t, int dtype) {
  t->fn[dtype][kSum] = &Binary16<Codec, Sum>;
  t->fn[dtype][kProd] = &Binary16<Codec, Prod>;
  t->fn[dtype][kMin] = &Binary16<Codec, Min>;
  t->fn[dtype][kMax] = &Binary16<Codec, Max>;
}

KernelTable Table(const char* isa) {
  KernelTable t{};
  t.isa = isa;
  FillFloat<float>(&t, kFloat32);
  FillFloat<double>(&t, kFloat64);
  FillInteger<int8_t>(&t, kInt8);
  FillInteger<uint8_t>(&t, kUint8);
  FillInteger<int16_t>(&t, kInt16);
  FillInteger<uint16_t>(&t, kUint16);
  FillInteger<int32_t>(&t, kInt32);
  FillInteger<uint32_t>(&t, kUint32);
  FillInteger<int64_t>(&t, kInt64);
  FillInteger<uint64_t>(&t, kUint64);
  FillHalf<F16>(&t, kFloat16);
  FillHalf<Bf16>(&t, kBfloat16);
  return t;
}

#undef WEFT_INLINE
