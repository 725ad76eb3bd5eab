// Compiles the reduction kernels once per x86 ISA level and picks one when the addon loads.
//
// The shipped build targets baseline x86-64 (no -march=native), so the wider levels come from
// GCC target attributes on the kernels themselves; __builtin_cpu_supports (which also checks
// that the OS saves the wide registers) decides which table runs. WEFT_REDUCE_ISA names a
// lower level to force, so tests can run every path on one machine.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

// GCC 12's AVX-512 intrinsics seed their unused pass-through operands with `__m512 __Y = __Y`,
// which -Wmaybe-uninitialized reports at every inlined use; the value is never read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "reduce.h"

namespace weft {
namespace reduce {

#if defined(__x86_64__)

#define WEFT_VEC_BYTES 16
#define WEFT_TARGET
#define WEFT_F16C 0
namespace sse2 {
namespace {
#include "reduce_kernels.h"
}  // namespace
}  // namespace sse2
#undef WEFT_VEC_BYTES
#undef WEFT_TARGET
#undef WEFT_F16C

#define WEFT_VEC_BYTES 32
#define WEFT_TARGET __attribute__((target("avx2,f16c")))
#define WEFT_F16C 1
namespace avx2 {
namespace {
#include "reduce_kernels.h"
}  // namespace
}  // namespace avx2
#undef WEFT_VEC_BYTES
#undef WEFT_TARGET
#undef WEFT_F16C

#define WEFT_VEC_BYTES 64
#define WEFT_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")))
#define WEFT_F16C 1
namespace avx512 {
namespace {
#include "reduce_kernels.h"
}  // namespace
}  // namespace avx512
#undef WEFT_VEC_BYTES
#undef WEFT_TARGET
#undef WEFT_F16C

namespace {

enum Level { kSse2, kAvx2, kAvx512, kLevelCount };
constexpr const char* kLevelNames[kLevelCount] = {"sse2", "avx2", "avx512"};

int BestLevel() {
  __builtin_cpu_init();
  bool f16c = __builtin_cpu_supports("f16c");
  if (f16c && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return kAvx512;
  if (f16c && __builtin_cpu_supports("avx2")) return kAvx2;
  return kSse2;
}

KernelTable Build() {
  const int best = BestLevel();
  int level = best;
  // Only a level this CPU runs can be forced; anything else keeps the best one, and
  // reduceIsa() reports what was actually chosen.
  if (const char* want = std::getenv("WEFT_REDUCE_ISA")) {
    for (int l = 0; l <= best; l++) {
      if (std::strcmp(want, kLevelNames[l]) == 0) level = l;
    }
  }
  switch (level) {
    case kAvx512: return avx512::Table(kLevelNames[kAvx512]);
    case kAvx2: return avx2::Table(kLevelNames[kAvx2]);
    default: return sse2::Table(kLevelNames[kSse2]);
  }
}

}  // namespace

const KernelTable& Kernels() {
  static const KernelTable table = Build();
  return table;
}

size_t SupportedIsas(const char** out, size_t max) {
  size_t n = 0;
  for (int l = 0; l <= BestLevel() && n < max; l++) out[n++] = kLevelNames[l];
  return n;
}

#else  // not x86-64: one portable level, vectorized by whatever the baseline target offers

#define WEFT_VEC_BYTES 16
#define WEFT_TARGET
#define WEFT_F16C 0
namespace generic {
namespace {
#include "reduce_kernels.h"
}  // namespace
}  // namespace generic
#undef WEFT_VEC_BYTES
#undef WEFT_TARGET
#undef WEFT_F16C

const KernelTable& Kernels() {
  static const KernelTable table = generic::Table("generic");
  return table;
}

size_t SupportedIsas(const char** out, size_t max) {
  if (max == 0) return 0;
  out[0] = "generic";
  return 1;
}

#endif

}  // namespace reduce
}  // namespace weft
