#include "onednn_matmul.hpp"

#if defined(ATTEND_HAVE_OPENMP)
#include <omp.h>
#endif

#include <algorithm>
#include <attend/error.hpp>
#include <attend/isa.hpp>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <shared_mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "../context/huge_pages.hpp"
#include "../dispatch/registry.hpp"
#include "../numeric/convert.hpp"

namespace attend::gemm {
namespace {

// Packed weights of 2 MiB or more go in huge pages (detail::map_huge_pages): a decode step streams
// every weight once, and in 4 KiB pages the hardware prefetchers stop at every page (an AMX Xeon
// read 4 KiB pages at 17 GB/s, 2 MiB pages at 30). Null below that size: oneDNN allocates them.
struct Unmap {
  size_t mapped = 0;
  void operator()(void* p) const { detail::unmap_huge_pages(p, mapped); }
};
using HugePageBuffer = std::unique_ptr<void, Unmap>;
HugePageBuffer huge_page_buffer(size_t bytes) {
  if (bytes < detail::kHugePage) return nullptr;
  size_t mapped = 0;
  void* p = detail::map_huge_pages(bytes, mapped);
  return HugePageBuffer(p, Unmap{mapped});
}

using dnnl::memory;
using dt = memory::data_type;
using tag = memory::format_tag;

const dnnl::engine& cpu_engine() {
  static const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

// Round-to-nearest-even f32 → bf16 (NaN kept quiet). A plain loop the compiler vectorises.
void to_bf16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    uint32_t bits;
    std::memcpy(&bits, &x[j], 4);
    const uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
    const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
    y[j] = static_cast<uint16_t>(nan ? (bits >> 16) | 0x40u : rounded >> 16);
  }
}

// n activations of type t as f32 (bf16: a shift the compiler vectorises; f16: exact, scalar).
void to_f32(const void* x, ActType t, float* y, int64_t n) {
  const uint16_t* h = static_cast<const uint16_t*>(x);
  if (t == ActType::f32) {
    std::memcpy(y, x, sizeof(float) * static_cast<size_t>(n));
  } else if (t == ActType::bf16) {
    for (int64_t j = 0; j < n; ++j) {
      const uint32_t bits = static_cast<uint32_t>(h[j]) << 16;
      std::memcpy(&y[j], &bits, 4);
    }
  } else {
    for (int64_t j = 0; j < n; ++j) y[j] = numeric::from_f16(h[j]);
  }
}

// n f32 values as type t (round to nearest even).
void from_f32(const float* x, ActType t, void* y, int64_t n) {
  if (t == ActType::f32) return std::memcpy(y, x, sizeof(float) * static_cast<size_t>(n)), void();
  uint16_t* h = static_cast<uint16_t*>(y);
  if (t == ActType::bf16) return to_bf16(x, h, n);
  for (int64_t j = 0; j < n; ++j) h[j] = numeric::to_f16(x[j]);
}

dt dnnl_type(ActType t) { return t == ActType::bf16 ? dt::bf16 : t == ActType::f16 ? dt::f16 : dt::f32; }

int max_threads() {
#if defined(ATTEND_HAVE_OPENMP)
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// Restores the calling thread's OpenMP thread count (oneDNN's OpenMP runtime sizes its parallel
// regions from it, so this is how a call is limited to `threads`).
class OmpThreadLimit {
 public:
#if defined(ATTEND_HAVE_OPENMP)
  explicit OmpThreadLimit(int threads) : saved_(omp_get_max_threads()) {
    if (threads > 0) omp_set_num_threads(threads);
  }
  ~OmpThreadLimit() { omp_set_num_threads(saved_); }

 private:
  int saved_;
#else
  explicit OmpThreadLimit(int) {}
#endif
};

// Whether `md` is oneDNN's BA16a64b2a packing of [in, out] bf16 weights, the layout
// kernels::Bf16GemvWork reads: column blocks of 64, each contiguous, of reduction blocks of 32.
bool ba16a64b2a(const memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.format_kind != dnnl_blocked || d.ndims != 2 || d.data_type != dnnl_bf16 || d.offset0 != 0 || d.extra.flags != 0)
    return false;
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  return b.inner_nblks == 3 && b.inner_blks[0] == 16 && b.inner_idxs[0] == 0 && b.inner_blks[1] == 64 &&
         b.inner_idxs[1] == 1 && b.inner_blks[2] == 2 && b.inner_idxs[2] == 0 && d.padded_dims[0] % 32 == 0 &&
         d.padded_dims[1] % 64 == 0 && b.strides[0] == 32 * 64 && b.strides[1] == d.padded_dims[0] * 64;
}

}  // namespace

struct Linear::Impl {
  int64_t in = 0, out = 0;
  WeightType type = WeightType::f32;
  // bf16 weights on a CPU oneDNN has no bf16 matmul for (AVX2): the weights are held as their bf16
  // values widened to f32 and x is rounded to bf16 the same way, so the products are the bf16
  // path's (exact in f32) and only the accumulation order differs; twice the weight memory.
  bool widened_bf16 = false;
  // oneDNN's implementation may split the reduction across threads (its gemm:jit path, the one
  // oneDNN 2.6 takes without AVX-512), which would make the bits depend on the thread count. Then
  // run() cuts the product into tiles sized by the shape alone and runs each on one thread.
  bool tiled = false;
  memory::desc packed_md;
  // attend's bf16 decode GEMV (kernels::Bf16GemvWork) for up to gemv_rows rows
  // (detail::bf16_decode_gemv_rows), where the CPU has it and oneDNN packed the weights as
  // BA16a64b2a; null: oneDNN's matmul for every m.
  kernels::Bf16GemvFn gemv = nullptr;
  int64_t gemv_k_padded = 0, gemv_rows = 0;
  bool gemv_l2 = true;  // detail::bf16_decode_gemv_l2_requests
  bool own_gemv(int64_t m) const { return gemv && m <= gemv_rows; }
  HugePageBuffer weight_pages;  // weights' storage (huge_page_buffer), or null
  memory weights, bias;
  bool has_bias = false;

  struct Entry {
    dnnl::matmul prim;
    size_t scratch_bytes;
    std::string name;
  };
  mutable std::shared_mutex mutex;
  // By (rows, columns, reduction depth, dst type): the whole product, or a tile.
  mutable std::map<std::tuple<int64_t, int64_t, int64_t, dt>, std::shared_ptr<const Entry>> primitives;

  bool bf16_math() const { return type == WeightType::bf16 && !widened_bf16; }
  dt src_type() const { return bf16_math() ? dt::bf16 : dt::f32; }
  ActType src_act() const { return bf16_math() ? ActType::bf16 : ActType::f32; }
  // x must be converted before the matmul reads it (widened bf16 also rounds f32 x to bf16).
  bool converts(ActType xt) const { return xt != src_act() || (widened_bf16 && xt != ActType::bf16); }
  // What oneDNN writes for y of type yt: bf16 straight from a bf16 matmul, else f32.
  ActType dst_act(ActType yt) const { return bf16_math() && yt == ActType::bf16 ? ActType::bf16 : ActType::f32; }

  // run()'s tiles for m rows (tiled mode), chosen from (m, in, out) only. Up to 8 column blocks
  // of at least 512 columns, then row blocks of 512–4096 rows until there are 8 tiles where the
  // shape allows (enough for a socket's threads without shrinking tiles below what runs well).
  // A few rows (decode) are a product bound by reading the weights: their tiles are instead up to 8
  // blocks of at least 512 weight rows, each streaming a contiguous part of the weights into its own
  // partial sum; the partial sums are added in a fixed order.
  struct Tiling {
    int64_t rows, cols, depth, row_tiles, col_tiles, k_tiles;
  };
  static constexpr int64_t few_rows = 16;
  Tiling tiling(int64_t m) const {
    if (m <= few_rows) {
      const int64_t k_tiles = std::clamp<int64_t>(in / 512, 1, 8);
      const int64_t depth = (in + k_tiles - 1) / k_tiles;
      return {m, out, depth, 1, 1, (in + depth - 1) / depth};
    }
    const int64_t col_tiles = std::clamp<int64_t>(out / 512, 1, 8);
    const int64_t cols = std::min(out, ((out + col_tiles - 1) / col_tiles + 15) / 16 * 16);
    const int64_t want_rows = std::max<int64_t>((8 + col_tiles - 1) / col_tiles, (m + 4095) / 4096);
    const int64_t row_tiles = std::clamp<int64_t>(want_rows, 1, std::max<int64_t>(1, m / 512));
    const int64_t rows = (m + row_tiles - 1) / row_tiles;
    return {rows, cols, in, (m + rows - 1) / rows, (out + cols - 1) / cols, 1};
  }
  // Floats of the partial sums of a product of m rows split along the reduction.
  size_t partial_floats(int64_t m) const {
    const Tiling t = tiling(m);
    return t.k_tiles > 1 ? static_cast<size_t>(t.k_tiles * m * out) : 0;
  }
  // Row stride of the plain weights (tiled mode): a multiple of 16 elements but not of 256, since
  // rows 1 KB-multiples apart alias in the caches (oneDNN's single-threaded sgemm reads a tile's
  // columns down the rows: 2x slower at out = 4096 without the padding).
  int64_t ldw() const {
    const int64_t ld = (out + 15) / 16 * 16;
    return ld % 256 == 0 ? ld + 16 : ld;
  }

  // The matmul of m rows by n of the weights' columns (every column: n = out), weights laid out as
  // `wmd` (tiled: a block of the plain [in, out] weights, row stride ldw()).
  // `depth` of the `in` reduction terms (a reduction block: no bias), x rows of stride in.
  dnnl::matmul::primitive_desc describe(int64_t m, int64_t n, const memory::desc& wmd, dt dst_type,
                                        int64_t depth = 0) const {
    const bool whole = n == out;
    const bool part = depth != 0 && depth != in;
    memory::desc src_md({m, part ? depth : in}, src_type(), {in, 1});
    memory::desc dst_md = whole ? memory::desc({m, n}, dst_type, tag::ab) : memory::desc({m, n}, dst_type, {out, 1});
    dnnl::primitive_attr attr;
    // Tiles run concurrently, each with oneDNN's own scratchpad; the whole product uses the caller's.
    attr.set_scratchpad_mode(tiled ? dnnl::scratchpad_mode::library : dnnl::scratchpad_mode::user);
    if (has_bias && !part) {
      memory::desc bmd({1, n}, dt::f32, whole ? memory::dims{n, 1} : memory::dims{out, 1});
      return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_md, wmd, bmd, dst_md), attr, cpu_engine());
    }
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_md, wmd, dst_md), attr, cpu_engine());
  }

  std::shared_ptr<const Entry> primitive(int64_t m, int64_t n, dt dst_type, int64_t depth = 0) const {
    if (depth == 0) depth = in;
    const std::tuple<int64_t, int64_t, int64_t, dt> key{m, n, depth, dst_type};
    {
      std::shared_lock lock(mutex);
      auto it = primitives.find(key);
      if (it != primitives.end()) return it->second;
    }
    const memory::desc wmd = tiled ? memory::desc({depth, n}, src_type(), {ldw(), 1}) : packed_md;
    auto pd = describe(m, n, wmd, dst_type, depth);
    auto entry =
        std::make_shared<const Entry>(Entry{dnnl::matmul(pd), pd.scratchpad_desc().get_size(), pd.impl_info_str()});
    std::unique_lock lock(mutex);
    if (primitives.size() >= 256) primitives.clear();  // bound the cache for workloads with many distinct m
    return primitives.emplace(key, entry).first->second;
  }

  // One thread per tile, tiles in a fixed grid (the bits do not depend on `threads`).
  // `partial`: partial_floats(m) floats.
  void run_tiles(const void* src, void* dst, dt dst_type, int64_t m, int threads, float* partial) const;

  // attend's GEMV on the current OpenMP thread count: contiguous runs of column blocks per thread.
  void run_gemv(const uint16_t* x, void* y, bool y_bf16, int64_t m) const {
    kernels::Bf16GemvWork work{};
    work.x = x;
    work.x_stride = in;
    work.rows = m;
    work.in = in;
    work.w = static_cast<const uint16_t*>(weights.get_data_handle());
    work.k_padded = gemv_k_padded;
    work.out = out;
    work.bias = has_bias ? static_cast<const float*>(bias.get_data_handle()) : nullptr;
    work.y = y;
    work.y_stride = out;
    work.y_bf16 = y_bf16;
    work.l2_requests = gemv_l2;
    const int64_t blocks = (out + 63) / 64;
#if defined(ATTEND_HAVE_OPENMP)
#pragma omp parallel
    {
      const int64_t t = omp_get_thread_num(), threads = omp_get_num_threads();
      kernels::Bf16GemvWork mine = work;
      mine.block_begin = t * blocks / threads;
      mine.block_end = (t + 1) * blocks / threads;
      if (mine.block_begin < mine.block_end) gemv(mine);
    }
#else
    work.block_end = blocks;
    gemv(work);
#endif
  }
};

void Linear::Impl::run_tiles(const void* src, void* dst, dt dst_type, int64_t m, int threads, float* partial) const {
  const Tiling t = tiling(m);
  const bool split = t.k_tiles > 1;
  const int64_t tiles = t.row_tiles * t.col_tiles * t.k_tiles;
  const size_t src_bytes = src_type() == dt::bf16 ? 2 : 4, dst_bytes = dst_type == dt::bf16 ? 2 : 4;
  const dt tile_dst = split ? dt::f32 : dst_type;
  // Primitives before the parallel region (creating one takes the cache's lock; the region only
  // reads): [last row block][last column block][last reduction block].
  std::shared_ptr<const Entry> entries[2][2][2];
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 2; ++c)
      for (int k = 0; k < 2; ++k) {
        if ((r == 1 && t.row_tiles == 1) || (c == 1 && t.col_tiles == 1) || (k == 1 && t.k_tiles == 1)) continue;
        const int64_t rows = r == 0 ? t.rows : m - (t.row_tiles - 1) * t.rows;
        const int64_t cols = c == 0 ? t.cols : out - (t.col_tiles - 1) * t.cols;
        const int64_t depth = k == 0 ? t.depth : in - (t.k_tiles - 1) * t.depth;
        entries[r][c][k] = primitive(rows, cols, tile_dst, depth);
      }
  const dnnl::engine& eng = cpu_engine();
  [[maybe_unused]] const int team = static_cast<int>(std::min<int64_t>(tiles, threads > 0 ? threads : max_threads()));
  const float* b = has_bias ? static_cast<const float*>(bias.get_data_handle()) : nullptr;
  std::exception_ptr failure;
  std::mutex failure_mutex;
#if defined(ATTEND_HAVE_OPENMP)
#pragma omp parallel num_threads(team)
#endif
  {
    // Every thread meets every worksharing loop, whatever fails: errors are kept, not thrown here.
    const auto keep = [&] {
      std::lock_guard lock(failure_mutex);
      if (!failure) failure = std::current_exception();
    };
    std::optional<dnnl::stream> strm;
    try {
#if defined(ATTEND_HAVE_OPENMP)
      // oneDNN sizes its parallel regions from this thread's OpenMP thread count (a team of one
      // is not nested parallelism to it): each tile runs on the one thread that takes it.
      omp_set_num_threads(1);
#endif
      strm.emplace(eng);
    } catch (...) {
      keep();
    }
#if defined(ATTEND_HAVE_OPENMP)
#pragma omp for schedule(dynamic, 1)
#endif
    for (int64_t n = 0; n < tiles; ++n) {
      if (!strm) continue;
      try {
        const int64_t kb = n % t.k_tiles, j = n / t.k_tiles % t.col_tiles, i = n / t.k_tiles / t.col_tiles;
        const bool last_row = t.row_tiles > 1 && i == t.row_tiles - 1;
        const bool last_col = t.col_tiles > 1 && j == t.col_tiles - 1;
        const bool last_k = t.k_tiles > 1 && kb == t.k_tiles - 1;
        const Entry& e = *entries[last_row][last_col][last_k];
        const int64_t rows = last_row ? m - i * t.rows : t.rows;
        const int64_t cols = last_col ? out - j * t.cols : t.cols;
        const int64_t depth = last_k ? in - kb * t.depth : t.depth;
        const char* s = static_cast<const char*>(src) + static_cast<size_t>(i * t.rows * in + kb * t.depth) * src_bytes;
        char* d = split ? reinterpret_cast<char*>(partial + kb * m * out)
                        : static_cast<char*>(dst) + static_cast<size_t>(i * t.rows * out + j * t.cols) * dst_bytes;
        char* w = static_cast<char*>(weights.get_data_handle()) +
                  static_cast<size_t>(kb * t.depth * ldw() + j * t.cols) * src_bytes;
        std::unordered_map<int, memory> args{
            {DNNL_ARG_SRC, memory(memory::desc({rows, depth}, src_type(), {in, 1}), eng, const_cast<char*>(s))},
            {DNNL_ARG_WEIGHTS, memory(memory::desc({depth, cols}, src_type(), {ldw(), 1}), eng, w)},
            {DNNL_ARG_DST, memory(memory::desc({rows, cols}, tile_dst, {out, 1}), eng, d)}};
        if (has_bias && !split)
          args.emplace(DNNL_ARG_BIAS,
                       memory(memory::desc({1, cols}, dt::f32, {out, 1}), eng, const_cast<float*>(b) + j * t.cols));
        e.prim.execute(*strm, args);
        strm->wait();
      } catch (...) {
        keep();
      }
    }
    // (The loop's barrier: every partial sum is written.)
    if (split) {  // y = ((p0 + p1) + p2) ... + bias, element by element in that order
      const int64_t chunk = 256, chunks = (m * out + chunk - 1) / chunk;
#if defined(ATTEND_HAVE_OPENMP)
#pragma omp for schedule(static)
#endif
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t e0 = c * chunk, e1 = std::min(m * out, e0 + chunk);
        for (int64_t e = e0; e < e1; ++e) {
          float acc = partial[e];
          for (int64_t kb = 1; kb < t.k_tiles; ++kb) acc += partial[kb * m * out + e];
          if (b) acc += b[e % out];
          if (dst_type == dt::bf16)
            static_cast<uint16_t*>(dst)[e] = numeric::to_bf16(acc);
          else
            static_cast<float*>(dst)[e] = acc;
        }
      }
    }
  }
  if (failure) std::rethrow_exception(failure);
}

Linear::Linear(const float* w, bool out_in, int64_t in, int64_t out, const float* bias, WeightType type,
               LinearForce force)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.in = in;
  s.out = out;
  s.type = type;
  s.has_bias = bias != nullptr;
  try {
    // The layout the kernel for a typical prefill size prefers; oneDNN 2.6's brgemm matmul uses the
    // same packing for every m, so one packed copy serves all row counts.
    std::optional<dnnl::matmul::primitive_desc> pd;
    s.widened_bf16 = force.widened_bf16 && type == WeightType::bf16;
    try {
      pd = s.describe(512, out, memory::desc({in, out}, s.src_type(), tag::any), dt::f32);
    } catch (const dnnl::error& e) {
      if (e.status != dnnl_unimplemented || !s.bf16_math()) throw;
      s.widened_bf16 = true;  // no bf16 matmul on this CPU
      pd = s.describe(512, out, memory::desc({in, out}, dt::f32, tag::any), dt::f32);
    }
    s.tiled = force.tiled || std::string(pd->impl_info_str()).rfind("brg", 0) != 0;
    s.packed_md = s.tiled ? memory::desc({in, out}, s.src_type(), {s.ldw(), 1}) : pd->weights_desc();
    if (type == WeightType::bf16) {  // (a malformed ATTEND_BF16_GEMV fails every bf16 projection)
      const kernels::Bf16GemvFn gemv = detail::bf16_decode_gemv();
      const int64_t gemv_rows = detail::bf16_decode_gemv_rows();  // (a malformed ATTEND_BF16_GEMV_ROWS too)
      if (s.bf16_math() && !s.tiled && !force.onednn_decode && ba16a64b2a(s.packed_md)) {
        s.gemv = gemv;
        s.gemv_k_padded = s.packed_md.data.padded_dims[0];
        s.gemv_rows = gemv_rows;
        s.gemv_l2 = detail::bf16_decode_gemv_l2_requests();
      }
    }
    // Source weights as f32 [in, out] (X·W) or [out, in] (nn.Linear, i.e. strides {1, in}).
    std::vector<float> rounded;
    const float* src = w;
    if (s.widened_bf16) {
      rounded.assign(w, w + in * out);
      for (float& v : rounded) v = numeric::from_bf16(numeric::to_bf16(v));
      src = rounded.data();
    }
    memory::desc user_md({in, out}, dt::f32, out_in ? memory::dims{1, in} : memory::dims{out, 1});
    memory user(user_md, cpu_engine(), const_cast<float*>(src));
    s.weight_pages = huge_page_buffer(s.packed_md.get_size());
    s.weights =
        s.weight_pages ? memory(s.packed_md, cpu_engine(), s.weight_pages.get()) : memory(s.packed_md, cpu_engine());
    dnnl::stream strm(cpu_engine());
    dnnl::reorder(user, s.weights).execute(strm, user, s.weights);
    if (bias) {
      s.bias = memory(memory::desc({1, out}, dt::f32, tag::ab), cpu_engine());
      std::memcpy(s.bias.get_data_handle(), bias, sizeof(float) * out);
    }
    strm.wait();
  } catch (const dnnl::error& e) {
    throw Error(ErrorCode::unsupported, std::string("oneDNN could not create the projection: ") + e.what());
  }
}

Linear::~Linear() = default;
Linear::Linear(Linear&&) noexcept = default;
Linear& Linear::operator=(Linear&&) noexcept = default;

int64_t Linear::in() const { return impl_->in; }
int64_t Linear::out() const { return impl_->out; }
size_t Linear::weight_bytes() const { return impl_->packed_md.get_size(); }
const void* Linear::weight_data() const { return impl_->weights.get_data_handle(); }
std::string Linear::implementation(int64_t m) const {
  const Impl& s = *impl_;
  std::string name;
  if (s.own_gemv(m)) {
    name = "attend bf16 gemv (vdpbf16ps over oneDNN's BA16a64b2a weights)";
  } else if (s.tiled) {
    const Impl::Tiling t = s.tiling(m);
    name = s.primitive(t.rows, t.cols, dt::f32, t.depth)->name + " (fixed tiles" +
           (t.k_tiles > 1 ? ", reduction in " + std::to_string(t.k_tiles) + " blocks)" : ")");
  } else {
    name = s.primitive(m, s.out, dt::f32)->name;
  }
  return s.widened_bf16 ? name + " (bf16 values in f32)" : name;
}

namespace {
// The scratchpad part of Linear's scratch, rounded to whole cache lines so the bf16 copy of x
// that follows it stays 64-byte aligned.
size_t scratchpad_floats(size_t bytes) { return ((bytes + 3) / 4 + 15) / 16 * 16; }
size_t round_up16(size_t floats) { return (floats + 15) / 16 * 16; }
}  // namespace

size_t Linear::scratch_floats(int64_t m, ActType xt, ActType yt) const {
  if (m == 0) return 0;
  const Impl& s = *impl_;
  const ActType dst = s.dst_act(yt);
  // x converted to the matmul's source type (bf16: half a float per element), y staged in f32.
  const size_t src_floats = !s.converts(xt)                ? 0
                            : s.src_act() == ActType::bf16 ? static_cast<size_t>(m * s.in + 1) / 2
                                                           : static_cast<size_t>(m * s.in);
  const size_t dst_floats = dst != yt ? static_cast<size_t>(m * s.out) : 0;
  // (Tiles use oneDNN's own scratchpads, and decode tiles partial sums.)
  const size_t pad =
      s.tiled || s.own_gemv(m) ? 0 : scratchpad_floats(s.primitive(m, s.out, dnnl_type(dst))->scratch_bytes);
  return pad + round_up16(src_floats) + round_up16(dst_floats) + (s.tiled ? s.partial_floats(m) : 0);
}

void Linear::run(const void* x, ActType xt, void* y, ActType yt, int64_t m, int threads, float* scratch) const {
  if (m == 0) return;
  const Impl& s = *impl_;
  const ActType dst_act = s.dst_act(yt);
  std::shared_ptr<const Impl::Entry> entry;
  size_t pad_floats = 0;
  if (!s.tiled && !s.own_gemv(m)) {
    entry = s.primitive(m, s.out, dnnl_type(dst_act));
    pad_floats = scratchpad_floats(entry->scratch_bytes);
  }
  float* rest = scratch + pad_floats;

  const dnnl::engine& eng = cpu_engine();
  void* src_ptr = const_cast<void*>(x);
  if (s.converts(xt)) {  // (bf16 x into bf16 weights, f32 into f32: read as they are)
    src_ptr = rest;
    if (s.src_act() == ActType::f32) {  // (widened bf16 weights: x rounded to bf16 values too)
      to_f32(x, xt, rest, m * s.in);
      if (s.widened_bf16 && xt != ActType::bf16)
        for (int64_t i = 0; i < m * s.in; ++i) rest[i] = numeric::from_bf16(numeric::to_bf16(rest[i]));
      rest += round_up16(static_cast<size_t>(m * s.in));
    } else if (xt == ActType::f32) {
      to_bf16(static_cast<const float*>(x), static_cast<uint16_t*>(src_ptr), m * s.in);
      rest += round_up16(static_cast<size_t>(m * s.in + 1) / 2);
    } else {  // f16 into bf16 weights: through f32, a row at a time (exact to f32, rounded once)
      uint16_t* out = static_cast<uint16_t*>(src_ptr);
      const uint16_t* in = static_cast<const uint16_t*>(x);
      for (int64_t i = 0; i < m * s.in; ++i) out[i] = numeric::to_bf16(numeric::from_f16(in[i]));
      rest += round_up16(static_cast<size_t>(m * s.in + 1) / 2);
    }
  }
  void* dst_ptr = dst_act == yt ? y : static_cast<void*>(rest);
  {
    OmpThreadLimit limit(threads);
    if (s.own_gemv(m)) {
      s.run_gemv(static_cast<const uint16_t*>(src_ptr), dst_ptr, dst_act == ActType::bf16, m);
    } else if (s.tiled) {
      float* partial = dst_ptr == y ? rest : rest + round_up16(static_cast<size_t>(m * s.out));
      s.run_tiles(src_ptr, dst_ptr, dnnl_type(dst_act), m, threads, partial);
    } else {
      memory src(memory::desc({m, s.in}, s.src_type(), tag::ab), eng, src_ptr);
      memory dst(memory::desc({m, s.out}, dnnl_type(dst_act), tag::ab), eng, dst_ptr);
      memory scratchpad(memory::desc({static_cast<memory::dim>(pad_floats * 4)}, dt::u8, tag::a), eng, scratch);
      dnnl::stream strm(eng);
      std::unordered_map<int, memory> args{
          {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, s.weights}, {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, scratchpad}};
      if (s.has_bias) args.emplace(DNNL_ARG_BIAS, s.bias);
      entry->prim.execute(strm, args);
      strm.wait();
    }
  }
  if (dst_ptr != y) from_f32(static_cast<const float*>(dst_ptr), yt, y, m * s.out);
}

}  // namespace attend::gemm

namespace attend {

std::string onednn_version() {
  const dnnl_version_t* v = dnnl::version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

std::string onednn_isa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

}  // namespace attend
