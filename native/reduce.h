// Codes and kernel table shared by the reduction binding (reduce.cc) and the per-ISA kernels
// (reduce_isa.cc). The numeric codes are part of the JS contract: src/reduce/codes.ts holds
// the same table and checks it against reduceCodes() when it loads.
#pragma once
#include <cstddef>
#include <cstdint>

namespace weft {
namespace reduce {

enum Op : int { kSum, kProd, kMin, kMax, kBand, kBor, kBxor, kOpCount };

enum DType : int {
  kFloat32, kFloat64, kInt8, kUint8, kInt16, kUint16, kInt32, kUint32, kInt64, kUint64,
  kFloat16, kBfloat16, kDTypeCount
};

constexpr const char* kOpNames[kOpCount] = {"sum", "prod", "min", "max", "band", "bor", "bxor"};
constexpr const char* kDTypeNames[kDTypeCount] = {
    "float32", "float64", "int8", "uint8", "int16", "uint16",
    "int32", "uint32", "int64", "uint64", "float16", "bfloat16"};
constexpr size_t kElementSize[kDTypeCount] = {4, 8, 1, 1, 2, 2, 4, 4, 8, 8, 2, 2};

constexpr bool IsFloat(int dtype) {
  return dtype == kFloat32 || dtype == kFloat64 || dtype == kFloat16 || dtype == kBfloat16;
}
constexpr bool IsBitwise(int op) { return op == kBand || op == kBor || op == kBxor; }

// dst[i] = a[i] op b[i] for i < n. dst may be a or b exactly (each vector is loaded before
// its result is stored), never a partial overlap.
using BinaryFn = void (*)(void* dst, const void* a, const void* b, size_t n);

// One ISA level's kernels; nullptr where the op is not defined for the dtype.
struct KernelTable {
  const char* isa;
  BinaryFn fn[kDTypeCount][kOpCount];
};

// The table chosen at load: the best level this CPU runs, or a lower one named by
// WEFT_REDUCE_ISA.
const KernelTable& Kernels();

// Names of the levels this CPU can run, lowest first.
size_t SupportedIsas(const char** out, size_t max);

}  // namespace reduce
}  // namespace weft
