// Entry point of the weft native core: memory, futexes, process facts and SIMD reductions.
// The fabric lives in a second addon (weft_ofi.node, ofi_addon.cc), loaded only when a
// program uses an ofi provider: linking libfabric here would make every process pay for it.
#include "addon.h"

static Napi::Object InitWeft(Napi::Env env, Napi::Object exports) {
  weft::InitShm(env, exports);
  weft::InitFutex(env, exports);
  weft::InitMembarrier(env, exports);
  weft::InitProc(env, exports);
  weft::InitReduce(env, exports);
  return exports;
}

NODE_API_MODULE(NODE_GYP_MODULE_NAME, InitWeft)
