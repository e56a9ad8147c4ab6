// The storage both KV caches share: a pool of pages, each holding `page_tokens` tokens of every kv
// head, K blocked ([D][kKeyBlock] per kKeyBlock tokens, what decode scores without horizontal
// sums) and V row-major. A slot cache (KVCache) is one page per sequence of its whole capacity; a
// paged cache (PagedKVCache) gives each sequence a list of pages of block_tokens tokens. The
// kernels read either through kernels::FlashWork (pages null for one page).
#pragma once

#include <attend/dtype.hpp>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "../context/internal_api.hpp"
#include "../kernels/kernel_table.hpp"

namespace attend::detail {

class ATTEND_INTERNAL KvStore {
 public:
  KvStore() = default;
  /// Zero-filled pages, mapped lazily (untouched pages take no memory). page_tokens is a multiple
  /// of kernels::kKeyBlock. Throws std::bad_alloc if the mapping fails.
  KvStore(DType dtype, int64_t kv_heads, int64_t head_dim, int64_t value_dim, int64_t page_tokens, int64_t pages,
          bool head_major = false);
  ~KvStore();
  KvStore(KvStore&&) noexcept;
  KvStore& operator=(KvStore&&) noexcept;
  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;

  kernels::KvType kv_type() const { return kv_type_; }
  int64_t page_tokens() const { return page_tokens_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t value_dim() const { return value_dim_; }
  /// Token rows between one kv head's data and the next within a page (K: × head_dim elements, V: ×
  /// value_dim, i8 scales: × 1).
  int64_t head_tokens() const { return head_major_ ? pages_ * page_tokens_ : page_tokens_; }
  /// Token rows between the same head's data in consecutive pages (kernels::FlashWork::page_stride).
  int64_t page_step_tokens() const { return head_major_ ? page_tokens_ : kv_heads_ * page_tokens_; }
  /// Bytes of K and V together (an i8 store's scales included).
  size_t bytes() const { return k_bytes_ + v_bytes_ + 2 * scale_bytes_; }

  /// K (blocked) / V of kv head 0 of `page` (head h is h·head_tokens() rows further).
  const void* keys(int64_t page) const { return keys_ + k_at(page, 0); }
  const void* values(int64_t page) const { return values_ + v_at(page, 0); }
  /// i8: the K / V scales of kv head 0 of `page`, one per token (kernels::FlashWork::k_scale): head h's
  /// are h·head_tokens() floats further. Null for other types.
  const float* key_scales(int64_t page) const { return k_scales_ ? k_scales_ + scale_at(page, 0) : nullptr; }
  const float* value_scales(int64_t page) const { return v_scales_ ? v_scales_ + scale_at(page, 0) : nullptr; }

  /// Where the first `tokens` tokens of `page` lie, every kv head (K, V, an i8 store's scales):
  /// appended to `out` as (address, bytes), one range per head and part. What a decode of those
  /// tokens reads (the bench evicts exactly these lines before it times one).
  void page_ranges(int64_t page, int64_t tokens, std::vector<std::pair<const void*, size_t>>& out) const;
  /// Writes `count` tokens of kv head `head` at in-page index `index` on: token t's K row (head_dim
  /// elements of type `src`) at k + t·k_stride, its V row (value_dim) at v + t·v_stride (strides in
  /// elements), converted to the storage type (round to nearest even).
  void store(int64_t page, int64_t head, int64_t index, int64_t count, const void* k, int64_t k_stride, const void* v,
             int64_t v_stride, kernels::KvType src);
  /// Copies the first `tokens` tokens of every head of page `from` to page `to`.
  void copy_page(int64_t from, int64_t to, int64_t tokens);
  /// Copies token `from_index` of page `from` to token `to_index` of page `to`, every head (K, V,
  /// an i8 store's scales).
  void copy_token(int64_t from, int64_t from_index, int64_t to, int64_t to_index);

 private:
  // Row offset of (page, head) (× head_dim K elements, × value_dim V elements, × 1 scale).
  int64_t row_at(int64_t page, int64_t head) const { return page * page_step_tokens() + head * head_tokens(); }
  size_t k_at(int64_t page, int64_t head) const {
    return static_cast<size_t>(row_at(page, head) * head_dim_) * element_bytes_;
  }
  size_t v_at(int64_t page, int64_t head) const {
    return static_cast<size_t>(row_at(page, head) * value_dim_) * element_bytes_;
  }
  size_t scale_at(int64_t page, int64_t head) const { return static_cast<size_t>(row_at(page, head)); }
  // Requests into L1 the lines `store` will write for tokens [index, index + count) of the
  // head whose K / V start at kp / vp and whose scales start at row head_row.
  void request_lines(const unsigned char* kp, const unsigned char* vp, int64_t head_row, int64_t index,
                     int64_t count) const;
  bool head_major_ = false;
  kernels::KvType kv_type_ = kernels::KvType::f32;
  int64_t kv_heads_ = 0, head_dim_ = 0, value_dim_ = 0, page_tokens_ = 0, pages_ = 0;
  size_t element_bytes_ = 4, k_bytes_ = 0, v_bytes_ = 0, scale_bytes_ = 0;
  size_t mapped_ = 0;              // the mapping's length (bytes() rounded to whole 2 MiB pages from 2 MiB on)
  unsigned char* keys_ = nullptr;  // one mapping: K pages, V pages, then (i8) K scales, V scales
  unsigned char* values_ = nullptr;
  float* k_scales_ = nullptr;
  float* v_scales_ = nullptr;
};

}  // namespace attend::detail
