// Module-wide declarations: each native part registers its functions on the exports object.
#pragma once
#include <napi.h>

namespace weft {
void InitShm(Napi::Env env, Napi::Object exports);
void InitFutex(Napi::Env env, Napi::Object exports);
void InitMembarrier(Napi::Env env, Napi::Object exports);
void InitProc(Napi::Env env, Napi::Object exports);
void InitOfi(Napi::Env env, Napi::Object exports);
void InitReduce(Napi::Env env, Napi::Object exports);

// Throws a JS Error (with `code`) and returns an undefined value, for use as `return Fail(...)`.
Napi::Value Fail(Napi::Env env, const char* code, const std::string& message);
}  // namespace weft
