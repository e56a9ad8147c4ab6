#include "kv_store.hpp"

#include <cstdint>
#include <cstring>
#include <new>
#include <utility>

#include "../context/huge_pages.hpp"
#include "../numeric/convert.hpp"

namespace attend::detail {

namespace {

kernels::KvType kv_type_of(DType t) {
  switch (t) {
    case DType::bf16: return kernels::KvType::bf16;
    case DType::f16: return kernels::KvType::f16;
    case DType::i8: return kernels::KvType::i8;
    case DType::f32: break;
  }
  return kernels::KvType::f32;
}

// Source elements (an f32, bf16 or f16 tensor) as f32.
struct FromF32 {
  static float get(const void* p, int64_t i) { return static_cast<const float*>(p)[i]; }
};
struct FromBf16 {
  static float get(const void* p, int64_t i) { return numeric::from_bf16(static_cast<const uint16_t*>(p)[i]); }
};
struct FromF16 {
  static float get(const void* p, int64_t i) { return numeric::from_f16(static_cast<const uint16_t*>(p)[i]); }
};

// Token t's K row of head_dim source elements at ks + t·k_stride is written to blocked K at
// in-page position index + t, its V row to row index + t, each element through `convert`.
template <class Src, class Dst, class Convert>
void store_rows(Dst* k, Dst* v, int64_t index, int64_t count, int64_t hd, int64_t dv, const void* ks, int64_t k_stride,
                const void* vs, int64_t v_stride, int64_t src_bytes, Convert convert) {
  constexpr int64_t kb = kernels::kKeyBlock;
  for (int64_t t = 0; t < count; ++t) {
    const int64_t pos = index + t;
    Dst* kd = k + (pos / kb) * kb * hd + pos % kb;
    Dst* vd = v + pos * dv;
    const void* kr = static_cast<const char*>(ks) + t * k_stride * src_bytes;
    const void* vr = static_cast<const char*>(vs) + t * v_stride * src_bytes;
    for (int64_t d = 0; d < hd; ++d) kd[d * kb] = convert(Src::get(kr, d));
    for (int64_t d = 0; d < dv; ++d) vd[d] = convert(Src::get(vr, d));
  }
}

// i8: each token's K row and V row quantised with its own scale (numeric::quantize_i8), read from
// the source twice instead of staged (an append allocates nothing).
template <class Src>
void store_rows_i8(int8_t* k, int8_t* v, float* k_scales, float* v_scales, int64_t index, int64_t count, int64_t hd,
                   int64_t dv, const void* ks, int64_t k_stride, const void* vs, int64_t v_stride, int64_t src_bytes) {
  constexpr int64_t kb = kernels::kKeyBlock;
  for (int64_t t = 0; t < count; ++t) {
    const int64_t pos = index + t;
    const void* kr = static_cast<const char*>(ks) + t * k_stride * src_bytes;
    const void* vr = static_cast<const char*>(vs) + t * v_stride * src_bytes;
    int8_t* kd = k + (pos / kb) * kb * hd + pos % kb;
    int8_t* vd = v + pos * dv;
    k_scales[pos] = numeric::quantize_i8(
        hd, [kr](int64_t d) { return Src::get(kr, d); }, [kd](int64_t d, int8_t q) { kd[d * kb] = q; });
    v_scales[pos] = numeric::quantize_i8(
        dv, [vr](int64_t d) { return Src::get(vr, d); }, [vd](int64_t d, int8_t q) { vd[d] = q; });
  }
}

template <class Src>
void store_typed(kernels::KvType storage, unsigned char* kp, unsigned char* vp, int64_t index, int64_t count,
                 int64_t hd, int64_t dv, const void* k, int64_t k_stride, const void* v, int64_t v_stride,
                 int64_t src_bytes) {
  switch (storage) {
    case kernels::KvType::f32:
      store_rows<Src>(reinterpret_cast<float*>(kp), reinterpret_cast<float*>(vp), index, count, hd, dv, k, k_stride, v,
                      v_stride, src_bytes, [](float x) { return x; });
      break;
    case kernels::KvType::bf16:
      store_rows<Src>(reinterpret_cast<uint16_t*>(kp), reinterpret_cast<uint16_t*>(vp), index, count, hd, dv, k,
                      k_stride, v, v_stride, src_bytes, [](float x) { return numeric::to_bf16(x); });
      break;
    case kernels::KvType::f16:
      store_rows<Src>(reinterpret_cast<uint16_t*>(kp), reinterpret_cast<uint16_t*>(vp), index, count, hd, dv, k,
                      k_stride, v, v_stride, src_bytes, [](float x) { return numeric::to_f16(x); });
      break;
    case kernels::KvType::i8: break;  // (store_rows_i8, with the scales)
  }
}
}  // namespace

KvStore::KvStore(DType dtype, int64_t kv_heads, int64_t head_dim, int64_t value_dim, int64_t page_tokens, int64_t pages,
                 bool head_major)
    : head_major_(head_major),
      kv_type_(kv_type_of(dtype)),
      kv_heads_(kv_heads),
      head_dim_(head_dim),
      value_dim_(value_dim),
      page_tokens_(page_tokens),
      pages_(pages),
      element_bytes_(dtype_size(dtype)) {
  const size_t rows = static_cast<size_t>(kv_heads * pages * page_tokens);
  // (rows is a multiple of 16: the scales after K and V stay 16-byte aligned)
  k_bytes_ = rows * static_cast<size_t>(head_dim) * element_bytes_;
  v_bytes_ = rows * static_cast<size_t>(value_dim) * element_bytes_;
  if (dtype == DType::i8) scale_bytes_ = rows * sizeof(float);
  if (k_bytes_ == 0) return;
  // Huge pages (map_huge_pages): decode walks every sequence's pages, and a paged cache's are
  // scattered through the pool, so with 4 KB pages each page of a sequence costs a TLB miss.
  void* p = map_huge_pages(bytes(), mapped_);
  keys_ = static_cast<unsigned char*>(p);
  values_ = keys_ + k_bytes_;
  if (scale_bytes_) {
    k_scales_ = reinterpret_cast<float*>(keys_ + k_bytes_ + v_bytes_);
    v_scales_ = reinterpret_cast<float*>(keys_ + k_bytes_ + v_bytes_ + scale_bytes_);
  }
}

KvStore::~KvStore() { unmap_huge_pages(keys_, mapped_); }

KvStore::KvStore(KvStore&& o) noexcept { *this = std::move(o); }

KvStore& KvStore::operator=(KvStore&& o) noexcept {
  if (this == &o) return *this;
  unmap_huge_pages(keys_, mapped_);
  kv_type_ = o.kv_type_;
  kv_heads_ = o.kv_heads_;
  head_dim_ = o.head_dim_;
  value_dim_ = o.value_dim_;
  page_tokens_ = o.page_tokens_;
  pages_ = o.pages_;
  element_bytes_ = o.element_bytes_;
  head_major_ = o.head_major_;
  k_bytes_ = o.k_bytes_;
  v_bytes_ = o.v_bytes_;
  scale_bytes_ = o.scale_bytes_;
  mapped_ = std::exchange(o.mapped_, 0);
  keys_ = std::exchange(o.keys_, nullptr);
  values_ = std::exchange(o.values_, nullptr);
  k_scales_ = std::exchange(o.k_scales_, nullptr);
  v_scales_ = std::exchange(o.v_scales_, nullptr);
  o.k_bytes_ = o.v_bytes_ = 0;
  o.scale_bytes_ = 0;
  return *this;
}

void KvStore::request_lines(const unsigned char* kp, const unsigned char* vp, int64_t head_row, int64_t index,
                            int64_t count) const {
  constexpr int64_t kb = kernels::kKeyBlock;
  const int64_t eb = static_cast<int64_t>(element_bytes_);
  auto request = [](const void* from, int64_t bytes) {  // every line of [from, from + bytes)
    const auto at = reinterpret_cast<uintptr_t>(from);
    for (uintptr_t l = at & ~uintptr_t{63}; l < at + static_cast<uintptr_t>(bytes); l += 64)
      __builtin_prefetch(reinterpret_cast<const void*>(l), 1, 3);
  };
  // A token's K element d sits in row d of its key block ([D][kb], a row of kb·eb ≤ 64 bytes
  // never straddles a line): its K touches every line of the block, whatever its column.
  for (int64_t blk = index / kb; blk <= (index + count - 1) / kb; ++blk)
    request(kp + blk * kb * head_dim_ * eb, kb * head_dim_ * eb);
  request(vp + index * value_dim_ * eb, count * value_dim_ * eb);
  if (k_scales_) {
    request(k_scales_ + head_row + index, count * static_cast<int64_t>(sizeof(float)));
    request(v_scales_ + head_row + index, count * static_cast<int64_t>(sizeof(float)));
  }
}

void KvStore::store(int64_t page, int64_t head, int64_t index, int64_t count, const void* k, int64_t k_stride,
                    const void* v, int64_t v_stride, kernels::KvType src) {
  unsigned char* kp = keys_ + k_at(page, head);
  unsigned char* vp = values_ + v_at(page, head);
  const int64_t bytes = kernels::kv_type_bytes(src);
  // A few tokens (a decode step's one): a token's K is spread over every line of its key block
  // (one element per 16-key row), rarely in cache; requested all at once (prefetcht0), the misses
  // overlap instead of each store waiting for its line in turn. One token of 8 kv heads (D 128)
  // after an LLC flush, alternated processes on a Zen 4: an i8 cache's 12.8–16.0 → 10.1–10.7 µs,
  // f32's 12.9–15.9 → 11.8–14.0 µs (of a decode step's ~40 µs fixed cost there).
  if (count > 0 && count < kernels::kKeyBlock)
    request_lines(kp, vp, static_cast<int64_t>(scale_at(page, head)), index, count);
  if (kv_type_ == kernels::KvType::i8) {
    int8_t* kq = reinterpret_cast<int8_t*>(kp);
    int8_t* vq = reinterpret_cast<int8_t*>(vp);
    float* ks = k_scales_ + scale_at(page, head);
    float* vs = v_scales_ + scale_at(page, head);
    switch (src) {
      case kernels::KvType::f32:
        return store_rows_i8<FromF32>(kq, vq, ks, vs, index, count, head_dim_, value_dim_, k, k_stride, v, v_stride,
                                      bytes);
      case kernels::KvType::bf16:
        return store_rows_i8<FromBf16>(kq, vq, ks, vs, index, count, head_dim_, value_dim_, k, k_stride, v, v_stride,
                                       bytes);
      case kernels::KvType::f16:
        return store_rows_i8<FromF16>(kq, vq, ks, vs, index, count, head_dim_, value_dim_, k, k_stride, v, v_stride,
                                      bytes);
      case kernels::KvType::i8: return;  // (never a tensor's type)
    }
  }
  switch (src) {
    case kernels::KvType::f32:
      store_typed<FromF32>(kv_type_, kp, vp, index, count, head_dim_, value_dim_, k, k_stride, v, v_stride, bytes);
      break;
    case kernels::KvType::bf16:
      store_typed<FromBf16>(kv_type_, kp, vp, index, count, head_dim_, value_dim_, k, k_stride, v, v_stride, bytes);
      break;
    case kernels::KvType::f16:
      store_typed<FromF16>(kv_type_, kp, vp, index, count, head_dim_, value_dim_, k, k_stride, v, v_stride, bytes);
      break;
    case kernels::KvType::i8: break;  // (never a tensor's type)
  }
}

void KvStore::copy_page(int64_t from, int64_t to, int64_t tokens) {
  // K is blocked: whole key blocks are copied (the rest of a partial block is never read as a key).
  const int64_t blocked = (tokens + kernels::kKeyBlock - 1) / kernels::kKeyBlock * kernels::kKeyBlock;
  const size_t k_bytes = static_cast<size_t>(blocked * head_dim_) * element_bytes_;
  const size_t v_bytes = static_cast<size_t>(tokens * value_dim_) * element_bytes_;
  for (int64_t h = 0; h < kv_heads_; ++h) {
    std::memcpy(keys_ + k_at(to, h), keys_ + k_at(from, h), k_bytes);
    std::memcpy(values_ + v_at(to, h), values_ + v_at(from, h), v_bytes);
    if (k_scales_) {
      std::memcpy(k_scales_ + scale_at(to, h), k_scales_ + scale_at(from, h),
                  sizeof(float) * static_cast<size_t>(tokens));
      std::memcpy(v_scales_ + scale_at(to, h), v_scales_ + scale_at(from, h),
                  sizeof(float) * static_cast<size_t>(tokens));
    }
  }
}

void KvStore::copy_token(int64_t from, int64_t from_index, int64_t to, int64_t to_index) {
  const int64_t B = kernels::kKeyBlock;
  // K blocked: element d of token i at (i / B)·B·D + d·B + i % B.
  const int64_t k_from = (from_index / B) * B * head_dim_ + from_index % B;
  const int64_t k_to = (to_index / B) * B * head_dim_ + to_index % B;
  for (int64_t h = 0; h < kv_heads_; ++h) {
    unsigned char* ks = keys_ + k_at(from, h);
    unsigned char* kd = keys_ + k_at(to, h);
    for (int64_t d = 0; d < head_dim_; ++d)
      std::memcpy(kd + static_cast<size_t>(k_to + d * B) * element_bytes_,
                  ks + static_cast<size_t>(k_from + d * B) * element_bytes_, element_bytes_);
    std::memcpy(values_ + v_at(to, h) + static_cast<size_t>(to_index * value_dim_) * element_bytes_,
                values_ + v_at(from, h) + static_cast<size_t>(from_index * value_dim_) * element_bytes_,
                static_cast<size_t>(value_dim_) * element_bytes_);
    if (k_scales_) {
      k_scales_[scale_at(to, h) + static_cast<size_t>(to_index)] =
          k_scales_[scale_at(from, h) + static_cast<size_t>(from_index)];
      v_scales_[scale_at(to, h) + static_cast<size_t>(to_index)] =
          v_scales_[scale_at(from, h) + static_cast<size_t>(from_index)];
    }
  }
}

void KvStore::page_ranges(int64_t page, int64_t tokens, std::vector<std::pair<const void*, size_t>>& out) const {
  if (tokens <= 0 || !keys_) return;
  const auto blocked = static_cast<size_t>((tokens + kernels::kKeyBlock - 1) / kernels::kKeyBlock * kernels::kKeyBlock);
  const auto rows = static_cast<size_t>(tokens);
  for (int64_t h = 0; h < kv_heads_; ++h) {
    out.emplace_back(keys_ + k_at(page, h), blocked * static_cast<size_t>(head_dim_) * element_bytes_);
    out.emplace_back(values_ + v_at(page, h), rows * static_cast<size_t>(value_dim_) * element_bytes_);
    if (k_scales_) {
      out.emplace_back(k_scales_ + scale_at(page, h), rows * sizeof(float));
      out.emplace_back(v_scales_ + scale_at(page, h), rows * sizeof(float));
    }
  }
}

}  // namespace attend::detail
