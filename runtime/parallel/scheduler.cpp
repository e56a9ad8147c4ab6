#include "scheduler.hpp"

#if defined(ATTEND_HAVE_OPENMP)
#include <omp.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>

namespace attend::parallel {

#if defined(ATTEND_HAVE_OPENMP)
int default_threads(int in_flight) {
  if (omp_in_parallel()) return 1;
  const int share = omp_get_max_threads() / (in_flight > 0 ? in_flight : 1);
  return share > 0 ? share : 1;
}
#else
// Built without OpenMP (ATTEND_OPENMP=OFF, for sanitizer and fuzz builds): everything runs on the
// calling thread. Results are the same bits, since work is split by shape only.
int default_threads(int) { return 1; }
#endif

namespace {

// The first exception the items throw, rethrown on the calling thread after the loop.
struct FirstError {
  std::exception_ptr error;
  std::mutex mutex;
  void keep() {
    std::lock_guard<std::mutex> lock(mutex);
    if (!error) error = std::current_exception();
  }
  void rethrow() const {
    if (error) std::rethrow_exception(error);
  }
};

}  // namespace

void parallel_for(int64_t count, int threads, ItemFn body) {
  if (count <= 0) return;
  if (threads > count) threads = static_cast<int>(count);
  if (threads <= 1) {
    for (int64_t i = 0; i < count; ++i) body(i, 0);
    return;
  }
#if !defined(ATTEND_HAVE_OPENMP)
  for (int64_t i = 0; i < count; ++i) body(i, 0);
#else
  FirstError first;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t i = 0; i < count; ++i) {
    try {
      body(i, omp_get_thread_num());
    } catch (...) {
      first.keep();
    }
  }
  first.rethrow();
#endif
}

#if defined(ATTEND_HAVE_OPENMP)
namespace {

// A run's remaining items [next, end) in one word (next in the high half), so taking from the front
// (its owner) and from the back (a thread whose run is done) are each one compare-and-swap.
struct alignas(64) Run {
  std::atomic<uint64_t> span;
};

constexpr int kMaxRuns = 64;
constexpr uint64_t kHalf = 0xffffffffu;

uint64_t pack_span(uint64_t next, uint64_t end) { return next << 32 | end; }

// The front (or back) item of `run`, or -1 when it is empty.
int64_t take(Run& run, bool back) {
  uint64_t v = run.span.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t next = v >> 32, end = v & kHalf;
    if (next >= end) return -1;
    const uint64_t rest = back ? pack_span(next, end - 1) : pack_span(next + 1, end);
    if (run.span.compare_exchange_weak(v, rest, std::memory_order_relaxed)) return int64_t(back ? end - 1 : next);
  }
}

// parallel_for_runs / parallel_for_groups on 2..kMaxRuns threads: the items [0, head) in runs over
// threads [0, head_threads), the rest over the others.
void run_in_runs(int64_t count, int threads, ItemFn body, int64_t head, int head_threads) {
  Run runs[kMaxRuns];
  const int tail_threads = threads - head_threads;
  for (int t = 0; t < threads; ++t) {
    const bool first = t < head_threads;
    const int64_t lo = first ? 0 : head, n = first ? head : count - head;
    const int64_t u = first ? t : t - head_threads, of = first ? head_threads : tail_threads;
    runs[t].span.store(pack_span(uint64_t(lo + n * u / of), uint64_t(lo + n * (u + 1) / of)),
                       std::memory_order_relaxed);
  }
  FirstError first;
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    for (;;) {
      int64_t item = take(runs[t], false);
      while (item < 0) {  // steal from the run with the most items left
        int victim = -1;
        uint64_t most = 0;
        for (int u = 0; u < threads; ++u) {
          const uint64_t v = runs[u].span.load(std::memory_order_relaxed);
          const uint64_t left = (v >> 32) < (v & kHalf) ? (v & kHalf) - (v >> 32) : 0;
          if (left > most) most = left, victim = u;
        }
        if (victim < 0) break;
        item = take(runs[victim], true);
      }
      if (item < 0) break;
      try {
        body(item, t);
      } catch (...) {
        first.keep();
      }
    }
  }
  first.rethrow();
}

}  // namespace
#endif

void parallel_for_runs(int64_t count, int threads, ItemFn body) {
  if (threads > count) threads = static_cast<int>(count);
#if defined(ATTEND_HAVE_OPENMP)
  if (threads >= 2 && threads <= kMaxRuns && count <= int64_t(kHalf))
    return run_in_runs(count, threads, body, count, threads);
#endif
  parallel_for(count, threads, body);  // (one thread, more than kMaxRuns, or no OpenMP)
}

void parallel_for_groups(int64_t count, int64_t head, int threads, ItemFn body) {
  if (head <= 0 || head >= count) return parallel_for_runs(count, threads, body);
  if (threads > count) threads = static_cast<int>(count);
#if defined(ATTEND_HAVE_OPENMP)
  if (threads >= 2 && threads <= kMaxRuns && count <= int64_t(kHalf)) {
    // (each group has at least one item, and at most as many threads as items)
    int tail_threads = static_cast<int>(std::min<int64_t>(threads / 2, count - head));
    int head_threads = static_cast<int>(std::min<int64_t>(threads - tail_threads, head));
    tail_threads = static_cast<int>(std::min<int64_t>(threads - head_threads, count - head));
    return run_in_runs(count, head_threads + tail_threads, body, head, head_threads);
  }
#endif
  parallel_for(count, threads, body);
}

}  // namespace attend::parallel
