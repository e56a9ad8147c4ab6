// The only place attend uses OpenMP directly.
#pragma once

#include <cstdint>
#include <functional>

namespace attend::parallel {

/// The automatic thread count of a call when `in_flight` calls (this one included) run on its
/// context: OpenMP's default divided among them (at least 1); 1 inside an OpenMP parallel region;
/// 1 in a build without OpenMP.
int default_threads(int in_flight);

/// Runs body(item, thread) for item in [0, count) on up to `threads` threads, dynamically scheduled
/// one item at a time in index order (callers put the heaviest items first); `thread` in
/// [0, threads) identifies the worker (for per-thread scratch). The first exception a body throws
/// is rethrown on the calling thread after the loop.
void parallel_for(int64_t count, int threads, const std::function<void(int64_t item, int thread)>& body);

}  // namespace attend::parallel
