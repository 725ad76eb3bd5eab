/*
 * mpi-bench: the MPI side of `weft bench collectives`. Run under mpirun (bench/peers/index.ts
 * chooses the BTLs: self,vader for shared memory, self,tcp over lo for tcp). Built on demand
 * with mpicc -O2.
 *
 * Usage: mpirun -np N mpi-bench [--provider LABEL]
 *                   [--ops allreduce,broadcast,allgather,reduce_scatter,barrier]
 *                   [--sizes 8,1048576,...] [--iters K] [--warmup W] [--byte-budget B]
 *
 * Same protocol as gloo-bench.cc: sizes are nccl-tests' per-rank buffer totals in float32
 * (allreduce, broadcast: the buffer; allgather: the receive buffer; reduce_scatter: the send
 * buffer), rounded down to whole elements per rank, at least one. Per size: one checked run
 * on rank-dependent data (exit 2 when wrong), W warmup runs, K timed runs of
 * `MPI_Barrier; t0; op; t1`, per-iteration times MAX-reduced across ranks, and rank 0 prints
 * one JSON line per (op, size). --byte-budget B caps timed runs at max(3, B / bytes) and
 * warmup at max(1, B / bytes).
 */
#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LIST 64

struct args {
  const char *provider;
  char ops[MAX_LIST][32];
  int nops;
  size_t sizes[MAX_LIST];
  int nsizes;
  int iters;
  int warmup;
  size_t byte_budget;
};

static int g_rank, g_np;

static void die(int code, const char *fmt, const char *a, const char *b) {
  fprintf(stderr, "mpi-bench: rank %d: ", g_rank);
  fprintf(stderr, fmt, a, b);
  fputc('\n', stderr);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  exit(code);
}

static long parse_long(const char *flag, const char *v) {
  char *end = NULL;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0') die(1, "bad value for %s: '%s'", flag, v);
  return x;
}

static int known_op(const char *op) {
  return !strcmp(op, "allreduce") || !strcmp(op, "broadcast") || !strcmp(op, "allgather") ||
         !strcmp(op, "reduce_scatter") || !strcmp(op, "barrier");
}

static void parse_args(int argc, char **argv, struct args *a) {
  memset(a, 0, sizeof *a);
  a->provider = "unknown";
  strcpy(a->ops[0], "allreduce");
  a->nops = 1;
  a->sizes[0] = 8;
  a->sizes[1] = 1 << 20;
  a->nsizes = 2;
  a->iters = 20;
  a->warmup = 5;
  for (int i = 1; i < argc; i++) {
    const char *flag = argv[i];
    if (i + 1 >= argc) die(1, "missing value after %s%s", flag, "");
    char *v = argv[++i];
    if (!strcmp(flag, "--provider")) {
      a->provider = v;
    } else if (!strcmp(flag, "--ops") || !strcmp(flag, "--sizes")) {
      int is_ops = !strcmp(flag, "--ops");
      int n = 0;
      for (char *tok = strtok(v, ","); tok; tok = strtok(NULL, ",")) {
        if (n == MAX_LIST) die(1, "too many entries in %s%s", flag, "");
        if (is_ops) {
          if (!known_op(tok) || strlen(tok) >= sizeof a->ops[0]) die(1, "unknown op %s%s (allreduce, broadcast, allgather, reduce_scatter, barrier)", tok, "");
          strcpy(a->ops[n++], tok);
        } else {
          long b = parse_long(flag, tok);
          if (b <= 0) die(1, "sizes must be positive: %s%s", tok, "");
          a->sizes[n++] = (size_t)b;
        }
      }
      if (is_ops) a->nops = n;
      else a->nsizes = n;
    } else if (!strcmp(flag, "--iters")) {
      a->iters = (int)parse_long(flag, v);
    } else if (!strcmp(flag, "--warmup")) {
      a->warmup = (int)parse_long(flag, v);
    } else if (!strcmp(flag, "--byte-budget")) {
      a->byte_budget = (size_t)parse_long(flag, v);
    } else {
      die(1, "unknown flag %s%s", flag, "");
    }
  }
  if (a->iters < 1 || a->warmup < 0) die(1, "need --iters >= 1 and --warmup >= 0%s%s", "", "");
}

/* Rank-dependent test data: small integers, exact in float32 sums. */
static float value(int rank, size_t i) { return (float)((rank + 1) * (int)((i % 61) + 1)); }

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

static float *xmalloc_floats(size_t n) {
  float *p = malloc(n * sizeof(float));
  if (!p) die(1, "out of memory%s%s", "", "");
  return p;
}

struct kase {
  const char *op;
  size_t n;   /* allreduce/broadcast: elements; allgather/reduce_scatter: elements per rank */
  size_t bytes;
  const char *impl;
  float *in, *out;
};

static void reset(struct kase *c) {
  if (!strcmp(c->op, "allreduce")) {
    for (size_t i = 0; i < c->n; i++) c->in[i] = value(g_rank, i);
  } else if (!strcmp(c->op, "broadcast")) {
    for (size_t i = 0; i < c->n; i++) c->out[i] = g_rank == 0 ? value(0, i) : -1.f;
  } else if (!strcmp(c->op, "allgather")) {
    for (size_t i = 0; i < c->n; i++) c->in[i] = value(g_rank, i);
  } else if (!strcmp(c->op, "reduce_scatter")) {
    for (size_t i = 0; i < c->n * g_np; i++) c->in[i] = value(g_rank, i);
  }
}

static void run(struct kase *c) {
  int rc = MPI_SUCCESS;
  if (!strcmp(c->op, "allreduce")) rc = MPI_Allreduce(c->in, c->out, (int)c->n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  else if (!strcmp(c->op, "broadcast")) rc = MPI_Bcast(c->out, (int)c->n, MPI_FLOAT, 0, MPI_COMM_WORLD);
  else if (!strcmp(c->op, "allgather")) rc = MPI_Allgather(c->in, (int)c->n, MPI_FLOAT, c->out, (int)c->n, MPI_FLOAT, MPI_COMM_WORLD);
  else if (!strcmp(c->op, "reduce_scatter")) rc = MPI_Reduce_scatter_block(c->in, c->out, (int)c->n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  else rc = MPI_Barrier(MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) die(1, "%s failed%s", c->op, "");
}

/* Returns 0 when right; otherwise prints the first wrong element and returns 1. */
static int check(struct kase *c) {
  const int tri = g_np * (g_np + 1) / 2;
  size_t count = 0;
  if (!strcmp(c->op, "allreduce") || !strcmp(c->op, "broadcast")) count = c->n;
  else if (!strcmp(c->op, "allgather")) count = c->n * g_np;
  else if (!strcmp(c->op, "reduce_scatter")) count = c->n;
  for (size_t i = 0; i < count; i++) {
    float want;
    if (!strcmp(c->op, "allreduce")) want = (float)(tri * (int)((i % 61) + 1));
    else if (!strcmp(c->op, "broadcast")) want = value(0, i);
    else if (!strcmp(c->op, "allgather")) want = value((int)(i / c->n), i % c->n);
    else want = (float)(tri * (int)(((g_rank * c->n + i) % 61) + 1));
    if (c->out[i] != want) {
      fprintf(stderr, "mpi-bench: rank %d: %s of %zu bytes is wrong: element %zu is %g, expected %g\n", g_rank, c->op, c->bytes, i, (double)c->out[i], (double)want);
      return 1;
    }
  }
  return 0;
}

static void run_case(const struct args *a, const char *op, size_t requested) {
  struct kase c = {.op = op};
  if (!strcmp(op, "allreduce") || !strcmp(op, "broadcast")) {
    c.n = requested / sizeof(float) > 0 ? requested / sizeof(float) : 1;
    c.bytes = c.n * sizeof(float);
    c.in = xmalloc_floats(c.n);
    c.out = xmalloc_floats(c.n);
    c.impl = !strcmp(op, "allreduce") ? "MPI_Allreduce(MPI_FLOAT, MPI_SUM)" : "MPI_Bcast(MPI_FLOAT), root 0";
  } else if (!strcmp(op, "allgather") || !strcmp(op, "reduce_scatter")) {
    size_t per = requested / (sizeof(float) * g_np);
    c.n = per > 0 ? per : 1;
    c.bytes = c.n * g_np * sizeof(float);
    int ag = !strcmp(op, "allgather");
    c.in = xmalloc_floats(ag ? c.n : c.n * g_np);
    c.out = xmalloc_floats(ag ? c.n * g_np : c.n);
    c.impl = ag ? "MPI_Allgather(MPI_FLOAT)" : "MPI_Reduce_scatter_block(MPI_FLOAT, MPI_SUM)";
  } else {
    c.bytes = 0;
    c.impl = "MPI_Barrier";
  }
  int iters = a->iters, warmup = a->warmup;
  if (a->byte_budget > 0 && c.bytes > 0) {
    size_t fit = a->byte_budget / c.bytes;
    if ((size_t)iters > fit) iters = fit < 3 ? 3 : (int)fit;
    if ((size_t)warmup > fit) warmup = fit < 1 ? 1 : (int)fit;
  }

  /* Checked run on fresh data. */
  reset(&c);
  MPI_Barrier(MPI_COMM_WORLD);
  run(&c);
  if (check(&c)) {
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  for (int i = 0; i < warmup; i++) run(&c);

  double *us = malloc(sizeof(double) * iters);
  double *maxed = malloc(sizeof(double) * iters);
  if (!us || !maxed) die(1, "out of memory%s%s", "", "");
  for (int i = 0; i < iters; i++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    run(&c);
    double t1 = MPI_Wtime();
    us[i] = (t1 - t0) * 1e6;
  }
  MPI_Allreduce(us, maxed, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (g_rank == 0) {
    qsort(maxed, iters, sizeof(double), cmp_double);
    double median = iters % 2 ? maxed[iters / 2] : (maxed[iters / 2 - 1] + maxed[iters / 2]) / 2;
    int p90 = (int)ceil(0.9 * iters) - 1;
    printf("{\"system\":\"openmpi\",\"op\":\"%s\",\"np\":%d,\"provider\":\"%s\",\"bytes\":%zu,\"iters\":%d,"
           "\"median_us\":%.3f,\"min_us\":%.3f,\"p90_us\":%.3f,\"impl\":\"%s\"}\n",
           op, g_np, a->provider, c.bytes, iters, median, maxed[0], maxed[p90], c.impl);
    fflush(stdout);
  }
  free(us);
  free(maxed);
  free(c.in);
  free(c.out);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_np);
  struct args a;
  parse_args(argc, argv, &a);
  for (int o = 0; o < a.nops; o++) {
    if (!strcmp(a.ops[o], "barrier")) {
      run_case(&a, a.ops[o], 0);
      continue;
    }
    for (int s = 0; s < a.nsizes; s++) run_case(&a, a.ops[o], a.sizes[s]);
  }
  MPI_Finalize();
  return 0;
}
