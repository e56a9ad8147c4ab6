#include <atomic>
#include <attend/error.hpp>
#include <attend/kv_cache.hpp>
#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "../cache/kv_store.hpp"
#include "attention_call.hpp"
#include "kv_cache_access.hpp"

namespace attend {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i8: return "i8";
  }
  return "unknown";
}

struct KVCache::Impl {
  KVCacheConfig config;
  // One page per slot of the capacity rounded up to whole key blocks: the paged cache's layout
  // with pages as long as a sequence may grow.
  detail::KvStore store;
  std::vector<int64_t> lengths;
  mutable std::atomic<int> use{0};  // detail::CacheUse: > 0 readers, −1 a modifier
};

namespace {
[[noreturn]] void fail(const std::string& m) { throw Error(ErrorCode::invalid_argument, "KVCache: " + m); }
}  // namespace

KVCache::KVCache(const KVCacheConfig& c) : impl_(std::make_unique<Impl>()) {
  if (c.value_dim < 0) fail("value_dim must be >= 0 (0: head_dim), got " + std::to_string(c.value_dim));
  if (c.kv_heads <= 0 || c.head_dim <= 0 || c.slots <= 0 || c.capacity <= 0)
    fail("kv_heads, head_dim, slots and capacity must be > 0 (got " + std::to_string(c.kv_heads) + ", " +
         std::to_string(c.head_dim) + ", " + std::to_string(c.slots) + ", " + std::to_string(c.capacity) + ")");
  if (c.capacity >= (int64_t{1} << 24)) fail("capacity must be below 2^24 tokens");
  if (dtype_size(c.dtype) == 0) fail("unknown dtype " + std::to_string(static_cast<int>(c.dtype)));
  impl_->config = c;
  if (impl_->config.value_dim == 0) impl_->config.value_dim = c.head_dim;
  const int64_t stored = (c.capacity + kernels::kKeyBlock - 1) / kernels::kKeyBlock * kernels::kKeyBlock;
  impl_->store = detail::KvStore(c.dtype, c.kv_heads, c.head_dim, impl_->config.value_dim, stored, c.slots);
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

int64_t KVCache::remaining(int64_t seq) const { return impl_->config.capacity - length(seq); }

void KVCache::truncate(int64_t seq, int64_t tokens) {
  const detail::CacheUse use(*this, true, "KVCache::truncate");
  const int64_t len = length(seq);
  if (tokens < 0 || tokens > len)
    fail("truncate(" + std::to_string(seq) + ", " + std::to_string(tokens) + "): length is " + std::to_string(len));
  impl_->lengths[static_cast<size_t>(seq)] = tokens;
}

size_t KVCache::memory_bytes() const { return impl_->store.bytes(); }

namespace {

std::string dims(const TensorView& t) {
  std::ostringstream s;
  s << '[' << t.dim(0) << ',' << t.dim(1) << ',' << t.dim(2) << ',' << t.dim(3) << ']';
  return s.str();
}

// New K/V views [B, Hkv, N, D] against the cache: shapes, pointers, strides.
void check_new_kv(const char* who, const KVCacheConfig& c, const TensorView& k, const TensorView& v, int64_t batch) {
  for (const TensorView* t : {&k, &v}) {
    const int64_t dim = t == &k ? c.head_dim : c.value_dim;
    if (t->dim(0) != batch || t->dim(1) != c.kv_heads || t->dim(3) != dim || t->dim(2) < 0)
      fail(std::string(who) + ": k must be [" + std::to_string(batch) + ", " + std::to_string(c.kv_heads) + ", N, " +
           std::to_string(c.head_dim) + "] and v [" + std::to_string(batch) + ", " + std::to_string(c.kv_heads) +
           ", N, " + std::to_string(c.value_dim) + "], got k " + dims(k) + ", v " + dims(v));
    detail::check_view(who, t == &k ? "k" : "v", *t);  // strides, contiguity, null data: as every entry point
  }
  if (k.dim(2) != v.dim(2)) fail(std::string(who) + ": k has " + dims(k) + " but v " + dims(v));
  detail::check_dtype(who, "v", v, &k, "k");
}

}  // namespace

void KVCache::append(int64_t seq, const TensorView& k, const TensorView& v) {
  const detail::CacheUse use(*this, true, "KVCache::append");
  check_new_kv("KVCache::append", impl_->config, k, v, 1);
  const int64_t seqs[1] = {seq};
  const int64_t len = detail::check_cache_batch("KVCache::append", *this, seqs, 1, k.dim(2), impl_->config.kv_heads,
                                                impl_->config.head_dim, impl_->config.value_dim)[0];
  const int64_t n = k.dim(2);
  for (int64_t h = 0; h < impl_->config.kv_heads; ++h)
    impl_->store.store(seq, h, len, n, detail::element_at(k, 0, h), k.stride(2), detail::element_at(v, 0, h),
                       v.stride(2), detail::elem_type(k.dtype()));
  impl_->lengths[static_cast<size_t>(seq)] = len + n;
}

void cached_attention(const TensorView& q, const TensorView& k_new, const TensorView& v_new, KVCache& cache,
                      std::span<const int64_t> seqs, const TensorView& o, const SdpaOptions& opt) {
  detail::AttentionCall c = detail::call_from_options("cached_attention", q, k_new, v_new, o, opt);
  c.causal = true;  // implied; kv_lens and bias are rejected by the validator
  c.cache = &cache;
  c.seqs = seqs;
  c.append = true;
  detail::run(c);
}

namespace detail {
kernels::KvType KVCacheAccess::kv_type(const KVCache& c) { return c.impl_->store.kv_type(); }
int64_t KVCacheAccess::head_tokens(const KVCache& c) { return c.impl_->store.head_tokens(); }
const void* KVCacheAccess::keys(const KVCache& c, int64_t seq) { return c.impl_->store.keys(seq); }
const void* KVCacheAccess::values(const KVCache& c, int64_t seq) { return c.impl_->store.values(seq); }
const float* KVCacheAccess::key_scales(const KVCache& c, int64_t seq) { return c.impl_->store.key_scales(seq); }
const float* KVCacheAccess::value_scales(const KVCache& c, int64_t seq) { return c.impl_->store.value_scales(seq); }
int64_t KVCacheAccess::length(const KVCache& c, int64_t seq) { return c.impl_->lengths[static_cast<size_t>(seq)]; }
std::atomic<int>& KVCacheAccess::use_state(const KVCache& c) { return c.impl_->use; }
void KVCacheAccess::storage_ranges(const KVCache& c, int64_t seq, std::vector<std::pair<const void*, size_t>>& out) {
  c.impl_->store.page_ranges(seq, c.impl_->lengths[static_cast<size_t>(seq)], out);
}
void KVCacheAccess::set_length(KVCache& c, int64_t seq, int64_t length) {
  c.impl_->lengths[static_cast<size_t>(seq)] = length;
}
void KVCacheAccess::store(KVCache& c, int64_t seq, int64_t head, int64_t pos, int64_t count, const void* k,
                          int64_t k_stride, const void* v, int64_t v_stride, kernels::KvType src) {
  c.impl_->store.store(seq, head, pos, count, k, k_stride, v, v_stride, src);
}
}  // namespace detail

}  // namespace attend
