#include "scheduler.hpp"

#if defined(ATTEND_HAVE_OPENMP)
#include <omp.h>
#endif

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
  std::exception_ptr error;
  std::mutex error_mutex;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t i = 0; i < count; ++i) {
    try {
      body(i, omp_get_thread_num());
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
#endif
}

}  // namespace attend::parallel
