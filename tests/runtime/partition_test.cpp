// The work-splitting functions depend on shape only; these pin down their contract, and that of
// the schedulers that run the items.
#include "../../runtime/parallel/partition.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "../../runtime/parallel/scheduler.hpp"

namespace attend::parallel {
namespace {

TEST(Partition, PrefillIsNotSplit) {
  EXPECT_EQ(split_keys(100000, 2, 1, 32).count, 1);
  EXPECT_EQ(split_keys(100000, 2, 1, 32).keys, 100000);
}

TEST(Partition, ShortDecodeIsNotSplit) {
  EXPECT_EQ(split_keys(1023, 1, 1, 32).count, 1);
  EXPECT_EQ(split_keys(1, 1, 1, 32).count, 1);
}

TEST(Partition, DecodeSplitsOnlyUpToTheTargetItemCount) {
  EXPECT_EQ(split_keys(4096, 1, 32, 32).count, 1);  // 32 (batch, kv head) pairs are enough
  EXPECT_EQ(split_keys(4096, 1, 40, 32).count, 1);
  const KeySplit s = split_keys(4096, 1, 8, 32);  // 8 pairs: 4 ranges of 1024
  EXPECT_EQ(s.count, 4);
  EXPECT_EQ(s.keys, 1024);
  EXPECT_EQ(split_keys(4096, 1, 3, 32).count, 8);      // 11 wanted, at most 4096 / 512
  EXPECT_EQ(split_keys(1 << 20, 1, 1, 32).count, 16);  // at most 16
}

TEST(Partition, DecodeSplitsCoverAllKeysAligned) {
  for (int64_t nk : {1024, 1100, 4096, 4097, 16384, 1 << 20}) {
    const KeySplit s = split_keys(nk, 1, 1, 32);
    EXPECT_GE(s.count, 2) << nk;
    EXPECT_LE(s.count, 16) << nk;
    EXPECT_EQ(s.keys % 256, 0) << nk;
    EXPECT_GE(s.count * s.keys, nk) << nk;
    EXPECT_LT((s.count - 1) * s.keys, nk) << "an empty last split for " << nk;
  }
}

TEST(Partition, RowBlocks) {
  EXPECT_EQ(row_blocks(64, 64), 1);
  EXPECT_EQ(row_blocks(65, 64), 2);
  EXPECT_EQ(row_blocks(1, 64), 1);
  EXPECT_EQ(row_blocks(0, 64), 0);
}

// Runs body over `count` items on `threads` threads with parallel_for_runs; returns each item's
// run count and, per thread, the items it ran in order.
struct RunLog {
  std::vector<int> times;
  std::vector<std::vector<int64_t>> by_thread;
};

RunLog run_all(int64_t count, int threads) {
  RunLog log;
  std::vector<std::atomic<int>> times(static_cast<size_t>(count));
  log.by_thread.resize(static_cast<size_t>(threads));
  std::mutex m;
  auto body = [&](int64_t item, int thread) {
    EXPECT_GE(thread, 0);
    EXPECT_LT(thread, threads);
    times[static_cast<size_t>(item)].fetch_add(1);
    std::lock_guard<std::mutex> lock(m);
    log.by_thread[static_cast<size_t>(thread)].push_back(item);
  };
  parallel_for_runs(count, threads, body);
  for (auto& t : times) log.times.push_back(t.load());
  return log;
}

TEST(Scheduler, RunsTakeEveryItemOnce) {
  for (int threads : {1, 2, 3, 5, 16, 64, 65})
    for (int64_t count : {0, 1, 2, 3, 7, 17, 64, 513}) {
      const RunLog log = run_all(count, threads);
      for (int64_t i = 0; i < count; ++i) EXPECT_EQ(log.times[static_cast<size_t>(i)], 1) << count << " " << threads;
    }
}

// A thread takes the items of its own run, [t·count/T, (t+1)·count/T), from its front one after
// another: those it runs are lo, lo + 1, ... in that order (the rest of its run, if any, went to
// threads that had finished theirs, from the back). A shared one-at-a-time schedule would give a
// thread every T-th item instead.
TEST(Scheduler, RunsAreTakenFromTheFront) {
  for (int threads : {2, 3, 16})
    for (int64_t count : {7, 32, 513}) {
      const int t_used = static_cast<int>(std::min<int64_t>(threads, count));
      const RunLog log = run_all(count, threads);
      for (int t = 0; t < t_used; ++t) {
        const int64_t lo = count * t / t_used, hi = count * (t + 1) / t_used;
        int64_t expect = lo;
        for (int64_t item : log.by_thread[static_cast<size_t>(t)])
          if (item >= lo && item < hi) {
            EXPECT_EQ(item, expect++) << "thread " << t << " of " << threads << ", " << count << " items";
          }
      }
    }
}

TEST(Scheduler, RunsRethrowTheFirstError) {
  for (int threads : {1, 2}) {
    auto body = [&](int64_t item, int) {
      if (item == 5) throw std::runtime_error("item 5");
    };
    EXPECT_THROW(parallel_for_runs(9, threads, body), std::runtime_error) << threads;
  }
}

// parallel_for_groups: [0, head) over threads - threads/2 threads and [head, count) over the rest,
// each in runs. Every item runs once, whatever the split.
TEST(Scheduler, GroupsTakeEveryItemOnce) {
  for (int threads : {1, 2, 3, 5, 16})
    for (int64_t count : {0, 1, 2, 3, 7, 17, 513})
      for (int64_t head : {int64_t{0}, int64_t{1}, count / 3, count - 1, count}) {
        if (head < 0 || head > count) continue;
        std::vector<std::atomic<int>> times(static_cast<size_t>(count));
        auto body = [&](int64_t item, int thread) {
          EXPECT_GE(thread, 0);
          EXPECT_LT(thread, threads);
          times[static_cast<size_t>(item)].fetch_add(1);
        };
        parallel_for_groups(count, head, threads, body);
        for (int64_t i = 0; i < count; ++i)
          EXPECT_EQ(times[static_cast<size_t>(i)].load(), 1) << count << " " << head << " " << threads;
      }
}

// Each group starts on threads of its own: with every thread held at its first item until all have
// one, the first items are the fronts of the runs, the head group's from 0 and the tail group's
// from `head` (a shared schedule would start every thread in the head group).
TEST(Scheduler, GroupsStartOnThreadsOfTheirOwn) {
  // A build without OpenMP (ATTEND_OPENMP=OFF) runs every loop on the calling thread: nothing to
  // check. (Two items, each held until both have started or 2 s passed: two threads here, one there.)
  std::atomic<int> begun{0}, seen{0};
  auto probe = [&](int64_t, int thread) {
    seen.fetch_or(1 << thread);
    begun.fetch_add(1);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (begun.load() < 2 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  };
  parallel_for_runs(2, 2, probe);
  if (seen.load() != 3) GTEST_SKIP() << "parallel loops run on one thread in this build";
  for (int threads : {2, 3, 4})
    for (int64_t count : {8, 64, 513})
      for (int64_t head : {int64_t{1}, count / 4, count - 1}) {
        // (a group takes at most as many threads as it has items; the other group the rest)
        int tail_threads = static_cast<int>(std::min<int64_t>(threads / 2, count - head));
        const int head_threads = static_cast<int>(std::min<int64_t>(threads - tail_threads, head));
        tail_threads = static_cast<int>(std::min<int64_t>(threads - head_threads, count - head));
        const int used = head_threads + tail_threads;
        std::vector<int64_t> first(static_cast<size_t>(used), -1);
        std::atomic<int> started{0};
        auto body = [&](int64_t item, int thread) {
          if (first[static_cast<size_t>(thread)] >= 0) return;
          first[static_cast<size_t>(thread)] = item;
          started.fetch_add(1);
          const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          while (started.load() < used && std::chrono::steady_clock::now() < until) std::this_thread::yield();
        };
        parallel_for_groups(count, head, threads, body);
        ASSERT_EQ(started.load(), used) << "a thread never started";
        std::vector<int64_t> expect;
        for (int t = 0; t < head_threads; ++t) expect.push_back(head * t / head_threads);
        for (int t = 0; t < tail_threads; ++t) expect.push_back(head + (count - head) * t / tail_threads);
        std::sort(first.begin(), first.end());
        EXPECT_EQ(first, expect) << count << " items, head " << head << ", " << threads << " threads";
      }
}

TEST(Scheduler, GroupsRethrowTheFirstError) {
  for (int threads : {1, 2, 3}) {
    auto body = [&](int64_t item, int) {
      if (item == 5) throw std::runtime_error("item 5");
    };
    EXPECT_THROW(parallel_for_groups(9, 3, threads, body), std::runtime_error) << threads;
    EXPECT_THROW(parallel_for_groups(9, 6, threads, body), std::runtime_error) << threads;
  }
}

}  // namespace
}  // namespace attend::parallel
