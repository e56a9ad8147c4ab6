#include "kv_store.hpp"

#include <sys/mman.h>

#include <cstring>
#include <new>
#include <utility>

#include "../numeric/convert.hpp"

namespace attend::detail {

namespace {
kernels::KvType kv_type_of(DType t) {
  switch (t) {
    case DType::bf16: return kernels::KvType::bf16;
    case DType::f16: return kernels::KvType::f16;
    case DType::f32: break;
  }
  return kernels::KvType::f32;
}

template <class Convert>
void store_rows(uint16_t* k, uint16_t* v, int64_t index, int64_t count, int64_t hd, const float* ks, int64_t k_stride,
                const float* vs, int64_t v_stride, Convert convert) {
  constexpr int64_t kb = kernels::kKeyBlock;
  for (int64_t t = 0; t < count; ++t) {
    const int64_t pos = index + t;
    uint16_t* kd = k + (pos / kb) * kb * hd + pos % kb;
    uint16_t* vd = v + pos * hd;
    const float* kr = ks + t * k_stride;
    const float* vr = vs + t * v_stride;
    for (int64_t d = 0; d < hd; ++d) {
      kd[d * kb] = convert(kr[d]);
      vd[d] = convert(vr[d]);
    }
  }
}
}  // namespace

KvStore::KvStore(DType dtype, int64_t kv_heads, int64_t head_dim, int64_t page_tokens, int64_t pages, bool head_major)
    : head_major_(head_major),
      kv_type_(kv_type_of(dtype)),
      kv_heads_(kv_heads),
      head_dim_(head_dim),
      page_tokens_(page_tokens),
      pages_(pages),
      element_bytes_(dtype == DType::f32 ? 4 : 2) {
  half_bytes_ = static_cast<size_t>(kv_heads * pages * page_elems()) * element_bytes_;
  if (half_bytes_ == 0) return;
  void* p = mmap(nullptr, 2 * half_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
#if defined(MADV_HUGEPAGE)
  // Transparent huge pages where the system allows them on request (Debian's default is
  // "madvise"): decode walks every sequence's pages, and a paged cache's are scattered through the
  // pool, so with 4 KB pages each page of a sequence costs a TLB miss.
  madvise(p, 2 * half_bytes_, MADV_HUGEPAGE);
#endif
  keys_ = static_cast<unsigned char*>(p);
  values_ = keys_ + half_bytes_;
}

KvStore::~KvStore() {
  if (keys_) munmap(keys_, 2 * half_bytes_);
}

KvStore::KvStore(KvStore&& o) noexcept { *this = std::move(o); }

KvStore& KvStore::operator=(KvStore&& o) noexcept {
  if (this == &o) return *this;
  if (keys_) munmap(keys_, 2 * half_bytes_);
  kv_type_ = o.kv_type_;
  kv_heads_ = o.kv_heads_;
  head_dim_ = o.head_dim_;
  page_tokens_ = o.page_tokens_;
  pages_ = o.pages_;
  element_bytes_ = o.element_bytes_;
  head_major_ = o.head_major_;
  half_bytes_ = o.half_bytes_;
  keys_ = std::exchange(o.keys_, nullptr);
  values_ = std::exchange(o.values_, nullptr);
  o.half_bytes_ = 0;
  return *this;
}

void KvStore::store(int64_t page, int64_t head, int64_t index, int64_t count, const float* k, int64_t k_stride,
                    const float* v, int64_t v_stride) {
  const int64_t hd = head_dim_;
  unsigned char* kp = keys_ + at(page, head);
  unsigned char* vp = values_ + at(page, head);
  switch (kv_type_) {
    case kernels::KvType::f32: {
      constexpr int64_t kb = kernels::kKeyBlock;
      float* kd = reinterpret_cast<float*>(kp);
      float* vd = reinterpret_cast<float*>(vp);
      for (int64_t t = 0; t < count; ++t) {
        const int64_t pos = index + t;
        float* kblock = kd + (pos / kb) * kb * hd + pos % kb;
        const float* kr = k + t * k_stride;
        for (int64_t d = 0; d < hd; ++d) kblock[d * kb] = kr[d];
        std::memcpy(vd + pos * hd, v + t * v_stride, sizeof(float) * static_cast<size_t>(hd));
      }
      break;
    }
    case kernels::KvType::bf16:
      store_rows(reinterpret_cast<uint16_t*>(kp), reinterpret_cast<uint16_t*>(vp), index, count, hd, k, k_stride, v,
                 v_stride, [](float x) { return numeric::to_bf16(x); });
      break;
    case kernels::KvType::f16:
      store_rows(reinterpret_cast<uint16_t*>(kp), reinterpret_cast<uint16_t*>(vp), index, count, hd, k, k_stride, v,
                 v_stride, [](float x) { return numeric::to_f16(x); });
      break;
  }
}

void KvStore::copy_page(int64_t from, int64_t to, int64_t tokens) {
  // K is blocked: whole key blocks are copied (the rest of a partial block is never read as a key).
  const int64_t blocked = (tokens + kernels::kKeyBlock - 1) / kernels::kKeyBlock * kernels::kKeyBlock;
  const size_t k_bytes = static_cast<size_t>(blocked * head_dim_) * element_bytes_;
  const size_t v_bytes = static_cast<size_t>(tokens * head_dim_) * element_bytes_;
  for (int64_t h = 0; h < kv_heads_; ++h) {
    const size_t src = at(from, h), dst = at(to, h);
    std::memcpy(keys_ + dst, keys_ + src, k_bytes);
    std::memcpy(values_ + dst, values_ + src, v_bytes);
  }
}

}  // namespace attend::detail
