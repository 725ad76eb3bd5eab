// Process facts: is a pid alive, and when did it start (to tell a restarted pid from the
// original owner of a segment or a connection); the core to run on; signal handlers kept
// across loading a library that installs its own.
#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "addon.h"

namespace weft {
namespace {

// Reads /proc/<pid>/stat; returns false when the process is gone. Zombies count as gone:
// a SIGKILLed child stays a zombie until reaped, but it will never touch memory again.
bool ReadStatFile(const char* path, char* state, unsigned long long* start) {
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return false;
  char buf[1024];
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = 0;
  // The command name may hold spaces and parentheses: fields resume after the last ')'.
  char* p = std::strrchr(buf, ')');
  if (p == nullptr || p + 2 >= buf + n) return false;
  p += 2;
  *state = *p;
  // Field 3 is the state; starttime is field 22.
  int field = 3;
  while (*p && field < 22) {
    if (*p == ' ') field++;
    p++;
  }
  *start = std::strtoull(p, nullptr, 10);
  return true;
}

bool ReadStat(int pid, char* state, unsigned long long* start) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  return ReadStatFile(path, state, start);
}

// The state letter of a live process (not a zombie) that started at `want` ticks (want < 0:
// any start), or 0 when there is none: the one liveness test of processAlive, processState
// and the launcher watchdog. kill(pid, 0) first: it is cheaper than reading /proc.
char LiveState(int pid, double want) {
  if (pid <= 0 || (kill(pid, 0) != 0 && errno != EPERM)) return 0;
  char state = 0;
  unsigned long long start = 0;
  if (!ReadStat(pid, &state, &start) || state == 'Z' || state == 'X') return 0;
  if (want >= 0 && static_cast<double>(start) != want) return 0;
  return state;
}

double OptionalStart(const Napi::CallbackInfo& info) {
  return info.Length() >= 2 && info[1].IsNumber() ? info[1].As<Napi::Number>().DoubleValue() : -1;
}

// processStartTime(pid): start time in clock ticks since boot, or -1 when dead or a zombie.
Napi::Value ProcessStartTime(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) return Fail(env, "EINVAL", "processStartTime(pid: number)");
  int pid = info[0].As<Napi::Number>().Int32Value();
  char state = 0;
  unsigned long long start = 0;
  if (pid <= 0 || !ReadStat(pid, &state, &start) || state == 'Z' || state == 'X')
    return Napi::Number::New(env, -1);
  return Napi::Number::New(env, static_cast<double>(start));
}

// processAlive(pid, startTime?): the pid exists, is not a zombie, and (if given) started
// at startTime, so a recycled pid is not mistaken for the original process.
Napi::Value ProcessAlive(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) return Fail(env, "EINVAL", "processAlive(pid: number, startTime?: number)");
  return Napi::Boolean::New(env, LiveState(info[0].As<Napi::Number>().Int32Value(), OptionalStart(info)) != 0);
}

// processState(pid, startTime?): the state letter of /proc/<pid>/stat ("R", "S", "D", "T"
// stopped by a signal, "t" stopped by a tracer, ...), or "" when the process is gone, a
// zombie, or (startTime given) another process under a recycled pid. A timeout names a
// stopped rank with it: the others all wait for that one, each through its neighbour.
Napi::Value ProcessState(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) return Fail(env, "EINVAL", "processState(pid: number, startTime?: number)");
  char state = LiveState(info[0].As<Napi::Number>().Int32Value(), OptionalStart(info));
  return Napi::String::New(env, state ? std::string(1, state) : std::string());
}

// Unlinks this process's shared memory: weft's segments (`weft.<job>.<pid>.<start>.*`) and
// libfabric shm regions (`<pid>:<domain>:<ep>`).
void UnlinkOwnSegments() {
  char state = 0;
  unsigned long long start = 0;
  int pid = getpid();
  if (!ReadStat(pid, &state, &start)) return;
  char mine[64];
  std::snprintf(mine, sizeof(mine), ".%d.%llu.", pid, start);
  char fabric[32];
  std::snprintf(fabric, sizeof(fabric), "%d:", pid);
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return;
  std::string names;
  while (dirent* e = readdir(d)) {
    const char* n = e->d_name;
    bool weft = std::strncmp(n, "weft.", 5) == 0 && std::strstr(n, mine) != nullptr;
    bool fab = std::strncmp(n, fabric, std::strlen(fabric)) == 0;
    if (weft || fab) names += std::string("/") + n + '\n';
  }
  closedir(d);
  size_t at = 0;
  while (at < names.size()) {
    size_t end = names.find('\n', at);
    shm_unlink(names.substr(at, end - at).c_str());
    at = end + 1;
  }
}

// watchLauncher(pid, startTime, graceMs): a thread that checks every 100 ms that the launcher
// lives. Once it is gone, JS gets graceMs to exit on its own (its own watcher closes the devices);
// a rank whose event loop is blocked (a loop of *Sync collectives never yields to timers)
// cannot, so the thread then unlinks this process's shared memory and ends it. Without this a
// rank in a sync loop outlived a SIGKILLed launcher forever, with its segments.
std::atomic<bool> watching{false};
Napi::Value WatchLauncher(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 3 || !info[0].IsNumber() || !info[1].IsNumber() || !info[2].IsNumber()) return Fail(env, "EINVAL", "watchLauncher(pid: number, startTime: number, graceMs: number)");
  int pid = info[0].As<Napi::Number>().Int32Value();
  double want = info[1].As<Napi::Number>().DoubleValue();
  int graceMs = info[2].As<Napi::Number>().Int32Value();
  if (graceMs < 0) graceMs = 0;
  if (graceMs > 60000) graceMs = 60000;
  if (pid <= 0 || watching.exchange(true)) return Napi::Boolean::New(env, false);
  std::thread([pid, want, graceMs]() {
    for (;;) {
      usleep(100 * 1000);
      if (LiveState(pid, want) != 0) continue;
      for (int slept = 0; slept < graceMs; slept += 100) usleep(100 * 1000);
      UnlinkOwnSegments();
      char msg[160];
      int n = std::snprintf(msg, sizeof(msg), "weft: the launcher (pid %d) is gone and this rank (pid %d) did not exit on its own (a blocked event loop); it exits\n", pid, getpid());
      if (n > 0) (void)!write(2, msg, static_cast<size_t>(n));
      _exit(1);
    }
  }).detach();
  return Napi::Boolean::New(env, true);
}

// threadIdentity(): [pid, tid, start time of the calling thread in clock ticks]: who owns a
// slot of a shared ring, so that a worker_thread that died holding it can be told from a slow
// one (the pid alone stays alive when a worker is terminated).
Napi::Value ThreadIdentity(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int pid = getpid();
  int tid = static_cast<int>(syscall(SYS_gettid));
  char path[96];
  std::snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", pid, tid);
  char state = 0;
  unsigned long long start = 0;
  if (!ReadStatFile(path, &state, &start)) return Fail(env, "ESYS", "threadIdentity: cannot read /proc/self/task");
  Napi::Array out = Napi::Array::New(env, 3);
  out.Set(0u, Napi::Number::New(env, pid));
  out.Set(1u, Napi::Number::New(env, tid));
  out.Set(2u, Napi::Number::New(env, static_cast<double>(start)));
  return out;
}

// threadAlive(pid, tid, startTime): that thread still runs (not exited, not a zombie, not a
// recycled tid) in a live process.
Napi::Value ThreadAlive(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 3 || !info[0].IsNumber() || !info[1].IsNumber() || !info[2].IsNumber())
    return Fail(env, "EINVAL", "threadAlive(pid: number, tid: number, startTime: number)");
  int pid = info[0].As<Napi::Number>().Int32Value();
  int tid = info[1].As<Napi::Number>().Int32Value();
  double want = info[2].As<Napi::Number>().DoubleValue();
  if (pid <= 0 || tid <= 0 || LiveState(pid, -1) == 0) return Napi::Boolean::New(env, false);
  char path[96];
  std::snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", pid, tid);
  char state = 0;
  unsigned long long start = 0;
  bool alive = ReadStatFile(path, &state, &start) && state != 'Z' && state != 'X' && static_cast<double>(start) == want;
  return Napi::Boolean::New(env, alive);
}

// yieldThread(): gives the core to another runnable process (oversubscribed ranks).
napi_value YieldThread(napi_env env, napi_callback_info info) {
  sched_yield();
  return nullptr;
}

}  // namespace

// bindToCpu(cpu): pins the calling thread (the JS thread) to one CPU; false if refused.
// Ranks that share a core with a spinning peer wait a scheduler slice (~150 us) per hand-off.
Napi::Value BindToCpu(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) {
    Napi::TypeError::New(env, "bindToCpu(cpu): cpu must be a number").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  int cpu = info[0].As<Napi::Number>().Int32Value();
  if (cpu < 0 || cpu >= CPU_SETSIZE) return Napi::Boolean::New(env, false);
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return Napi::Boolean::New(env, sched_setaffinity(0, sizeof(set), &set) == 0);
}

// keepSignalHandlers(fn): calls fn() and puts back every signal disposition it changed.
// Loading libfabric on Debian loads libinfinipath, whose constructor installs handlers for
// SIGTERM, SIGINT, SIGSEGV, SIGBUS, SIGILL and SIGABRT that call exit() inside the handler:
// a SIGTERMed rank then exits 1 instead of dying by the signal, skips the launcher's cleanup
// of killed ranks, and can deadlock on the exit lock. weft loads its fabric addon through here.
Napi::Value KeepSignalHandlers(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsFunction()) return Fail(env, "EINVAL", "keepSignalHandlers(fn: () => T)");
  struct sigaction saved[NSIG];
  bool have[NSIG] = {};
  for (int s = 1; s < NSIG; s++) {
    if (s == SIGKILL || s == SIGSTOP) continue;
    have[s] = sigaction(s, nullptr, &saved[s]) == 0;
  }
  Napi::Value result = info[0].As<Napi::Function>().Call({});
  for (int s = 1; s < NSIG; s++) {
    if (have[s]) sigaction(s, &saved[s], nullptr);
  }
  if (env.IsExceptionPending()) return env.Undefined();
  return result;
}

void InitProc(Napi::Env env, Napi::Object exports) {
  exports.Set("keepSignalHandlers", Napi::Function::New(env, KeepSignalHandlers, "keepSignalHandlers"));
  exports.Set("bindToCpu", Napi::Function::New(env, BindToCpu, "bindToCpu"));
  exports.Set("processStartTime", Napi::Function::New(env, ProcessStartTime, "processStartTime"));
  exports.Set("processAlive", Napi::Function::New(env, ProcessAlive, "processAlive"));
  exports.Set("watchLauncher", Napi::Function::New(env, WatchLauncher, "watchLauncher"));
  exports.Set("processState", Napi::Function::New(env, ProcessState, "processState"));
  exports.Set("threadIdentity", Napi::Function::New(env, ThreadIdentity, "threadIdentity"));
  exports.Set("threadAlive", Napi::Function::New(env, ThreadAlive, "threadAlive"));
  napi_value fn;
  napi_create_function(env, "yieldThread", NAPI_AUTO_LENGTH, YieldThread, nullptr, &fn);
  exports.Set("yieldThread", Napi::Value(env, fn));
}

}  // namespace weft
