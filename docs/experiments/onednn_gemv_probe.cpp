// Session 36's probe of oneDNN 2.6's matmul at the layer's decode shapes (docs/performance.md,
// "Session 36", the bf16 layer's decode): not built by the project. M x 4096 by 4096 x N, f32 or
// bf16 weights in the format the primitive picks (WTAG=ab|ba: plain), evicted before each call
// (clflushopt on 2 threads) and paired with a plain read of the same weight bytes; every
// implementation next_impl() offers; medians of 15.
//   g++ -O2 -march=native -fopenmp docs/experiments/onednn_gemv_probe.cpp -o /tmp/gemv_probe -ldnnl
//   OMP_NUM_THREADS=2 /tmp/gemv_probe 1 6144      # M, N
//   ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 OMP_NUM_THREADS=2 /tmp/gemv_probe 1 6144   # without AMX
// The weights sit on 2 MiB pages (stream_probe.hpp), as the layer's packed weights; HUGE=0: in
// oneDNN's own allocation.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>
#include <string>
#include <vector>

#include "stream_probe.hpp"
using namespace dnnl;
using dt = memory::data_type;
using tag = memory::format_tag;
static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
// The bench's plain read of n bytes, each of two threads its half (stream_probe.hpp).
static unsigned readb(const char* c, size_t n) {
  unsigned r = 0;
#pragma omp parallel num_threads(2) reduction(^ : r)
  r ^= bench_read(c + n / 2 * omp_get_thread_num(), n / 2);
  return r;
}
int main(int argc, char** argv) {
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  const int64_t K = 4096, N = argc > 2 ? atoll(argv[2]) : 6144, M = argc > 1 ? atoll(argv[1]) : 1;
  for (dt wt : {dt::f32, dt::bf16}) {
    memory::desc src({M, K}, wt, tag::ab), dst({M, N}, dt::f32, tag::ab),
        wany({K, N}, wt, getenv("WTAG") ? (std::string(getenv("WTAG")) == "ab" ? tag::ab : tag::ba) : tag::any);
    matmul::primitive_desc pd(matmul::desc(src, wany, dst), eng);
    int idx = 0;
    do {
      std::string name = pd.impl_info_str();
      // The weights on 2 MiB pages, as the layer's packed weights (HUGE=0: oneDNN's allocation).
      const bool huge = !getenv("HUGE") || atoi(getenv("HUGE"));
      memory wm = huge ? memory(pd.weights_desc(), eng, huge_buffer(pd.weights_desc().get_size()))
                       : memory(pd.weights_desc(), eng);
      memory sm(pd.src_desc(), eng), dm(pd.dst_desc(), eng);
      memset(wm.get_data_handle(), 0x3c, pd.weights_desc().get_size());
      memset(sm.get_data_handle(), 0x3c, pd.src_desc().get_size());
      matmul mm(pd);
      const size_t wb = pd.weights_desc().get_size();
      std::vector<double> sh, tt;
      for (int rep = 0; rep < 15; ++rep) {
        evict(static_cast<char*>(wm.get_data_handle()), wb);
        double t0 = now();
        mm.execute(s, {{DNNL_ARG_SRC, sm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, dm}});
        s.wait();
        double t1 = now();
        evict(static_cast<char*>(wm.get_data_handle()), wb);
        double t2 = now();
        volatile unsigned r = readb((const char*)wm.get_data_handle(), wb);
        (void)r;
        double t3 = now();
        sh.push_back((t3 - t2) / (t1 - t0) * 100);
        tt.push_back((t1 - t0) * 1e3);
      }
      std::sort(sh.begin(), sh.end());
      std::sort(tt.begin(), tt.end());
      printf("%s M=%ld N=%ld impl %-40s %.3f ms  %.1f%% of a read (wbytes %.1f MB)\n", wt == dt::f32 ? "f32 " : "bf16",
             M, N, name.c_str(), tt[7], sh[7], wb / 1e6);
      ++idx;
    } while (pd.next_impl() && idx < 8);
  }
}
