// Futex wait/wake on an Int32 word of a shared segment.
//
// Atomics.wait/notify keep their waiter lists per process, so they cannot wake a peer process.
// A futex on the shared word can. Waking costs a syscall (~0.5 us), so callers ring only when
// the sleeper has raised a flag; the wake path uses raw napi_* calls to stay cheap.
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <ctime>

#include "addon.h"

namespace weft {
namespace {

long Futex(int32_t* addr, int op, int32_t val, const struct timespec* ts) {
  return syscall(SYS_futex, addr, op, val, ts, nullptr, 0);
}

// Resolves (array, index) to the word's address, or nullptr after throwing.
int32_t* WordAt(napi_env env, napi_value array, napi_value index) {
  napi_typedarray_type type;
  size_t length = 0;
  void* data = nullptr;
  bool is_typed = false;
  napi_is_typedarray(env, array, &is_typed);
  if (!is_typed || napi_get_typedarray_info(env, array, &type, &length, &data, nullptr, nullptr) != napi_ok ||
      type != napi_int32_array) {
    napi_throw_type_error(env, "EINVAL", "futex: expected an Int32Array over a shared segment");
    return nullptr;
  }
  int64_t i = -1;
  napi_get_value_int64(env, index, &i);
  if (i < 0 || static_cast<size_t>(i) >= length) {
    napi_throw_range_error(env, "ERANGE", "futex: index out of range");
    return nullptr;
  }
  return static_cast<int32_t*>(data) + i;
}

const char* WaitResult(long rc, int err) {
  if (rc == 0) return "ok";
  if (err == EAGAIN) return "not-equal";
  if (err == ETIMEDOUT) return "timed-out";
  if (err == EINTR) return "ok";  // spurious: the caller re-checks its condition anyway
  return "error";
}

struct timespec ToTimespec(double ms) {
  if (ms < 0) ms = 0;
  struct timespec ts;
  ts.tv_sec = static_cast<time_t>(ms / 1000.0);
  ts.tv_nsec = static_cast<long>((ms - static_cast<double>(ts.tv_sec) * 1000.0) * 1e6);
  return ts;
}

// futexWake(i32, index, count): number of processes woken.
napi_value FutexWake(napi_env env, napi_callback_info cbinfo) {
  size_t argc = 3;
  napi_value argv[3];
  napi_get_cb_info(env, cbinfo, &argc, argv, nullptr, nullptr);
  if (argc < 2) {
    napi_throw_type_error(env, "EINVAL", "futexWake(i32: Int32Array, index: number, count?: number)");
    return nullptr;
  }
  int32_t* word = WordAt(env, argv[0], argv[1]);
  if (word == nullptr) return nullptr;
  int32_t count = INT_MAX;
  if (argc >= 3) napi_get_value_int32(env, argv[2], &count);
  long rc = Futex(word, FUTEX_WAKE, count, nullptr);
  napi_value out;
  napi_create_int32(env, rc < 0 ? 0 : static_cast<int32_t>(rc), &out);
  return out;
}

// futexWait(i32, index, expected, timeoutMs): blocks the calling thread.
Napi::Value FutexWait(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 4) return Fail(env, "EINVAL", "futexWait(i32, index, expected, timeoutMs)");
  int32_t* word = WordAt(env, info[0], info[1]);
  if (word == nullptr) return env.Undefined();
  int32_t expected = info[2].As<Napi::Number>().Int32Value();
  struct timespec ts = ToTimespec(info[3].As<Napi::Number>().DoubleValue());
  long rc = Futex(word, FUTEX_WAIT, expected, &ts);
  return Napi::String::New(env, WaitResult(rc, errno));
}

// Waits on a libuv pool thread so the event loop keeps running; holds the array alive.
// The promise is settled through the C API with its status ignored: when a worker thread is
// terminated while this wait is pending, the completion runs during the environment's
// teardown, where settling fails; node-addon-api's Deferred would turn that failure into a
// throw, and a throw there is a fatal error that takes the whole process down.
class FutexWaitWorker : public Napi::AsyncWorker {
 public:
  FutexWaitWorker(Napi::Env env, Napi::Object array, int32_t* word, int32_t expected, double ms)
      : Napi::AsyncWorker(env, "weft.futexWaitAsync"), word_(word), expected_(expected), ms_(ms) {
    napi_create_promise(env, &deferred_, &promise_);
    keep_ = Napi::Persistent(array);
  }
  napi_value Promise() const { return promise_; }
  void Execute() override {
    struct timespec ts = ToTimespec(ms_);
    long rc = Futex(word_, FUTEX_WAIT, expected_, &ts);
    result_ = WaitResult(rc, errno);
  }
  void OnOK() override {
    napi_value v;
    if (napi_create_string_utf8(Env(), result_, NAPI_AUTO_LENGTH, &v) != napi_ok) return;
    napi_resolve_deferred(Env(), deferred_, v);
  }
  void OnError(const Napi::Error& e) override { napi_reject_deferred(Env(), deferred_, e.Value()); }

 private:
  napi_deferred deferred_ = nullptr;
  napi_value promise_ = nullptr;
  Napi::ObjectReference keep_;
  int32_t* word_;
  int32_t expected_;
  double ms_;
  const char* result_ = "error";
};

// futexWaitAsync(i32, index, expected, timeoutMs): Promise<'ok'|'not-equal'|'timed-out'>.
Napi::Value FutexWaitAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 4) return Fail(env, "EINVAL", "futexWaitAsync(i32, index, expected, timeoutMs)");
  int32_t* word = WordAt(env, info[0], info[1]);
  if (word == nullptr) return env.Undefined();
  double ms = info[3].As<Napi::Number>().DoubleValue();
  if (!(ms >= 0) || ms > 60000) return Fail(env, "EINVAL", "futexWaitAsync: timeoutMs must be in [0, 60000]");
  auto* worker = new FutexWaitWorker(env, info[0].As<Napi::Object>(), word,
                                     info[2].As<Napi::Number>().Int32Value(), ms);
  napi_value p = worker->Promise();
  worker->Queue();
  return Napi::Value(env, p);
}

}  // namespace

void InitFutex(Napi::Env env, Napi::Object exports) {
  napi_value wake;
  napi_create_function(env, "futexWake", NAPI_AUTO_LENGTH, FutexWake, nullptr, &wake);
  exports.Set("futexWake", Napi::Value(env, wake));
  exports.Set("futexWait", Napi::Function::New(env, FutexWait, "futexWait"));
  exports.Set("futexWaitAsync", Napi::Function::New(env, FutexWaitAsync, "futexWaitAsync"));
}

}  // namespace weft
