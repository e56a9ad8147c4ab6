// The only place attend uses OpenMP directly.
#pragma once

#include <cstdint>

namespace attend::parallel {

/// The automatic thread count of a call when `in_flight` calls (this one included) run on its
/// context: OpenMP's default divided among them (at least 1); 1 inside an OpenMP parallel region;
/// 1 in a build without OpenMP.
int default_threads(int in_flight);

/// A non-owning reference to a callable body(item, thread): unlike std::function it never
/// allocates, so a warm call's parallel loop costs no heap traffic. The callable must outlive it.
class ItemFn {
 public:
  template <class F>
  ItemFn(F& f) : object_(&f), call_([](void* o, int64_t item, int thread) { (*static_cast<F*>(o))(item, thread); }) {}
  void operator()(int64_t item, int thread) const { call_(object_, item, thread); }

 private:
  void* object_;
  void (*call_)(void*, int64_t, int);
};

/// Runs body(item, thread) for item in [0, count) on up to `threads` threads, dynamically scheduled
/// one item at a time in index order (callers put the heaviest items first); `thread` in
/// [0, threads) identifies the worker (for per-thread scratch). The first exception a body throws
/// is rethrown on the calling thread after the loop.
void parallel_for(int64_t count, int threads, ItemFn body);

/// The same items, scheduled in contiguous runs: thread t starts on the run [t·count/T,
/// (t+1)·count/T) and takes it in index order; a thread whose run is done takes the last item of
/// the run with the most items left. For items that read adjacent memory one after another (a
/// decode's key ranges of one head): a thread's next item continues the stream its last one read.
/// Which thread runs an item changes nothing else (items are split by shape only).
void parallel_for_runs(int64_t count, int threads, ItemFn body);

/// Two groups of items side by side: [0, head) in runs over threads - threads/2 of the threads, and
/// [head, count) in runs over the other threads/2 (each group on at most as many threads as it has
/// items); a thread whose run is done takes from the back of the run with the most items left, in
/// either group. For a compute-bound group beside a bandwidth-bound one (a prompt chunk beside
/// decodes): one thread streaming reads much of what two do, so the groups overlap. head 0 or
/// count: parallel_for_runs.
void parallel_for_groups(int64_t count, int64_t head, int threads, ItemFn body);

}  // namespace attend::parallel
