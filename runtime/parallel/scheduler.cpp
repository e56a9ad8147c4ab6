#include "scheduler.hpp"

#if defined(ATTEND_HAVE_OPENMP)
#include <omp.h>
#endif

#include <exception>
#include <memory>
#include <mutex>
#include <new>

namespace attend::parallel {

#if defined(ATTEND_HAVE_OPENMP)
int resolve_threads(int requested) { return requested > 0 ? requested : omp_get_max_threads(); }
#else
// Built without OpenMP (ATTEND_OPENMP=OFF, for sanitizer and fuzz builds): everything runs on the
// calling thread. Results are the same bits, since work is split by shape only.
int resolve_threads(int requested) { return requested > 0 ? requested : 1; }
#endif

void parallel_for(int64_t count, int threads, const std::function<void(int64_t)>& body) {
  if (count <= 0) return;
  if (threads > count) threads = static_cast<int>(count);
  if (threads <= 1) {
    for (int64_t i = 0; i < count; ++i) body(i);
    return;
  }
#if !defined(ATTEND_HAVE_OPENMP)
  for (int64_t i = 0; i < count; ++i) body(i);
#else
  std::exception_ptr error;
  std::mutex error_mutex;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t i = 0; i < count; ++i) {
    try {
      body(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
#endif
}

namespace {
struct AlignedFree {
  void operator()(float* p) const { ::operator delete[](p, std::align_val_t(64)); }
};
struct Buffer {
  std::unique_ptr<float[], AlignedFree> data;
  size_t size = 0;
};
}  // namespace

float* thread_buffer(size_t floats, int slot) {
  thread_local Buffer buffers[kThreadBufferSlots];
  Buffer& b = buffers[slot];
  if (b.size < floats) {
    b.data.reset(static_cast<float*>(::operator new[](floats * sizeof(float), std::align_val_t(64))));
    b.size = floats;
  }
  return b.data.get();
}

}  // namespace attend::parallel
