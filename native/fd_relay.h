// FdRelay: rings a futex word of a shared segment when a file descriptor becomes readable.
//
// A thread that waits for two things at once (the shm provider's futex doorbell and
// libfabric's CQ wait fd, in a device over both) can block on only one of them. It sleeps on
// the futex and arms this relay on the fd: a helper thread polls the fd and, once it is
// readable, adds 1 to the word and wakes its waiters, then disarms itself until the next Arm.
// The helper starts on the first Arm and is joined by Stop (before the fd or the segment goes).
#pragma once

#include <pthread.h>

#include <cstdint>

namespace weft {

class FdRelay {
 public:
  FdRelay() = default;
  FdRelay(const FdRelay&) = delete;
  FdRelay& operator=(const FdRelay&) = delete;
  ~FdRelay() { Stop(); }

  // Until the next readable event on fd: ring `word` (a futex in shared memory) then disarm.
  // False when the helper thread cannot be started (the caller then sleeps in short slices).
  bool Arm(int fd, int32_t* word);
  // Disarms and joins the helper; no ring happens after this returns.
  void Stop();
  // Rings so far (tests read it: a sleeper woke through the relay).
  uint64_t rings() const { return __atomic_load_n(&rings_, __ATOMIC_RELAXED); }

 private:
  void Run();
  static void* Main(void* self);

  // pthreads, not std::thread: the addon builds without exceptions, and a thread that cannot
  // start must be a false return, not an abort.
  pthread_mutex_t mu_ = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cv_ = PTHREAD_COND_INITIALIZER;
  pthread_t thread_{};
  int kick_ = -1;  // eventfd: wakes the helper out of poll() (re-arm to another fd, stop)
  int fd_ = -1;
  int32_t* word_ = nullptr;
  bool started_ = false;
  bool stop_ = false;
  uint64_t rings_ = 0;
};

}  // namespace weft
