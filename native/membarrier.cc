// The heavy half of an asymmetric fence: membarrier(2) makes every running thread of every
// process that registered execute a full memory barrier before the call returns.
//
// Why: on x86 a plain store is a release store, but a later load may still pass it (the store
// buffer). A producer that publishes with a plain store and then reads a sleeper count could
// miss a consumer that registered as a sleeper just then, and the consumer would sleep a whole
// slice with work waiting. Publishing with Atomics.store (xchg, a full fence) closes that gap
// on every message; a sleeper that calls membarrier after registering closes it only when
// someone goes to sleep, which is the slow path anyway (~0.5 us here).
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "addon.h"

namespace weft {
namespace {

long Membarrier(int cmd) { return syscall(__NR_membarrier, cmd, 0, 0); }

// 1: registered, 0: the kernel (or a seccomp filter) does not offer it; decided once.
int registered = -1;

// membarrierRegister(): true once this process takes part in global expedited barriers (its
// threads then get the barrier another process's membarrierGlobal() sends).
napi_value MembarrierRegister(napi_env env, napi_callback_info) {
  if (registered < 0) {
    long mask = Membarrier(MEMBARRIER_CMD_QUERY);
    const long need = MEMBARRIER_CMD_GLOBAL_EXPEDITED | MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED;
    registered = mask >= 0 && (mask & need) == need && Membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0 ? 1 : 0;
  }
  napi_value out;
  napi_get_boolean(env, registered == 1, &out);
  return out;
}

// membarrierGlobal(): every running thread of every registered process has executed a full
// memory barrier when this returns; false if the call failed (then nothing is promised).
napi_value MembarrierGlobal(napi_env env, napi_callback_info) {
  napi_value out;
  napi_get_boolean(env, Membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0, &out);
  return out;
}

}  // namespace

void InitMembarrier(Napi::Env env, Napi::Object exports) {
  napi_value fn;
  napi_create_function(env, "membarrierRegister", NAPI_AUTO_LENGTH, MembarrierRegister, nullptr, &fn);
  exports.Set("membarrierRegister", Napi::Value(env, fn));
  napi_create_function(env, "membarrierGlobal", NAPI_AUTO_LENGTH, MembarrierGlobal, nullptr, &fn);
  exports.Set("membarrierGlobal", Napi::Value(env, fn));
}

}  // namespace weft
