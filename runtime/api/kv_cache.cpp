#include <attend/error.hpp>
#include <attend/kv_cache.hpp>
#include <cstring>
#include <string>
#include <vector>

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
  int64_t element_bytes = 4;
  size_t slot_bytes = 0;  // one slot's K (or V) storage
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
  impl_->element_bytes = c.dtype == DType::f32 ? 4 : 2;
  impl_->slot_bytes = static_cast<size_t>(c.kv_heads * c.capacity * c.head_dim * impl_->element_bytes);
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

namespace detail {
int64_t KVCacheAccess::element_bytes(const KVCache& c) { return c.impl_->element_bytes; }
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
}  // namespace detail

}  // namespace attend
