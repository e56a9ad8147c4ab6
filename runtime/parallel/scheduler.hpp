// The only place attend uses OpenMP directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace attend::parallel {

/// The thread count a call asking for `requested` (0 = OpenMP's default) gets.
int resolve_threads(int requested);

/// Runs body(item) for item in [0, count) on up to `threads` threads, dynamically scheduled one
/// item at a time in index order (callers put the heaviest items first). The first exception a
/// body throws is rethrown on the calling thread after the loop.
void parallel_for(int64_t count, int threads, const std::function<void(int64_t)>& body);

/// Independent per-thread buffers. Slot owners: 0 kernel tile scratch, 1 split-K partials,
/// 2 projection scratchpads, 3 and 4 the layer's activations.
constexpr int kThreadBufferSlots = 5;

/// A 64-byte aligned buffer of at least `floats` floats owned by the calling thread and reused
/// across calls (no allocation on the hot path once warm). Valid until the next call for the same
/// slot with a larger size on the same thread.
float* thread_buffer(size_t floats, int slot = 0);

}  // namespace attend::parallel
