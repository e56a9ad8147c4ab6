#include <attend/error.hpp>
#include <attend/kv_cache.hpp>
#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "../dispatch/registry.hpp"
#include "../exec/attention.hpp"
#include "../numeric/convert.hpp"
#include "kv_cache_access.hpp"

namespace attend {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
  }
  return "unknown";
}

struct KVCache::Impl {
  KVCacheConfig config;
  int64_t head_elements = 0;  // one (slot, head)'s K (or V): capacity rounded up to a key block, × head_dim
  size_t slot_bytes = 0;      // one slot's K (or V) storage
  std::unique_ptr<unsigned char[]> keys, values;
  std::vector<int64_t> lengths;
};

namespace {
[[noreturn]] void fail(const std::string& m) { throw Error(ErrorCode::invalid_argument, "KVCache: " + m); }
}  // namespace

KVCache::KVCache(const KVCacheConfig& c) : impl_(std::make_unique<Impl>()) {
  if (c.kv_heads <= 0 || c.head_dim <= 0 || c.slots <= 0 || c.capacity <= 0)
    fail("kv_heads, head_dim, slots and capacity must be > 0 (got " + std::to_string(c.kv_heads) + ", " +
         std::to_string(c.head_dim) + ", " + std::to_string(c.slots) + ", " + std::to_string(c.capacity) + ")");
  if (c.capacity >= (int64_t{1} << 24)) fail("capacity must be below 2^24 tokens");
  impl_->config = c;
  const int64_t element_bytes = c.dtype == DType::f32 ? 4 : 2;
  const int64_t stored = (c.capacity + kernels::kKeyBlock - 1) / kernels::kKeyBlock * kernels::kKeyBlock;
  impl_->head_elements = stored * c.head_dim;
  impl_->slot_bytes = static_cast<size_t>(c.kv_heads * impl_->head_elements * element_bytes);
  const size_t total = impl_->slot_bytes * static_cast<size_t>(c.slots);
  impl_->keys.reset(new unsigned char[total]());
  impl_->values.reset(new unsigned char[total]());
  impl_->lengths.assign(static_cast<size_t>(c.slots), 0);
}

KVCache::~KVCache() = default;
KVCache::KVCache(KVCache&&) noexcept = default;
KVCache& KVCache::operator=(KVCache&&) noexcept = default;

const KVCacheConfig& KVCache::config() const { return impl_->config; }

int64_t KVCache::length(int64_t seq) const {
  if (seq < 0 || seq >= impl_->config.slots)
    fail("sequence " + std::to_string(seq) + " is outside [0, " + std::to_string(impl_->config.slots) + ")");
  return impl_->lengths[static_cast<size_t>(seq)];
}

void KVCache::reset(int64_t seq) { truncate(seq, 0); }

void KVCache::truncate(int64_t seq, int64_t tokens) {
  const int64_t len = length(seq);
  if (tokens < 0 || tokens > len)
    fail("truncate(" + std::to_string(seq) + ", " + std::to_string(tokens) + "): length is " + std::to_string(len));
  impl_->lengths[static_cast<size_t>(seq)] = tokens;
}

size_t KVCache::memory_bytes() const { return 2 * impl_->slot_bytes * static_cast<size_t>(impl_->config.slots); }

namespace {

std::string dims(const TensorView& t) {
  std::ostringstream s;
  s << '[' << t.dim(0) << ',' << t.dim(1) << ',' << t.dim(2) << ',' << t.dim(3) << ']';
  return s.str();
}

// New K/V views [B, Hkv, N, D] against the cache: shapes, pointers, strides.
void check_new_kv(const char* who, const KVCacheConfig& c, const TensorView& k, const TensorView& v, int64_t batch) {
  for (const TensorView* t : {&k, &v}) {
    if (t->dim(0) != batch || t->dim(1) != c.kv_heads || t->dim(3) != c.head_dim || t->dim(2) < 0)
      fail(std::string(who) + ": k/v must be [" + std::to_string(batch) + ", " + std::to_string(c.kv_heads) + ", N, " +
           std::to_string(c.head_dim) + "], got k " + dims(k) + ", v " + dims(v));
    for (int i = 0; i < 4; ++i)
      if (t->stride(i) < 0) fail(std::string(who) + ": negative stride");
    if (t->stride(3) != 1 && t->dim(3) > 1) fail(std::string(who) + ": k/v last dimension must be contiguous");
    if (t->numel() > 0 && !t->data()) fail(std::string(who) + ": null k/v data");
  }
  if (k.dim(2) != v.dim(2)) fail(std::string(who) + ": k has " + dims(k) + " but v " + dims(v));
}

}  // namespace

void KVCache::append(int64_t seq, const TensorView& k, const TensorView& v) {
  check_new_kv("KVCache::append", impl_->config, k, v, 1);
  const int64_t len = length(seq), n = k.dim(2);
  if (len + n > impl_->config.capacity)
    fail("append: sequence " + std::to_string(seq) + " holds " + std::to_string(len) + " tokens; " + std::to_string(n) +
         " more exceed its capacity " + std::to_string(impl_->config.capacity));
  for (int64_t h = 0; h < impl_->config.kv_heads; ++h)
    for (int64_t t = 0; t < n; ++t)
      detail::KVCacheAccess::store(*this, seq, h, len + t, k.data() + h * k.stride(1) + t * k.stride(2),
                                   v.data() + h * v.stride(1) + t * v.stride(2));
  impl_->lengths[static_cast<size_t>(seq)] = len + n;
}

void cached_attention(const TensorView& q, const TensorView& k_new, const TensorView& v_new, KVCache& cache,
                      std::span<const int64_t> seqs, const TensorView& o, const SdpaOptions& opt) {
  const KVCacheConfig& c = cache.config();
  const int64_t B = q.dim(0), Hq = q.dim(1), N = q.dim(2), D = q.dim(3);
  check_new_kv("cached_attention", c, k_new, v_new, B);
  if (D != c.head_dim || k_new.dim(2) != N)
    fail("cached_attention: q " + dims(q) + " does not match k_new " + dims(k_new));
  if (o.dim(0) != B || o.dim(1) != Hq || o.dim(2) != N || o.dim(3) != D)
    fail("cached_attention: o " + dims(o) + " must match q " + dims(q));
  if (Hq <= 0 || Hq % c.kv_heads != 0) fail("cached_attention: q heads must be a positive multiple of kv heads");
  if (!q.data() || !o.mutable_data()) fail("cached_attention: null or read-only q/o");
  if (q.stride(3) != 1 || o.stride(3) != 1) fail("cached_attention: q/o last dimension must be contiguous");
  if (!opt.kv_lens.empty() || opt.bias.data()) fail("cached_attention: kv_lens and bias are not supported");
  if (opt.window < 0 || opt.num_threads < 0 || !std::isfinite(opt.scale)) fail("cached_attention: bad options");
  if (static_cast<int64_t>(seqs.size()) != B) fail("cached_attention: seqs must have B entries");
  std::vector<int64_t> start(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t seq = seqs[static_cast<size_t>(b)];
    start[static_cast<size_t>(b)] = cache.length(seq);
    for (int64_t j = 0; j < b; ++j)
      if (seqs[static_cast<size_t>(j)] == seq) fail("cached_attention: sequence id appears twice");
    if (start[static_cast<size_t>(b)] + N > c.capacity)
      fail("cached_attention: sequence " + std::to_string(seq) + " would exceed its capacity " +
           std::to_string(c.capacity));
  }
  const kernels::KernelTable& table = dispatch::kernel_table_for(opt.isa);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < c.kv_heads; ++h)
      for (int64_t t = 0; t < N; ++t)
        detail::KVCacheAccess::store(cache, seqs[static_cast<size_t>(b)], h, start[static_cast<size_t>(b)] + t,
                                     k_new.data() + b * k_new.stride(0) + h * k_new.stride(1) + t * k_new.stride(2),
                                     v_new.data() + b * v_new.stride(0) + h * v_new.stride(1) + t * v_new.stride(2));
  for (int64_t b = 0; b < B; ++b)
    detail::KVCacheAccess::set_length(cache, seqs[static_cast<size_t>(b)], start[static_cast<size_t>(b)] + N);

  exec::Problem p;
  p.batch = B;
  p.q_heads = Hq;
  p.kv_heads = c.kv_heads;
  p.num_queries = N;
  p.head_dim = p.value_dim = D;
  p.q_head_stride = q.stride(1);
  p.q_row_stride = q.stride(2);
  p.o_head_stride = o.stride(1);
  p.o_row_stride = o.stride(2);
  p.k_head_stride = p.v_head_stride = detail::KVCacheAccess::head_stride(cache);
  p.k_row_stride = p.v_row_stride = D;
  p.k_blocked = true;
  p.kv_type = detail::KVCacheAccess::kv_type(cache);
  p.causal = true;
  p.window = opt.window;
  p.scale = opt.scale != 0.0f ? opt.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  p.entries.resize(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    exec::BatchEntry& e = p.entries[static_cast<size_t>(b)];
    e.q = q.data() + b * q.stride(0);
    e.o = o.mutable_data() + b * o.stride(0);
    e.k = detail::KVCacheAccess::keys(cache, seqs[static_cast<size_t>(b)]);
    e.v = detail::KVCacheAccess::values(cache, seqs[static_cast<size_t>(b)]);
    e.num_keys = e.valid_keys = start[static_cast<size_t>(b)] + N;
  }
  exec::run_attention(p, table, opt.num_threads);
}

namespace detail {
kernels::KvType KVCacheAccess::kv_type(const KVCache& c) {
  switch (c.impl_->config.dtype) {
    case DType::bf16: return kernels::KvType::bf16;
    case DType::f16: return kernels::KvType::f16;
    case DType::f32: break;
  }
  return kernels::KvType::f32;
}
int64_t KVCacheAccess::head_stride(const KVCache& c) { return c.impl_->head_elements; }
void* KVCacheAccess::keys(KVCache& c, int64_t seq) { return c.impl_->keys.get() + c.impl_->slot_bytes * seq; }
void* KVCacheAccess::values(KVCache& c, int64_t seq) { return c.impl_->values.get() + c.impl_->slot_bytes * seq; }
const void* KVCacheAccess::keys(const KVCache& c, int64_t seq) {
  return c.impl_->keys.get() + c.impl_->slot_bytes * seq;
}
const void* KVCacheAccess::values(const KVCache& c, int64_t seq) {
  return c.impl_->values.get() + c.impl_->slot_bytes * seq;
}
void KVCacheAccess::set_length(KVCache& c, int64_t seq, int64_t length) {
  c.impl_->lengths[static_cast<size_t>(seq)] = length;
}
void KVCacheAccess::store(KVCache& c, int64_t seq, int64_t head, int64_t pos, const float* k, const float* v) {
  const KVCacheConfig& cfg = c.impl_->config;
  const int64_t hd = cfg.head_dim, kb = kernels::kKeyBlock;
  const int64_t head_at = head * c.impl_->head_elements;
  // K blocked (element d of token pos at block pos / kb, row d, lane pos % kb), V row-major.
  const size_t k_at = static_cast<size_t>(head_at + (pos / kb) * kb * hd + pos % kb);
  const size_t v_at = static_cast<size_t>(head_at + pos * hd);
  void* kp = keys(c, seq);
  void* vp = values(c, seq);
  switch (cfg.dtype) {
    case DType::f32:
      for (int64_t d = 0; d < hd; ++d) static_cast<float*>(kp)[k_at + static_cast<size_t>(d * kb)] = k[d];
      std::memcpy(static_cast<float*>(vp) + v_at, v, sizeof(float) * hd);
      break;
    case DType::bf16:
      for (int64_t d = 0; d < hd; ++d) {
        static_cast<uint16_t*>(kp)[k_at + static_cast<size_t>(d * kb)] = numeric::to_bf16(k[d]);
        static_cast<uint16_t*>(vp)[v_at + static_cast<size_t>(d)] = numeric::to_bf16(v[d]);
      }
      break;
    case DType::f16:
      for (int64_t d = 0; d < hd; ++d) {
        static_cast<uint16_t*>(kp)[k_at + static_cast<size_t>(d * kb)] = numeric::to_f16(k[d]);
        static_cast<uint16_t*>(vp)[v_at + static_cast<size_t>(d)] = numeric::to_f16(v[d]);
      }
      break;
  }
}
}  // namespace detail

}  // namespace attend
