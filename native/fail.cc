// Fail(): the one way native code throws, with a `code` property the TypeScript side maps to
// WeftError codes. Compiled into both addons.
#include "addon.h"

namespace weft {

Napi::Value Fail(Napi::Env env, const char* code, const std::string& message) {
  Napi::Error err = Napi::Error::New(env, message);
  err.Set("code", Napi::String::New(env, code));
  err.ThrowAsJavaScriptException();
  return env.Undefined();
}

}  // namespace weft
