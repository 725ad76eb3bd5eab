// The two places weft crosses from Node-API into V8, for what Node-API cannot say: a
// SharedArrayBuffer over an mmap'd segment (shm.cc) and holding a buffer's backing store while
// it is registered with the fabric (ofi.cc). napi_value is a v8::Local<v8::Value> by layout
// (Node's own js_native_api_v8 does the same reinterpretation).
#pragma once

#include <cstring>
#include <memory>

#include <node_api.h>
#include <v8.h>

namespace weft {

inline napi_value ToNapi(v8::Local<v8::Value> local) {
  napi_value out;
  static_assert(sizeof(out) == sizeof(local), "napi_value layout");
  std::memcpy(&out, &local, sizeof(out));
  return out;
}

inline v8::Local<v8::Value> ToV8(napi_value value) {
  v8::Local<v8::Value> out;
  static_assert(sizeof(out) == sizeof(value), "napi_value layout");
  std::memcpy(static_cast<void*>(&out), &value, sizeof(out));
  return out;
}

// The backing store of an ArrayBuffer or SharedArrayBuffer (empty for anything else). Holding
// it keeps the memory alive when the buffer is detached (transferred to another thread or
// context) and that owner is collected: the memory is freed only with the last holder.
inline std::shared_ptr<v8::BackingStore> BackingStoreOf(napi_value buffer) {
  v8::Local<v8::Value> v = ToV8(buffer);
  if (v->IsArrayBuffer()) return v.As<v8::ArrayBuffer>()->GetBackingStore();
  if (v->IsSharedArrayBuffer()) return v.As<v8::SharedArrayBuffer>()->GetBackingStore();
  return nullptr;
}

}  // namespace weft
