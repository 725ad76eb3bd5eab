// Entry point of weft's fabric addon (weft_ofi.node): the libfabric binding of ofi.cc. Built
// only where `pkg-config libfabric` finds libfabric, and loaded by src/native/binding.ts on
// first use of an ofi provider, with the process's signal handlers kept (see proc.cc).
#include "addon.h"

static Napi::Object InitWeftOfi(Napi::Env env, Napi::Object exports) {
  weft::InitOfi(env, exports);
  return exports;
}

NODE_API_MODULE(weft_ofi, InitWeftOfi)
