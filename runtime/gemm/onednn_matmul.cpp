#include "onednn_matmul.hpp"

#if defined(ATTEND_HAVE_OPENMP)
#include <omp.h>
#endif

#include <attend/error.hpp>
#include <attend/isa.hpp>
#include <cstring>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "../numeric/convert.hpp"

namespace attend::gemm {
namespace {

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

}  // namespace

struct Linear::Impl {
  int64_t in = 0, out = 0;
  WeightType type = WeightType::f32;
  memory::desc packed_md;
  memory weights, bias;
  bool has_bias = false;

  struct Entry {
    dnnl::matmul prim;
    size_t scratch_bytes;
    std::string name;
  };
  mutable std::shared_mutex mutex;
  mutable std::map<std::pair<int64_t, dt>, std::shared_ptr<const Entry>> primitives;  // by (m, dst type)

  dt src_type() const { return type == WeightType::bf16 ? dt::bf16 : dt::f32; }
  ActType src_act() const { return type == WeightType::bf16 ? ActType::bf16 : ActType::f32; }
  // What oneDNN writes for y of type yt: bf16 straight from a bf16 matmul, else f32.
  ActType dst_act(ActType yt) const {
    return type == WeightType::bf16 && yt == ActType::bf16 ? ActType::bf16 : ActType::f32;
  }

  dnnl::matmul::primitive_desc describe(int64_t m, const memory::desc& wmd, dt dst_type = dt::f32) const {
    memory::desc src({m, in}, src_type(), tag::ab), dst({m, out}, dst_type, tag::ab);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (has_bias) {
      memory::desc bmd({1, out}, dt::f32, tag::ab);
      return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wmd, bmd, dst), attr, cpu_engine());
    }
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wmd, dst), attr, cpu_engine());
  }

  std::shared_ptr<const Entry> primitive(int64_t m, dt dst_type = dt::f32) const {
    const std::pair<int64_t, dt> key{m, dst_type};
    {
      std::shared_lock lock(mutex);
      auto it = primitives.find(key);
      if (it != primitives.end()) return it->second;
    }
    auto pd = describe(m, packed_md, dst_type);
    auto entry =
        std::make_shared<const Entry>(Entry{dnnl::matmul(pd), pd.scratchpad_desc().get_size(), pd.impl_info_str()});
    std::unique_lock lock(mutex);
    if (primitives.size() >= 256) primitives.clear();  // bound the cache for workloads with many distinct m
    return primitives.emplace(key, entry).first->second;
  }
};

Linear::Linear(const float* w, bool out_in, int64_t in, int64_t out, const float* bias, WeightType type)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.in = in;
  s.out = out;
  s.type = type;
  s.has_bias = bias != nullptr;
  try {
    // The layout the kernel for a typical prefill size prefers; oneDNN 2.6's brgemm matmul uses the
    // same packing for every m, so one packed copy serves all row counts.
    s.packed_md = s.describe(512, memory::desc({in, out}, s.src_type(), tag::any)).weights_desc();
    // Source weights as f32 [in, out] (X·W) or [out, in] (nn.Linear, i.e. strides {1, in}).
    memory::desc user_md({in, out}, dt::f32, out_in ? memory::dims{1, in} : memory::dims{out, 1});
    memory user(user_md, cpu_engine(), const_cast<float*>(w));
    s.weights = memory(s.packed_md, cpu_engine());
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
std::string Linear::implementation(int64_t m) const { return impl_->primitive(m)->name; }

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
  const size_t src_floats = xt == s.src_act()              ? 0
                            : s.src_act() == ActType::bf16 ? static_cast<size_t>(m * s.in + 1) / 2
                                                           : static_cast<size_t>(m * s.in);
  const size_t dst_floats = dst != yt ? static_cast<size_t>(m * s.out) : 0;
  return scratchpad_floats(s.primitive(m, dnnl_type(dst))->scratch_bytes) + round_up16(src_floats) + dst_floats;
}

void Linear::run(const void* x, ActType xt, void* y, ActType yt, int64_t m, int threads, float* scratch) const {
  if (m == 0) return;
  const Impl& s = *impl_;
  const ActType dst_act = s.dst_act(yt);
  auto entry = s.primitive(m, dnnl_type(dst_act));
  const size_t pad_floats = scratchpad_floats(entry->scratch_bytes);
  float* rest = scratch + pad_floats;

  const dnnl::engine& eng = cpu_engine();
  void* src_ptr = const_cast<void*>(x);
  if (xt != s.src_act()) {  // (bf16 x into bf16 weights, f32 into f32: read as they are)
    src_ptr = rest;
    if (s.src_act() == ActType::f32) {
      to_f32(x, xt, rest, m * s.in);
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
  memory src(memory::desc({m, s.in}, s.src_type(), tag::ab), eng, src_ptr);
  memory dst(memory::desc({m, s.out}, dnnl_type(dst_act), tag::ab), eng, dst_ptr);
  memory scratchpad(memory::desc({static_cast<memory::dim>(pad_floats * 4)}, dt::u8, tag::a), eng, scratch);
  {
    OmpThreadLimit limit(threads);
    dnnl::stream strm(eng);
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, s.weights}, {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, scratchpad}};
    if (s.has_bias) args.emplace(DNNL_ARG_BIAS, s.bias);
    entry->prim.execute(strm, args);
    strm.wait();
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
