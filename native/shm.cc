// Shared-memory segments mapped into JS as real SharedArrayBuffers.
//
// Node-API has no SharedArrayBuffer constructor in Node 20, so this file alone uses V8's C++
// API: a /dev/shm mapping wrapped in a SharedArrayBuffer backing store gives JS Atomics that
// are exact across processes. The mapping is unmapped when the last JS reference is collected,
// so closing a segment can never leave a dangling view.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "addon.h"
#include "v8_bridge.h"

namespace weft {
namespace {

struct Mapping {
  void* addr;
  size_t len;
};

void Unmap(void* data, size_t length, void* deleter_data) {
  Mapping* m = static_cast<Mapping*>(deleter_data);
  if (m->addr != nullptr && m->addr != MAP_FAILED) munmap(m->addr, m->len);
  delete m;
}

Napi::Value WrapMapping(Napi::Env env, void* addr, size_t len) {
  v8::Isolate* isolate = v8::Isolate::GetCurrent();
  Mapping* m = new Mapping{addr, len};
  std::unique_ptr<v8::BackingStore> store =
      v8::SharedArrayBuffer::NewBackingStore(addr, len, Unmap, m);
  v8::Local<v8::SharedArrayBuffer> sab =
      v8::SharedArrayBuffer::New(isolate, std::shared_ptr<v8::BackingStore>(std::move(store)));
  return Napi::Value(env, ToNapi(sab));
}

bool ValidName(const std::string& name) {
  if (name.size() < 2 || name.size() > 250 || name[0] != '/') return false;
  for (size_t i = 1; i < name.size(); i++) {
    if (name[i] == '/') return false;
  }
  return true;
}

std::string ErrnoText(const char* what, const std::string& name, int err) {
  return std::string(what) + " " + name + ": " + std::strerror(err);
}

const char* ErrnoCode(int err) {
  switch (err) {
    case EEXIST: return "EEXIST";
    case ENOENT: return "ENOENT";
    case EACCES: return "EACCES";
    case ENOSPC: return "ENOSPC";
    case ENOMEM: return "ENOMEM";
    case EMFILE: return "EMFILE";
    default: return "ESHM";
  }
}

// shmCreate(name, size): exclusive create, mode 0600, sized and mapped.
Napi::Value ShmCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsString() || !info[1].IsNumber())
    return Fail(env, "EINVAL", "shmCreate(name: string, size: number)");
  std::string name = info[0].As<Napi::String>().Utf8Value();
  double dsize = info[1].As<Napi::Number>().DoubleValue();
  if (!ValidName(name)) return Fail(env, "EINVAL", "shmCreate: bad segment name " + name);
  if (!(dsize > 0) || dsize > 1099511627776.0)
    return Fail(env, "EINVAL", "shmCreate: size must be in (0, 1 TiB]");
  size_t size = static_cast<size_t>(dsize);
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return Fail(env, ErrnoCode(errno), ErrnoText("shm_open", name, errno));
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    int err = errno;
    close(fd);
    shm_unlink(name.c_str());
    return Fail(env, ErrnoCode(err), ErrnoText("ftruncate", name, err));
  }
  void* addr = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (addr == MAP_FAILED) {
    shm_unlink(name.c_str());
    return Fail(env, ErrnoCode(err), ErrnoText("mmap", name, err));
  }
  return WrapMapping(env, addr, size);
}

// shmOpen(name): map an existing segment at its full size.
Napi::Value ShmOpen(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsString()) return Fail(env, "EINVAL", "shmOpen(name: string)");
  std::string name = info[0].As<Napi::String>().Utf8Value();
  if (!ValidName(name)) return Fail(env, "EINVAL", "shmOpen: bad segment name " + name);
  int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return Fail(env, ErrnoCode(errno), ErrnoText("shm_open", name, errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size <= 0) {
    int err = errno;
    close(fd);
    return Fail(env, "ESHM", ErrnoText("fstat", name, err ? err : EINVAL));
  }
  size_t size = static_cast<size_t>(st.st_size);
  void* addr = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (addr == MAP_FAILED) return Fail(env, ErrnoCode(err), ErrnoText("mmap", name, err));
  return WrapMapping(env, addr, size);
}

// shmUnlink(name): true when removed, false when it was already gone.
Napi::Value ShmUnlink(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsString()) return Fail(env, "EINVAL", "shmUnlink(name: string)");
  std::string name = info[0].As<Napi::String>().Utf8Value();
  if (!ValidName(name)) return Fail(env, "EINVAL", "shmUnlink: bad segment name " + name);
  if (shm_unlink(name.c_str()) == 0) return Napi::Boolean::New(env, true);
  if (errno == ENOENT) return Napi::Boolean::New(env, false);
  return Fail(env, ErrnoCode(errno), ErrnoText("shm_unlink", name, errno));
}

// Segments to unlink when this thread's Node environment ends: a worker_thread terminated
// before its owner's close(), a server that ended on an exception, a normal process exit.
// One set per thread (each environment runs on its own thread, and so do its cleanup hooks).
thread_local std::set<std::string>* unlink_at_exit = nullptr;

void UnlinkAtExit(void*) {
  if (unlink_at_exit == nullptr) return;
  for (const std::string& name : *unlink_at_exit) shm_unlink(name.c_str());
  delete unlink_at_exit;
  unlink_at_exit = nullptr;
}

// shmUnlinkAtExit(name, yes): adds (yes) or removes (!yes) a segment name from the set.
Napi::Value ShmUnlinkAtExit(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsString() || !info[1].IsBoolean())
    return Fail(env, "EINVAL", "shmUnlinkAtExit(name: string, yes: boolean)");
  std::string name = info[0].As<Napi::String>().Utf8Value();
  if (!ValidName(name)) return Fail(env, "EINVAL", "shmUnlinkAtExit: bad segment name " + name);
  if (info[1].As<Napi::Boolean>().Value()) {
    if (unlink_at_exit == nullptr) {
      unlink_at_exit = new std::set<std::string>();
      napi_add_env_cleanup_hook(env, UnlinkAtExit, nullptr);
    }
    unlink_at_exit->insert(name);
  } else if (unlink_at_exit != nullptr) {
    unlink_at_exit->erase(name);
  }
  return env.Undefined();
}

// memcpyBandwidth(bytes, iterations, slots = 1): seconds for `iterations` single-thread memcpy
// calls of `bytes` from one source into `slots` destinations in turn: the yardstick the shm
// provider's streaming (which writes into a ring of slots) is held to.
Napi::Value MemcpyBandwidth(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsNumber() || !info[1].IsNumber())
    return Fail(env, "EINVAL", "memcpyBandwidth(bytes, iterations, slots?)");
  size_t bytes = static_cast<size_t>(info[0].As<Napi::Number>().DoubleValue());
  size_t iters = static_cast<size_t>(info[1].As<Napi::Number>().DoubleValue());
  size_t slots = info.Length() > 2 && info[2].IsNumber() ? static_cast<size_t>(info[2].As<Napi::Number>().DoubleValue()) : 1;
  if (bytes == 0 || iters == 0 || slots == 0 || bytes * slots > (size_t(1) << 32))
    return Fail(env, "EINVAL", "memcpyBandwidth(bytes > 0, iterations > 0, slots > 0; bytes * slots <= 4 GiB)");
  std::vector<char> src(bytes, 1), dst(bytes * slots, 2);
  for (size_t s = 0; s < slots; s++) std::memcpy(dst.data() + s * bytes, src.data(), bytes);
  auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < iters; i++) {
    std::memcpy(dst.data() + (i % slots) * bytes, src.data(), bytes);
    asm volatile("" : : "r"(dst.data()), "r"(src.data()) : "memory");
  }
  auto t1 = std::chrono::steady_clock::now();
  return Napi::Number::New(env, std::chrono::duration<double>(t1 - t0).count());
}

// copyBytes(dst: Uint8Array, dstOffset, src: Uint8Array, srcOffset, length): memcpy between
// views of shared segments. V8 copies SharedArrayBuffer contents with relaxed-atomic word
// loops (~6 GB/s here); large shm transfers come here to run at memcpy speed.
napi_value CopyBytes(napi_env env, napi_callback_info cbinfo) {
  size_t argc = 5;
  napi_value argv[5];
  napi_get_cb_info(env, cbinfo, &argc, argv, nullptr, nullptr);
  void* dst = nullptr;
  void* src = nullptr;
  size_t dlen = 0, slen = 0;
  napi_typedarray_type dt, st;
  double doff = -1, soff = -1, len = -1;
  if (argc < 5 || napi_get_typedarray_info(env, argv[0], &dt, &dlen, &dst, nullptr, nullptr) != napi_ok ||
      napi_get_typedarray_info(env, argv[2], &st, &slen, &src, nullptr, nullptr) != napi_ok ||
      dt != napi_uint8_array || st != napi_uint8_array ||
      napi_get_value_double(env, argv[1], &doff) != napi_ok || napi_get_value_double(env, argv[3], &soff) != napi_ok ||
      napi_get_value_double(env, argv[4], &len) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", "copyBytes(dst: Uint8Array, dstOffset, src: Uint8Array, srcOffset, length)");
    return nullptr;
  }
  if (!(doff >= 0 && soff >= 0 && len >= 0) || doff + len > static_cast<double>(dlen) || soff + len > static_cast<double>(slen)) {
    napi_throw_range_error(env, "ERANGE", "copyBytes: range outside the views");
    return nullptr;
  }
  std::memmove(static_cast<char*>(dst) + static_cast<size_t>(doff), static_cast<char*>(src) + static_cast<size_t>(soff), static_cast<size_t>(len));
  return nullptr;
}

}  // namespace

void InitShm(Napi::Env env, Napi::Object exports) {
  napi_value copy;
  napi_create_function(env, "copyBytes", NAPI_AUTO_LENGTH, CopyBytes, nullptr, &copy);
  exports.Set("copyBytes", Napi::Value(env, copy));
  exports.Set("shmCreate", Napi::Function::New(env, ShmCreate, "shmCreate"));
  exports.Set("shmOpen", Napi::Function::New(env, ShmOpen, "shmOpen"));
  exports.Set("shmUnlink", Napi::Function::New(env, ShmUnlink, "shmUnlink"));
  exports.Set("shmUnlinkAtExit", Napi::Function::New(env, ShmUnlinkAtExit, "shmUnlinkAtExit"));
  exports.Set("memcpyBandwidth", Napi::Function::New(env, MemcpyBandwidth, "memcpyBandwidth"));
}

}  // namespace weft
