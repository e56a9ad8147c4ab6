// The one validator and the one job builder behind every attention entry point (sdpa, its
// workspace query, cached_attention, and the layer's forward, forward_cached and cross_attend).
// An option is added here once: AttentionCall carries it, validate() checks it, build_problem()
// hands it to the executor.
#pragma once

#include <attend/context.hpp>
#include <attend/error.hpp>
#include <attend/isa.hpp>
#include <attend/kv_cache.hpp>
#include <attend/paged_kv_cache.hpp>
#include <attend/tensor_view.hpp>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "../context/internal_api.hpp"
#include "../context/workspace.hpp"
#include "../exec/attention.hpp"

namespace attend::detail {

[[noreturn]] void fail(const char* who, const std::string& message, ErrorCode code = ErrorCode::invalid_argument);
std::string dims(const TensorView::Dims& d);

/// The kernels' name for a tensor's element type (f32, bf16 or f16; validated views only).
inline kernels::KvType elem_type(DType t) {
  return t == DType::bf16 ? kernels::KvType::bf16 : t == DType::f16 ? kernels::KvType::f16 : kernels::KvType::f32;
}
/// Address of element (i0, i1, i2, 0) of a view, of any dtype.
inline const void* element_at(const TensorView& t, int64_t i0, int64_t i1 = 0, int64_t i2 = 0) {
  return static_cast<const char*>(t.data_ptr()) +
         (i0 * t.stride(0) + i1 * t.stride(1) + i2 * t.stride(2)) * static_cast<int64_t>(dtype_size(t.dtype()));
}
inline void* mutable_element_at(const TensorView& t, int64_t i0, int64_t i1 = 0, int64_t i2 = 0) {
  return static_cast<char*>(t.mutable_data_ptr()) +
         (i0 * t.stride(0) + i1 * t.stride(1) + i2 * t.stride(2)) * static_cast<int64_t>(dtype_size(t.dtype()));
}
/// Checks that `t`'s dtype is one attention takes (f32, bf16, f16) and, when `like` is given, the
/// same as that view's (named `like_name`).
ATTEND_INTERNAL void check_dtype(const char* who, const char* name, const TensorView& t,
                                 const TensorView* like = nullptr, const char* like_name = nullptr);

/// One attention computation as a caller described it.
struct AttentionCall {
  const char* who = "sdpa";  // prefixes every error message
  TensorView q, o;           // [B, Hq, Nq, D], [B, Hq, Nq, Dv]
  // Dense keys and values [B, Hkv, Nk, D|Dv]; with a cache, the new tokens [B, Hkv, Nq, D] that are
  // appended to each sequence before attending (their token count must equal Nq, or be 0 with
  // `append` false: cross-attention over what the cache holds).
  TensorView k, v;
  KVCache* cache = nullptr;       // attend over cached sequences (null: over k, v)
  std::span<const int64_t> seqs;  // with a cache: the sequence of each batch entry (distinct)
  bool append = true;             // with a cache: append k, v first
  // A paged call: B = 1, k and v hold the T = Nq new tokens of the chunks (checked by PagedStep).
  PagedKVCache* paged = nullptr;
  std::span<const SequenceChunk> chunks;
  float scale = 0.0f;  // 0 = 1/√D
  bool causal = false;
  bool top_left = false;  // SdpaOptions::causal_alignment (sdpa only)
  int64_t window = 0;
  float softcap = 0.0f;
  std::span<const float> sinks, alibi_slopes;  // empty or Hq each
  std::span<const int64_t> kv_lens;
  TensorView bias;
  int num_threads = 0;
  Isa isa = Isa::automatic;
  FpMath fpmath = FpMath::strict;
  Context* context = nullptr;
  bool check_output = true;  // false: a workspace query, `o` is not given (its checks are skipped)
};

/// A call from public arguments: q, k, v, o and every SdpaOptions field (cache calls then set
/// causal and their cache; kv_lens and bias are carried so the validator can reject them there).
ATTEND_INTERNAL AttentionCall call_from_options(const char* who, const TensorView& q, const TensorView& k,
                                                const TensorView& v, const TensorView& o, const SdpaOptions& options);

/// What validation derived.
struct Checked {
  int64_t B = 0, Hq = 0, Hkv = 0, Nq = 0, Nk = 0, D = 0, Dv = 0;
  float scale = 1.0f;
  std::vector<int64_t> cached;  // with a cache: tokens each sequence holds before this call
  int64_t max_keys = 0;         // the longest key range an entry attends over
};

/// Validates a call: shapes, strides (non-negative, last dimension contiguous), null pointers,
/// read-only or overlapping outputs, options, and for cache calls the cache's geometry, the
/// sequence ids and their capacity (ErrorCode::capacity). No side effects.
ATTEND_INTERNAL Checked validate(const AttentionCall& call);

/// The view checks of validate(): a known dtype, no negative dimension or stride, a contiguous last
/// dimension, no null data under a non-empty view.
ATTEND_INTERNAL void check_view(const char* who, const char* name, const TensorView& t);

/// The cache part of validate(), for the layer's calls to run before they project anything.
ATTEND_INTERNAL std::vector<int64_t> check_cache_batch(const char* who, const KVCache& cache,
                                                       std::span<const int64_t> seqs, int64_t batch, int64_t new_tokens,
                                                       int64_t kv_heads, int64_t head_dim, int64_t value_dim);

/// Builds the executor's job from a validated call (cache entries read the lengths after appending).
ATTEND_INTERNAL exec::Problem build_problem(const AttentionCall& call, const Checked& checked);

/// Copies the call's score terms (softcap, ALiBi slopes, sinks) into a problem.
ATTEND_INTERNAL void set_score_terms(const AttentionCall& call, exec::Problem& p);

/// The kernel table of `isa` (Isa::automatic: the active one); throws like a forced ISA does.
ATTEND_INTERNAL const kernels::KernelTable& kernel_table(Isa isa, FpMath fpmath);

/// Adds the workspace an attention of these sizes takes on `threads` threads (before its views exist).
ATTEND_INTERNAL void add_attention_needs(const kernels::KernelTable& table, int64_t batch, int64_t q_heads,
                                         int64_t kv_heads, int64_t num_queries, int64_t max_keys, int64_t head_dim,
                                         int64_t value_dim, int threads, Needs& needs);

/// Adds the workspace the call's attention takes on `threads` threads.
ATTEND_INTERNAL void add_needs(const kernels::KernelTable& table, const Checked& checked, int threads, Needs& needs);

/// Runs a validated call with an already reserved lease: appends the new K/V (cache calls; a
/// decode step's in the items that read them, exec::Problem::store) and attends. If attending
/// throws, the cache's lengths are restored (all or nothing).
ATTEND_INTERNAL void execute(const AttentionCall& call, const Checked& checked, const kernels::KernelTable& table,
                             const Lease& lease);

/// validate → kernel table → lease (byte limit) → execute: the whole of sdpa and cached_attention.
ATTEND_INTERNAL void run(const AttentionCall& call);

/// Marks a KVCache as being modified (or read) by one call for its duration; a second call that
/// would modify it meanwhile throws ErrorCode::concurrent_use instead of corrupting it.
class ATTEND_INTERNAL CacheUse {
 public:
  CacheUse(const KVCache& cache, bool modify, const char* who);
  ~CacheUse();
  CacheUse(const CacheUse&) = delete;
  CacheUse& operator=(const CacheUse&) = delete;

 private:
  const KVCache& cache_;
  bool modify_;
};

}  // namespace attend::detail
