#include "fd_relay.h"

#include <linux/futex.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>

namespace weft {

namespace {

// Holds a pthread mutex for a scope.
class Locked {
 public:
  explicit Locked(pthread_mutex_t* m) : m_(m) { pthread_mutex_lock(m_); }
  ~Locked() { pthread_mutex_unlock(m_); }

 private:
  pthread_mutex_t* m_;
};

void Kick(int fd) {
  uint64_t one = 1;
  (void)!write(fd, &one, sizeof(one));
}

}  // namespace

bool FdRelay::Arm(int fd, int32_t* word) {
  bool kick = false;
  {
    Locked lk(&mu_);
    if (stop_) return false;
    if (!started_) {
      kick_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
      if (kick_ < 0) return false;
      if (pthread_create(&thread_, nullptr, &FdRelay::Main, this) != 0) {
        close(kick_);
        kick_ = -1;
        return false;
      }
      started_ = true;
    }
    if (word_ == word && fd_ == fd) return true;  // already armed: the helper polls it
    kick = word_ != nullptr;                       // it polls another fd: make it re-read
    fd_ = fd;
    word_ = word;
    pthread_cond_signal(&cv_);
  }
  if (kick) Kick(kick_);
  return true;
}

void FdRelay::Stop() {
  {
    Locked lk(&mu_);
    bool running = started_ && !stop_;
    stop_ = true;
    word_ = nullptr;
    if (!running) return;
    pthread_cond_signal(&cv_);
  }
  Kick(kick_);
  pthread_join(thread_, nullptr);
  close(kick_);
  kick_ = -1;
}

void* FdRelay::Main(void* self) {
  static_cast<FdRelay*>(self)->Run();
  return nullptr;
}

void FdRelay::Run() {
  for (;;) {
    int fd;
    int32_t* word;
    {
      Locked lk(&mu_);
      while (!stop_ && word_ == nullptr) pthread_cond_wait(&cv_, &mu_);
      if (stop_) return;
      fd = fd_;
      word = word_;
    }
    pollfd p[2] = {{fd, POLLIN, 0}, {kick_, POLLIN, 0}};
    if (::poll(p, 2, -1) <= 0) continue;  // EINTR: look at the state again
    if (p[1].revents & POLLIN) {
      uint64_t n;
      (void)!read(kick_, &n, sizeof(n));
      continue;  // re-armed on another fd, or stopping
    }
    if (!(p[0].revents & (POLLIN | POLLERR | POLLHUP))) continue;
    Locked lk(&mu_);
    // Ring only if still armed on the same word: Stop or a re-arm may have raced the poll.
    if (word_ == word && fd_ == fd && !stop_) {
      word_ = nullptr;
      __atomic_add_fetch(word, 1, __ATOMIC_SEQ_CST);
      syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
      __atomic_add_fetch(&rings_, 1, __ATOMIC_RELAXED);
    }
  }
}

}  // namespace weft
