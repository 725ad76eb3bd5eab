/*
 * tcp-link: the bare link between two emulated hosts, for `weft bench collectives --hosts`.
 *
 * One process per host, one TCP connection between them. For each size S, both sides send S
 * bytes and receive S bytes at once, from and into plain heap buffers: what any allreduce of S
 * bytes between two hosts must move at least (each host needs S bytes' worth of the other's
 * partial sums, and sends as much), with no reduction, no copies and no protocol. Its time is
 * an estimate of the floor of a 2-host allreduce on this link, measured in the same run (not a
 * bound: a better socket loop, or a faster minute of a shared machine, does better).
 *
 * The client prints one JSON row per size (system "floor", provider "tcp-link", np 2): the
 * median, minimum and p90 over iterations of the slower side's time.
 *
 *   tcp-link --role server|client --addr A --port P --sizes 1048576,... [--iters 9]
 *            [--warmup 2] [--timeout-ms 60000]
 *
 * Each side sends from a thread of its own while its main thread receives, both blocking, in
 * pieces of 1 MiB: of the loops tried on 2 emulated hosts (2026-12-06, medians of 4 rounds, 16
 * MiB each way), this took 13.4 ms where one thread polling the socket took 18.6-20.0 ms (64
 * KiB, 1 MiB or whole-buffer writes), and 3.9 ms against 4.6-4.8 at 4 MiB. Between sweeps the
 * machine moves it more than that: 14.9 ms (the polling loop) in one, 19.3 ms in the next.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PIECE (1024 * 1024)
#define MAX_SIZES 64

static const char* g_role = "?";
static double g_deadline_ms;

static void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "tcp-link (%s): ", g_role);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(1);
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int remaining_ms(void) {
  double left = g_deadline_ms - now_ms();
  if (left <= 0) die("timed out (--timeout-ms); is the peer running and reachable?");
  return left > 1000 ? 1000 : (int)left + 1;
}

static int sock_setup(int s) {
  int one = 1;
  // Blocking calls wake at least once a second, so the deadline is checked.
  struct timeval slice = {1, 0};
  if (setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) return -1;
  if (setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &slice, sizeof slice) != 0) return -1;
  return setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &slice, sizeof slice);
}

static int connect_peer(const char* role, const struct sockaddr_in* a) {
  if (strcmp(role, "server") == 0) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(l, (const struct sockaddr*)a, sizeof *a) != 0) die("bind: %s", strerror(errno));
    if (listen(l, 1) != 0) die("listen: %s", strerror(errno));
    for (;;) {
      struct pollfd p = {l, POLLIN, 0};
      if (poll(&p, 1, remaining_ms()) > 0) break;
    }
    int s = accept(l, NULL, NULL);
    if (s < 0) die("accept: %s", strerror(errno));
    close(l);
    return s;
  }
  for (;;) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct timeval slice = {1, 0};  // a connect to an unreachable host gives up after a second
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &slice, sizeof slice);
    if (connect(s, (const struct sockaddr*)a, sizeof *a) == 0) return s;
    close(s);
    remaining_ms();
    usleep(20000);
  }
}

/* The sending thread: waits for a job, sends it whole, reports. */
static struct {
  int sock;
  const char* buf;
  size_t n;
  int err;  // errno of a failed send, 0 when all went
  int quit;
  sem_t go, done;
} g_tx;

static void* sender(void* unused) {
  (void)unused;
  for (;;) {
    sem_wait(&g_tx.go);
    if (g_tx.quit) return NULL;
    g_tx.err = 0;
    for (size_t sent = 0; sent < g_tx.n;) {
      size_t m = g_tx.n - sent < PIECE ? g_tx.n - sent : PIECE;
      // The deadline on every pass: a peer reading a trickle must not keep this going.
      if (now_ms() > g_deadline_ms) {
        g_tx.err = ETIMEDOUT;
        break;
      }
      ssize_t w = send(g_tx.sock, g_tx.buf + sent, m, MSG_NOSIGNAL);
      if (w > 0) sent += (size_t)w;
      else if (w == 0 || (errno != EAGAIN && errno != EINTR)) {
        g_tx.err = w < 0 ? errno : EPIPE;
        break;
      }
    }
    sem_post(&g_tx.done);
  }
}

/* Sends `n` bytes of `out` (the sending thread) and receives `n` into `in` at once. */
static void exchange(int s, const char* out, char* in, size_t n) {
  g_tx.sock = s;
  g_tx.buf = out;
  g_tx.n = n;
  sem_post(&g_tx.go);
  for (size_t got = 0; got < n;) {
    remaining_ms();  // dies past the deadline
    ssize_t r = recv(s, in + got, n - got, 0);
    if (r > 0) got += (size_t)r;
    else if (r == 0) die("the peer closed the connection after %zu of %zu bytes", got, n);
    else if (errno != EAGAIN && errno != EINTR) die("recv: %s", strerror(errno));
  }
  sem_wait(&g_tx.done);
  if (g_tx.err == ETIMEDOUT) remaining_ms();
  if (g_tx.err) die("send: %s", strerror(g_tx.err));
}

/* Byte i of what side `who` sends: not periodic in 256, so a shifted stream fails the check. */
static unsigned char pattern(size_t i, unsigned char who) {
  return (unsigned char)(i * 7 + (i >> 8) * 13 + who);
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  const char* addr = NULL;
  int port = 0, iters = 9, warmup = 2;
  double timeout_ms = 60000;
  size_t sizes[MAX_SIZES];
  int nsizes = 0;
  for (int i = 1; i < argc; i += 2) {
    const char* k = argv[i];
    if (i + 1 >= argc) die("flag %s has no value", k);
    const char* v = argv[i + 1];
    if (!strcmp(k, "--role")) g_role = v;
    else if (!strcmp(k, "--addr")) addr = v;
    else if (!strcmp(k, "--port")) port = atoi(v);
    else if (!strcmp(k, "--iters")) iters = atoi(v);
    else if (!strcmp(k, "--warmup")) warmup = atoi(v);
    else if (!strcmp(k, "--timeout-ms")) timeout_ms = atof(v);
    else if (!strcmp(k, "--sizes")) {
      for (char* tok = strtok((char*)v, ","); tok; tok = strtok(NULL, ",")) {
        if (nsizes == MAX_SIZES) die("at most %d sizes", MAX_SIZES);
        sizes[nsizes++] = strtoull(tok, NULL, 10);
      }
    } else die("unknown flag %s", k);
  }
  int server = strcmp(g_role, "server") == 0;
  if ((!server && strcmp(g_role, "client") != 0) || !addr || port <= 0 || port > 65535 || iters < 1 || warmup < 0 || nsizes == 0)
    die("usage: tcp-link --role server|client --addr A --port P --sizes S1,S2 [--iters 9] [--warmup 2] [--timeout-ms 60000]");
  for (int i = 0; i < nsizes; i++) if (sizes[i] == 0) die("sizes must be positive");
  g_deadline_ms = now_ms() + timeout_ms;
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  if (inet_pton(AF_INET, addr, &a.sin_addr) != 1) die("--addr %s is not an IPv4 address", addr);
  int s = connect_peer(g_role, &a);
  if (sock_setup(s) != 0) die("socket options: %s", strerror(errno));
  pthread_t tx;
  sem_init(&g_tx.go, 0, 0);
  sem_init(&g_tx.done, 0, 0);
  if (pthread_create(&tx, NULL, sender, NULL) != 0) die("pthread_create failed");
  const unsigned char me = server ? 1 : 2, them = server ? 2 : 1;
  double* times = malloc(sizeof(double) * (size_t)iters);
  for (int z = 0; z < nsizes; z++) {
    size_t n = sizes[z];
    char* out = malloc(n);
    char* in = malloc(n);
    if (!out || !in || !times) die("out of memory for %zu bytes", n);
    for (size_t i = 0; i < n; i++) out[i] = (char)pattern(i, me);
    for (int it = 0; it < warmup + iters; it++) {
      memset(in, 0, n);  // so each iteration's check sees this iteration's bytes
      char x = 0, y;
      exchange(s, &x, &y, 1);  // both sides start together
      double t0 = now_ms();
      exchange(s, out, in, n);
      double mine = now_ms() - t0, theirs;
      exchange(s, (const char*)&mine, (char*)&theirs, sizeof mine);
      if (it >= warmup) times[it - warmup] = mine > theirs ? mine : theirs;
      for (size_t i = 0; i < n; i++)
        if ((unsigned char)in[i] != pattern(i, them)) die("byte %zu of %zu arrived wrong in iteration %d", i, n, it);
    }
    qsort(times, (size_t)iters, sizeof(double), cmp_double);
    if (!server) {
      int p90 = (iters * 9 + 9) / 10 - 1;
      // The median as bench/lib/stats.ts takes it: the mean of the middle two for an even count.
      double median = iters % 2 ? times[iters / 2] : (times[iters / 2 - 1] + times[iters / 2]) / 2;
      printf("{\"system\":\"floor\",\"op\":\"allreduce\",\"np\":2,\"provider\":\"tcp-link\",\"bytes\":%zu,\"iters\":%d,\"median_us\":%.3f,\"min_us\":%.3f,\"p90_us\":%.3f,"
             "\"impl\":\"%zu bytes each way at once over one TCP connection between two hosts (C, a sending thread, 1 MiB writes)\"}\n",
             n, iters, median * 1e3, times[0] * 1e3, times[p90 < 0 ? 0 : p90] * 1e3, n);
      fflush(stdout);
    }
    free(out);
    free(in);
  }
  free(times);
  g_tx.quit = 1;
  sem_post(&g_tx.go);
  pthread_join(tx, NULL);
  close(s);
  return 0;
}
