// libfabric binding (placeholder until the ofi binding lands): reports why ofi is missing.
#include "addon.h"

namespace weft {
void InitOfi(Napi::Env env, Napi::Object exports) {
  Napi::Object ofi = Napi::Object::New(env);
  ofi.Set("available", Napi::Boolean::New(env, false));
  ofi.Set("reason", Napi::String::New(env, "the ofi binding is not built yet"));
  exports.Set("ofi", ofi);
}
}  // namespace weft
