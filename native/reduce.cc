// Elementwise reductions over typed-array memory: reduce(op, dtype, count, dst, a, b) and
// reduceMany(op, dtype, count, dst, srcs). The collectives call these once per chunk, often on
// views of other processes' shared segments, so the entry points use raw napi_* calls, check
// every view's bounds (a bad argument throws, never crashes) and allocate nothing.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "addon.h"
#include "reduce.h"

namespace weft {
namespace {

using namespace reduce;

constexpr size_t kMaxSources = 64;
// reduceMany walks all sources block by block, so the partial result stays in L1 while each
// source streams through once: 1.15-1.7x the speed of chained pairwise calls for 4..8 sources
// of 1-16 MiB here. 4-8 KiB blocks measured fastest; 16 KiB and up fall out of L1 and lose.
constexpr size_t kBlockBytes = 8192;

struct Span {
  char* data;
  size_t bytes;
};

size_t ElementWidth(napi_typedarray_type type) {
  switch (type) {
    case napi_int8_array:
    case napi_uint8_array:
    case napi_uint8_clamped_array: return 1;
    case napi_int16_array:
    case napi_uint16_array: return 2;
    case napi_int32_array:
    case napi_uint32_array:
    case napi_float32_array: return 4;
    case napi_float64_array:
    case napi_bigint64_array:
    case napi_biguint64_array: return 8;
    default: return 0;
  }
}

// The bytes of a TypedArray or DataView from its byteOffset on; a detached buffer has none.
bool SpanOf(napi_env env, napi_value v, Span* out) {
  napi_typedarray_type type;
  size_t length = 0;
  void* data = nullptr;
  if (napi_get_typedarray_info(env, v, &type, &length, &data, nullptr, nullptr) == napi_ok) {
    size_t width = ElementWidth(type);
    if (width == 0) return false;
    *out = Span{static_cast<char*>(data), length * width};
    return true;
  }
  size_t bytes = 0;
  if (napi_get_dataview_info(env, v, &bytes, &data, nullptr, nullptr) == napi_ok) {
    *out = Span{static_cast<char*>(data), bytes};
    return true;
  }
  return false;
}

std::nullptr_t ThrowType(napi_env env, const std::string& message) {
  napi_throw_type_error(env, "EINVAL", message.c_str());
  return nullptr;
}

std::nullptr_t ThrowRange(napi_env env, const std::string& message) {
  napi_throw_range_error(env, "ERANGE", message.c_str());
  return nullptr;
}

std::string Num(double x) {
  std::string s = std::to_string(x);
  s.erase(s.find_last_not_of('0') + 1);
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

// Reads op, dtype and count (the first three arguments of both entry points).
bool ReadHead(napi_env env, const char* where, const napi_value* argv, int* op, int* dtype, size_t* count) {
  double o = -1, d = -1, c = -1;
  if (napi_get_value_double(env, argv[0], &o) != napi_ok || napi_get_value_double(env, argv[1], &d) != napi_ok ||
      napi_get_value_double(env, argv[2], &c) != napi_ok) {
    ThrowType(env, std::string(where) + ": op, dtype and count must be numbers");
    return false;
  }
  if (!(o >= 0 && o < kOpCount && o == static_cast<int>(o))) {
    ThrowRange(env, std::string(where) + ": unknown op code " + Num(o) + " (0..6: sum, prod, min, max, band, bor, bxor)");
    return false;
  }
  if (!(d >= 0 && d < kDTypeCount && d == static_cast<int>(d))) {
    ThrowRange(env, std::string(where) + ": unknown dtype code " + Num(d) +
                        " (0..11: float32, float64, int8, uint8, int16, uint16, int32, uint32, int64, uint64, float16, bfloat16)");
    return false;
  }
  *op = static_cast<int>(o);
  *dtype = static_cast<int>(d);
  if (IsBitwise(*op) && IsFloat(*dtype)) {
    ThrowType(env, std::string(where) + ": op '" + kOpNames[*op] + "' is not defined for " + kDTypeNames[*dtype] +
                       "; use an integer dtype or another op");
    return false;
  }
  if (!(c >= 0 && c <= 9007199254740991.0 && c == static_cast<double>(static_cast<uint64_t>(c)))) {
    ThrowRange(env, std::string(where) + ": count must be a non-negative integer, got " + Num(c));
    return false;
  }
  *count = static_cast<size_t>(c);
  return true;
}

// Resolves a view that must hold `count` elements of `dtype`.
// `name` is "dst", "a", "b", or "srcs" with `index` >= 0; the text is built only on failure.
bool ReadView(napi_env env, const char* where, const char* name, int index, napi_value v, int dtype, size_t count, Span* out) {
  auto label = [&] { return std::string(name) + (index >= 0 ? "[" + std::to_string(index) + "]" : ""); };
  if (!SpanOf(env, v, out)) {
    ThrowType(env, std::string(where) + ": " + label() + " must be a TypedArray or DataView");
    return false;
  }
  size_t size = kElementSize[dtype];
  if (out->bytes / size < count) {
    ThrowRange(env, std::string(where) + ": " + label() + " holds " + std::to_string(out->bytes) + " bytes but " +
                        std::to_string(count) + " " + kDTypeNames[dtype] + " need " + std::to_string(count * size) +
                        (out->bytes == 0 ? " (is its buffer detached?)" : ""));
    return false;
  }
  return true;
}

// True when the two ranges share a byte without being the very same memory: the kernels
// then would read elements they already overwrote.
bool PartialOverlap(const char* x, const char* y, size_t bytes) {
  if (x == y || bytes == 0) return false;
  uintptr_t a = reinterpret_cast<uintptr_t>(x), b = reinterpret_cast<uintptr_t>(y);
  return a < b + bytes && b < a + bytes;
}

// reduce(op, dtype, count, dst, a, b): dst[i] = a[i] op b[i] for i < count.
napi_value Reduce(napi_env env, napi_callback_info cb) {
  size_t argc = 6;
  napi_value argv[6];
  napi_get_cb_info(env, cb, &argc, argv, nullptr, nullptr);
  if (argc < 6) return ThrowType(env, "reduce(op, dtype, count, dst, a, b): expected 6 arguments");
  int op, dtype;
  size_t count;
  Span d, a, b;
  if (!ReadHead(env, "reduce", argv, &op, &dtype, &count) || !ReadView(env, "reduce", "dst", -1, argv[3], dtype, count, &d) ||
      !ReadView(env, "reduce", "a", -1, argv[4], dtype, count, &a) || !ReadView(env, "reduce", "b", -1, argv[5], dtype, count, &b))
    return nullptr;
  if (count == 0) return nullptr;
  size_t bytes = count * kElementSize[dtype];
  if (PartialOverlap(d.data, a.data, bytes) || PartialOverlap(d.data, b.data, bytes))
    return ThrowRange(env, "reduce: dst partly overlaps a or b; it may only be the very same memory");
  Kernels().fn[dtype][op](d.data, a.data, b.data, count);
  return nullptr;
}

// reduceMany(op, dtype, count, dst, srcs) or reduceMany(op, dtype, count, dst, ...srcs):
// dst = srcs[0] op srcs[1] op ... (left to right, each step rounded to dtype, so the result
// equals srcs.length - 1 reduce() calls) in one pass over memory. The spread form exists for
// speed: N-API reads an array one napi_get_element (~50 ns) at a time, while trailing
// arguments arrive together.
napi_value ReduceMany(napi_env env, napi_callback_info cb) {
  size_t argc = 4 + kMaxSources;  // capacity in, the real count out
  napi_value argv[4 + kMaxSources];
  napi_get_cb_info(env, cb, &argc, argv, nullptr, nullptr);
  if (argc < 5) return ThrowType(env, "reduceMany(op, dtype, count, dst, srcs): expected 5 arguments");
  int op, dtype;
  size_t count;
  if (!ReadHead(env, "reduceMany", argv, &op, &dtype, &count)) return nullptr;
  bool is_array = false;
  napi_is_array(env, argv[4], &is_array);
  napi_value listed[kMaxSources];
  const napi_value* views = argv + 4;
  size_t n = argc - 4;
  if (is_array) {
    if (argc > 5) return ThrowType(env, "reduceMany: pass srcs as one array or as trailing views, not both");
    uint32_t len = 0;
    napi_get_array_length(env, argv[4], &len);
    n = len;
    if (n >= 1 && n <= kMaxSources) {
      for (uint32_t k = 0; k < n; k++) {
        if (napi_get_element(env, argv[4], k, &listed[k]) != napi_ok) return nullptr;
      }
    }
    views = listed;
  }
  if (n < 1 || n > kMaxSources)
    return ThrowRange(env, "reduceMany: srcs must hold 1.." + std::to_string(kMaxSources) + " views, got " + std::to_string(n));
  // Only now resolve pointers: an array element getter runs JS, which could detach a buffer
  // whose address had already been taken.
  Span d;
  if (!ReadView(env, "reduceMany", "dst", -1, argv[3], dtype, count, &d)) return nullptr;
  const size_t size = kElementSize[dtype];
  const size_t bytes = count * size;
  char* src[kMaxSources];
  for (size_t k = 0; k < n; k++) {
    Span s;
    if (!ReadView(env, "reduceMany", "srcs", static_cast<int>(k), views[k], dtype, count, &s)) return nullptr;
    // Block by block, dst is written before srcs[2..] are read, so only srcs[0] and srcs[1]
    // may be dst itself.
    if (PartialOverlap(d.data, s.data, bytes) || (k >= 2 && bytes && d.data == s.data))
      return ThrowRange(env, "reduceMany: dst overlaps srcs[" + std::to_string(k) +
                                 "]; it may only be the very same memory as srcs[0] or srcs[1]");
    src[k] = s.data;
  }
  if (count == 0) return nullptr;
  if (n == 1) {
    if (d.data != src[0]) std::memmove(d.data, src[0], bytes);
    return nullptr;
  }
  BinaryFn fn = Kernels().fn[dtype][op];
  const size_t block = kBlockBytes / size;
  for (size_t at = 0; at < count; at += block) {
    size_t len = count - at < block ? count - at : block;
    size_t off = at * size;
    fn(d.data + off, src[0] + off, src[1] + off, len);
    for (size_t k = 2; k < n; k++) fn(d.data + off, d.data + off, src[k] + off, len);
  }
  return nullptr;
}

// reduceKernelSeconds(op, dtype, count, iterations): seconds for `iterations` in-place kernel
// runs (acc = acc op x) over `count` elements of private buffers: the kernel's own speed, with
// no N-API crossing or argument checks, for bench/reduce.ts (as memcpyBandwidth is for copies).
Napi::Value ReduceKernelSeconds(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 4 || !info[3].IsNumber()) return Fail(env, "EINVAL", "reduceKernelSeconds(op, dtype, count, iterations)");
  napi_value head[3] = {info[0], info[1], info[2]};
  int op, dtype;
  size_t count;
  if (!ReadHead(env, "reduceKernelSeconds", head, &op, &dtype, &count)) return env.Undefined();
  double iters = info[3].As<Napi::Number>().DoubleValue();
  size_t bytes = count * kElementSize[dtype];
  if (count == 0 || bytes > (size_t(1) << 30) || !(iters >= 1))
    return Fail(env, "EINVAL", "reduceKernelSeconds: count in 1..1 GiB of elements, iterations >= 1");
  // x is all zero bits, so sums and products stay put and floats never go subnormal.
  std::vector<char> acc(bytes, 0x3c), x(bytes, 0);
  BinaryFn fn = Kernels().fn[dtype][op];
  auto t0 = std::chrono::steady_clock::now();
  for (double i = 0; i < iters; i++) {
    fn(acc.data(), acc.data(), x.data(), count);
    asm volatile("" : : "r"(acc.data()) : "memory");
  }
  auto t1 = std::chrono::steady_clock::now();
  return Napi::Number::New(env, std::chrono::duration<double>(t1 - t0).count());
}

Napi::Value ReduceIsa(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), Kernels().isa); }

Napi::Value ReduceIsas(const Napi::CallbackInfo& info) {
  const char* names[8];
  size_t n = SupportedIsas(names, 8);
  Napi::Array out = Napi::Array::New(info.Env(), n);
  for (size_t i = 0; i < n; i++) out.Set(static_cast<uint32_t>(i), Napi::String::New(info.Env(), names[i]));
  return out;
}

// The code tables, for src/reduce/codes.ts to check against its own copy at load.
Napi::Value ReduceCodes(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object out = Napi::Object::New(env);
  Napi::Array ops = Napi::Array::New(env, kOpCount);
  for (int i = 0; i < kOpCount; i++) ops.Set(static_cast<uint32_t>(i), Napi::String::New(env, kOpNames[i]));
  Napi::Array dtypes = Napi::Array::New(env, kDTypeCount);
  Napi::Array sizes = Napi::Array::New(env, kDTypeCount);
  Napi::Array floats = Napi::Array::New(env, kDTypeCount);
  for (int i = 0; i < kDTypeCount; i++) {
    dtypes.Set(static_cast<uint32_t>(i), Napi::String::New(env, kDTypeNames[i]));
    sizes.Set(static_cast<uint32_t>(i), Napi::Number::New(env, static_cast<double>(kElementSize[i])));
    floats.Set(static_cast<uint32_t>(i), Napi::Boolean::New(env, IsFloat(i)));
  }
  out.Set("ops", ops);
  out.Set("dtypes", dtypes);
  out.Set("elementSizes", sizes);
  out.Set("isFloat", floats);
  out.Set("maxSources", Napi::Number::New(env, kMaxSources));
  return out;
}

}  // namespace

void InitReduce(Napi::Env env, Napi::Object exports) {
  napi_value fn;
  napi_create_function(env, "reduce", NAPI_AUTO_LENGTH, Reduce, nullptr, &fn);
  exports.Set("reduce", Napi::Value(env, fn));
  napi_create_function(env, "reduceMany", NAPI_AUTO_LENGTH, ReduceMany, nullptr, &fn);
  exports.Set("reduceMany", Napi::Value(env, fn));
  exports.Set("reduceIsa", Napi::Function::New(env, ReduceIsa, "reduceIsa"));
  exports.Set("reduceIsas", Napi::Function::New(env, ReduceIsas, "reduceIsas"));
  exports.Set("reduceCodes", Napi::Function::New(env, ReduceCodes, "reduceCodes"));
  exports.Set("reduceKernelSeconds", Napi::Function::New(env, ReduceKernelSeconds, "reduceKernelSeconds"));
}

}  // namespace weft
