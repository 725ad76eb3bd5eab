// Entry point of the weft native core: memory, futexes, process facts, the fabric and SIMD
// reductions.
#include "addon.h"

namespace weft {

Napi::Value Fail(Napi::Env env, const char* code, const std::string& message) {
  Napi::Error err = Napi::Error::New(env, message);
  err.Set("code", Napi::String::New(env, code));
  err.ThrowAsJavaScriptException();
  return env.Undefined();
}

}  // namespace weft

static Napi::Object InitWeft(Napi::Env env, Napi::Object exports) {
  weft::InitShm(env, exports);
  weft::InitFutex(env, exports);
  weft::InitProc(env, exports);
  weft::InitOfi(env, exports);
  weft::InitReduce(env, exports);
  return exports;
}

NODE_API_MODULE(NODE_GYP_MODULE_NAME, InitWeft)
