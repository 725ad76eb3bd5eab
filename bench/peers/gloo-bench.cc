// gloo-bench: the Gloo side of `weft bench collectives`. One process per rank, Gloo's tcp
// transport on 127.0.0.1, rendezvous through a FileStore (under a PrefixStore) in a directory
// the launcher creates. Built on demand by bench/peers/index.ts (g++ -O2 ... -lgloo).
//
// Usage: gloo-bench --rank R --size N --store-dir DIR
//                   [--ops allreduce,broadcast,allgather,reduce_scatter,barrier]
//                   [--sizes 8,1048576,...] [--iters K] [--warmup W]
//                   [--byte-budget B] [--timeout-ms T] [--prefix P]
//
// Sizes are nccl-tests' "size": the per-rank buffer total (allreduce, broadcast: the buffer;
// allgather: the receive buffer; reduce_scatter: the send buffer), in float32 elements, rounded
// down to whole elements per rank (at least one). Per size: one checked run (fresh
// rank-dependent data, result verified, exit 2 when wrong), W warmup runs, then K timed runs,
// each `barrier; t0; op; t1`. The per-iteration times are combined across ranks as the
// elementwise MAX (gloo::allreduce on doubles) and rank 0 prints one JSON line per (op, size).
// --byte-budget B caps the timed runs at max(3, B / bytes) (and warmup at max(1, B / bytes))
// so large sizes stay short; every rank computes the same counts.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Args {
  int rank = -1;
  int size = -1;
  std::string storeDir;
  std::string prefix = "weft-gloo-bench";
  std::vector<std::string> ops{"allreduce"};
  std::vector<size_t> sizes{8, 1 << 20};
  int iters = 20;
  int warmup = 5;
  size_t byteBudget = 0;  // 0: no cap
  long timeoutMs = 60000;
};

[[noreturn]] void die(const std::string& msg, int code = 1) {
  std::fprintf(stderr, "gloo-bench: %s\n", msg.c_str());
  std::exit(code);
}

std::vector<std::string> splitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

long parseLong(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  errno = 0;
  long x = std::strtol(v.c_str(), &end, 10);
  if (errno != 0 || end == v.c_str() || *end != '\0') die("bad value for " + flag + ": '" + v + "'");
  return x;
}

Args parseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; i++) {
    std::string flag = argv[i];
    if (i + 1 >= argc) die("missing value after " + flag);
    std::string v = argv[++i];
    if (flag == "--rank") a.rank = (int)parseLong(flag, v);
    else if (flag == "--size") a.size = (int)parseLong(flag, v);
    else if (flag == "--store-dir") a.storeDir = v;
    else if (flag == "--prefix") a.prefix = v;
    else if (flag == "--ops") a.ops = splitList(v);
    else if (flag == "--sizes") {
      a.sizes.clear();
      for (const auto& s : splitList(v)) {
        long b = parseLong(flag, s);
        if (b <= 0) die("sizes must be positive: " + s);
        a.sizes.push_back((size_t)b);
      }
    } else if (flag == "--iters") a.iters = (int)parseLong(flag, v);
    else if (flag == "--warmup") a.warmup = (int)parseLong(flag, v);
    else if (flag == "--byte-budget") a.byteBudget = (size_t)parseLong(flag, v);
    else if (flag == "--timeout-ms") a.timeoutMs = parseLong(flag, v);
    else die("unknown flag " + flag);
  }
  if (a.size < 1 || a.rank < 0 || a.rank >= a.size) die("need --rank R --size N with 0 <= R < N");
  if (a.storeDir.empty()) die("need --store-dir DIR");
  if (a.iters < 1 || a.warmup < 0) die("need --iters >= 1 and --warmup >= 0");
  for (const auto& op : a.ops) {
    if (op != "allreduce" && op != "broadcast" && op != "allgather" && op != "reduce_scatter" && op != "barrier") {
      die("unknown op " + op + " (allreduce, broadcast, allgather, reduce_scatter, barrier)");
    }
  }
  return a;
}

// Rank-dependent test data: small integers, exact in float32 through sums of up to ~2^14 ranks.
inline float value(int rank, size_t i) { return (float)((rank + 1) * (int)((i % 61) + 1)); }

using Clock = std::chrono::steady_clock;

double elapsedUs(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double, std::micro>(t1 - t0).count();
}

// One collective at one size: what it moves, how to run it once, how to check it.
struct Case {
  size_t bytes = 0;       // nccl-tests size of this case
  std::string impl;       // which Gloo entry point runs it
  std::function<void()> reset;  // refills inputs (outside the timed region)
  std::function<void()> run;    // the operation, timed
  std::function<std::string()> check;  // "" when the result is right
};

class Bench {
 public:
  Bench(const Args& args, std::shared_ptr<gloo::Context> ctx) : a_(args), ctx_(std::move(ctx)) {}

  void barrier() {
    gloo::BarrierOptions opts(ctx_);
    opts.setTag(kBarrierTag);
    gloo::barrier(opts);
  }

  // Elementwise MAX across ranks of per-iteration times.
  void maxAcrossRanks(std::vector<double>& xs) {
    gloo::AllreduceOptions opts(ctx_);
    opts.setOutput(xs.data(), xs.size());
    opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::max<double>));
    opts.setTag(kStatsTag);
    gloo::allreduce(opts);
  }

  Case makeCase(const std::string& op, size_t requested) {
    const int P = ctx_->size;
    const int R = ctx_->rank;
    Case c;
    if (op == "allreduce") {
      const size_t n = std::max<size_t>(1, requested / sizeof(float));
      in_.assign(n, 0.f);
      out_.assign(n, 0.f);
      c.bytes = n * sizeof(float);
      c.impl = "gloo::allreduce(AllreduceOptions), default algorithm, sum";
      c.reset = [this, n, R] {
        for (size_t i = 0; i < n; i++) in_[i] = value(R, i);
      };
      c.run = [this, n] {
        gloo::AllreduceOptions opts(ctx_);
        opts.setInput(in_.data(), n);
        opts.setOutput(out_.data(), n);
        opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
        opts.setTag(kOpTag);
        gloo::allreduce(opts);
      };
      c.check = [this, n, P] {
        const int tri = P * (P + 1) / 2;
        for (size_t i = 0; i < n; i++) {
          const float want = (float)(tri * (int)((i % 61) + 1));
          if (out_[i] != want) return mismatch(i, out_[i], want);
        }
        return std::string();
      };
    } else if (op == "broadcast") {
      const size_t n = std::max<size_t>(1, requested / sizeof(float));
      out_.assign(n, 0.f);
      c.bytes = n * sizeof(float);
      c.impl = "gloo::broadcast(BroadcastOptions), root 0";
      c.reset = [this, n, R] {
        for (size_t i = 0; i < n; i++) out_[i] = R == 0 ? value(0, i) : -1.f;
      };
      c.run = [this, n, R] {
        gloo::BroadcastOptions opts(ctx_);
        if (R == 0) opts.setInput(out_.data(), n);
        opts.setOutput(out_.data(), n);
        opts.setRoot(0);
        opts.setTag(kOpTag);
        gloo::broadcast(opts);
      };
      c.check = [this, n] {
        for (size_t i = 0; i < n; i++) {
          if (out_[i] != value(0, i)) return mismatch(i, out_[i], value(0, i));
        }
        return std::string();
      };
    } else if (op == "allgather") {
      const size_t per = std::max<size_t>(1, requested / (sizeof(float) * P));
      in_.assign(per, 0.f);
      out_.assign(per * P, 0.f);
      c.bytes = per * P * sizeof(float);
      c.impl = "gloo::allgather(AllgatherOptions)";
      c.reset = [this, per, R] {
        for (size_t i = 0; i < per; i++) in_[i] = value(R, i);
      };
      c.run = [this, per, P] {
        gloo::AllgatherOptions opts(ctx_);
        opts.setInput(in_.data(), per);
        opts.setOutput(out_.data(), per * P);
        opts.setTag(kOpTag);
        gloo::allgather(opts);
      };
      c.check = [this, per, P] {
        for (int r = 0; r < P; r++) {
          for (size_t i = 0; i < per; i++) {
            const float got = out_[r * per + i];
            if (got != value(r, i)) return mismatch(r * per + i, got, value(r, i));
          }
        }
        return std::string();
      };
    } else if (op == "reduce_scatter") {
      // This Gloo (0.5.0, 2022-05) has no ReduceScatterOptions: the old algorithm class
      // ReduceScatterHalvingDoubling is its reduce-scatter. It works in place on one buffer of
      // P * per elements and leaves this rank's reduced block at its start. It is built once
      // per size (buffer registration happens in its constructor) and run() is timed.
      const size_t per = std::max<size_t>(1, requested / (sizeof(float) * P));
      const size_t total = per * P;
      out_.assign(total, 0.f);
      c.bytes = total * sizeof(float);
      c.impl = "gloo::ReduceScatterHalvingDoubling<float> (old algorithm API; no ReduceScatterOptions in this Gloo), sum";
      std::vector<float*> ptrs{out_.data()};
      std::vector<int> recvElems(P, (int)per);
      rs_ = std::make_shared<gloo::ReduceScatterHalvingDoubling<float>>(ctx_, ptrs, (int)total, recvElems, gloo::ReductionFunction<float>::sum);
      c.reset = [this, total, R] {
        for (size_t i = 0; i < total; i++) out_[i] = value(R, i);
      };
      c.run = [this] { rs_->run(); };
      c.check = [this, per, P, R] {
        const int tri = P * (P + 1) / 2;
        for (size_t i = 0; i < per; i++) {
          const size_t global = R * per + i;  // element of the full vector this rank owns
          const float want = (float)(tri * (int)((global % 61) + 1));
          if (out_[i] != want) return mismatch(i, out_[i], want);
        }
        return std::string();
      };
    } else {  // barrier
      c.bytes = 0;
      c.impl = "gloo::barrier(BarrierOptions)";
      c.reset = [] {};
      c.run = [this] {
        gloo::BarrierOptions opts(ctx_);
        opts.setTag(kOpTag);
        gloo::barrier(opts);
      };
      c.check = [] { return std::string(); };
    }
    return c;
  }

  void runCase(const std::string& op, size_t requested) {
    Case c = makeCase(op, requested);
    int iters = a_.iters;
    int warmup = a_.warmup;
    if (a_.byteBudget > 0 && c.bytes > 0) {
      const size_t fit = a_.byteBudget / c.bytes;
      iters = (int)std::max<size_t>(3, std::min<size_t>((size_t)iters, fit));
      warmup = (int)std::min<size_t>((size_t)warmup, std::max<size_t>(1, fit));
    }
    const bool inPlace = op == "reduce_scatter";

    // Checked run on fresh data.
    c.reset();
    barrier();
    c.run();
    const std::string err = c.check();
    if (!err.empty()) {
      die("rank " + std::to_string(ctx_->rank) + ": " + op + " of " + std::to_string(c.bytes) + " bytes is wrong: " + err, 2);
    }
    for (int i = 0; i < warmup; i++) {
      if (inPlace) c.reset();
      c.run();
    }
    std::vector<double> us(iters);
    for (int i = 0; i < iters; i++) {
      // In-place ops get their inputs back before each run, so values never grow to inf.
      if (inPlace) c.reset();
      barrier();
      const auto t0 = Clock::now();
      c.run();
      const auto t1 = Clock::now();
      us[i] = elapsedUs(t0, t1);
    }
    maxAcrossRanks(us);
    if (ctx_->rank == 0) print(op, c, us);
    rs_.reset();
  }

 private:
  static constexpr uint32_t kOpTag = 1;
  static constexpr uint32_t kBarrierTag = 2;
  static constexpr uint32_t kStatsTag = 3;

  static std::string mismatch(size_t i, float got, float want) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "element %zu is %g, expected %g", i, (double)got, (double)want);
    return buf;
  }

  void print(const std::string& op, const Case& c, std::vector<double> us) {
    std::sort(us.begin(), us.end());
    const size_t n = us.size();
    const double median = n % 2 ? us[n / 2] : (us[n / 2 - 1] + us[n / 2]) / 2;
    const size_t p90i = (size_t)std::ceil(0.9 * (double)n) - 1;
    std::printf(
        "{\"system\":\"gloo\",\"op\":\"%s\",\"np\":%d,\"provider\":\"tcp\",\"bytes\":%zu,\"iters\":%zu,"
        "\"median_us\":%.3f,\"min_us\":%.3f,\"p90_us\":%.3f,\"impl\":\"%s\"}\n",
        op.c_str(), ctx_->size, c.bytes, n, median, us[0], us[p90i], c.impl.c_str());
    std::fflush(stdout);
  }

  const Args& a_;
  std::shared_ptr<gloo::Context> ctx_;
  std::vector<float> in_;
  std::vector<float> out_;
  std::shared_ptr<gloo::ReduceScatterHalvingDoubling<float>> rs_;
};

}  // namespace

int main(int argc, char** argv) {
  const Args args = parseArgs(argc, argv);
  try {
    gloo::transport::tcp::attr attr;
    // GLOO_HOSTNAME: the address this rank's pairs listen on (emulated hosts); loopback by default.
    const char* host = std::getenv("GLOO_HOSTNAME");
    attr.hostname = host && *host ? host : "127.0.0.1";
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore fileStore(args.storeDir);
    gloo::rendezvous::PrefixStore store(args.prefix, fileStore);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(args.rank, args.size);
    ctx->setTimeout(std::chrono::milliseconds(args.timeoutMs));
    ctx->connectFullMesh(store, dev);

    Bench bench(args, ctx);
    for (const auto& op : args.ops) {
      if (op == "barrier") {
        bench.runCase(op, 0);
        continue;
      }
      for (size_t bytes : args.sizes) bench.runCase(op, bytes);
    }
    bench.barrier();
  } catch (const std::exception& e) {
    die(std::string("rank ") + std::to_string(args.rank) + ": " + e.what());
  }
  return 0;
}
