// attend::MultiHeadAttention — one attention layer: projections on oneDNN, attention on attend's
// fused kernels, optional rotary embedding, and KV-cache prefill/decode.
#pragma once

#include <attend/context.hpp>
#include <attend/dtype.hpp>
#include <attend/export.hpp>
#include <attend/isa.hpp>
#include <attend/kv_cache.hpp>
#include <attend/paged_kv_cache.hpp>
#include <attend/sdpa.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace attend {

namespace detail {
struct MhaAccess;
}

/// How a projection matrix is laid out in memory.
enum class WeightLayout {
  out_in,  ///< [out, in] row-major: PyTorch nn.Linear.weight (y = x·Wᵀ)
  in_out,  ///< [in, out] row-major: y = x·W
};

struct MhaConfig {
  int64_t d_model = 0;     ///< model width (> 0)
  int64_t n_heads = 0;     ///< query heads (> 0)
  int64_t n_kv_heads = 0;  ///< key/value heads; 0 = n_heads. Must divide n_heads (GQA/MQA).
  int64_t head_dim = 0;    ///< per-head width; 0 = d_model / n_heads (which must then divide)
  /// Per-head width of V (and of the attention output W_O reads); 0 = head_dim. Caches the layer
  /// uses must have this value_dim.
  int64_t value_head_dim = 0;
  bool bias = false;    ///< the four projections have biases
  bool causal = false;  ///< forward() masks later tokens unless MhaOptions says otherwise
  /// Rotary position embedding, Hugging Face Llama convention ("rotate_half": dimension i pairs
  /// with i + head_dim/2; position = token index; angle = position · theta^(−2i/head_dim),
  /// computed in double precision). Applied to Q and K; head_dim must be even.
  bool rope = false;
  double rope_theta = 10000.0;
  /// Storage of the projection weights: f32, or bf16 (bf16 × bf16 products accumulated in f32:
  /// activations are rounded to bf16 at the projection inputs, halving the weight bytes decode
  /// reads). f16 weights are not supported. On a CPU without AVX-512, where oneDNN has no bf16
  /// matmul, bf16 weights are held as their bf16 values in f32 (same products, f32 memory).
  DType weight_dtype = DType::f32;
  /// Keep Q and K/V projections separate instead of fused into one GEMM. Set it for a layer used
  /// for cross-attention, whose Q and K/V come from different sequences; self-attention calls
  /// then run two GEMMs.
  bool cross_attention = false;
  /// Sliding window of self-attention (forward, forward_cached, forward_paged, attention_weights):
  /// each query sees at most the `window` most recent positions up to its own (see
  /// SdpaOptions::window; per layer, as Gemma and gpt-oss alternate them). 0 = none; must be ≥ 0.
  int64_t window = 0;
  /// Logit soft-capping of every call (SdpaOptions::softcap; Gemma 2 uses 50). 0 = none.
  float softcap = 0.0f;
  /// ALiBi slopes of self-attention, one per query head (SdpaOptions::alibi_slopes; see
  /// attend::alibi_slopes() for BLOOM's), or empty. ALiBi replaces RoPE in those models; both may
  /// be set. Positions are the cache positions, as for the causal mask.
  std::vector<float> alibi_slopes{};
  /// Tensor parallelism by heads (one layer split over `shard_count` ranks, e.g. MPI processes):
  /// this layer is shard `shard_rank` of `shard_count`. It holds and computes only query heads
  /// [rank·H/N, (rank+1)·H/N) (H = n_heads, N = shard_count, which must divide H) and the kv heads
  /// they read — n_kv_heads/N of them when N divides n_kv_heads (split), else the one kv head its
  /// query heads share (replicated, which needs N to be a multiple of n_kv_heads); its slices of
  /// W_Q, W_K, W_V (and their biases, sinks and ALiBi slopes) and the matching input columns of
  /// W_O. Weights are given whole (MhaWeights of the full layer; each rank takes its slice). Its
  /// caches hold only its kv heads (shard_info().kv_heads). Every call writes a *partial* y: the
  /// sum of y over the N shards (an all-reduce) is the unsharded layer's output; W_O's bias is
  /// added by shard 0 only. 1 (the default) = the whole layer.
  int64_t shard_rank = 0;
  int64_t shard_count = 1;
};

/// What a (possibly sharded) layer holds: query heads [first_head, first_head + heads) and kv
/// heads [first_kv_head, first_kv_head + kv_heads) of the full layer. A cache the layer uses has
/// kv_heads heads.
struct MhaShardInfo {
  int64_t first_head = 0, heads = 0, first_kv_head = 0, kv_heads = 0;
};

/// Weights as f32 buffers (copied at construction; the caller may free them afterwards).
/// Shapes, for out_in layout (in_out is the transpose): q [n_heads·head_dim, d_model],
/// k [n_kv_heads·head_dim, d_model], v [n_kv_heads·value_head_dim, d_model],
/// o [d_model, n_heads·value_head_dim]. Biases have the
/// projections' output sizes and are required iff MhaConfig::bias.
struct MhaWeights {
  WeightLayout layout = WeightLayout::out_in;
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const float* o = nullptr;
  const float* q_bias = nullptr;
  const float* k_bias = nullptr;
  const float* v_bias = nullptr;
  const float* o_bias = nullptr;
  /// Learned attention sinks (gpt-oss), one logit per query head (n_heads floats), or null: see
  /// SdpaOptions::sinks. Applied by every call.
  const float* sinks = nullptr;
};

/// Options of every layer call (forward, forward_cached, set_memory, cross_attend,
/// attention_weights). A call rejects an option that does not apply to it.
struct MhaOptions {
  /// forward / attention_weights: overrides MhaConfig::causal for this call. forward_cached is
  /// always causal (false is rejected); cross_attend never is (true is rejected).
  std::optional<bool> causal;
  /// forward / attention_weights: per-sequence valid token counts (size = batch, each in
  /// [0, tokens]): keys at or past a sequence's length are masked (padding). Outputs of padded
  /// query positions are computed but meaningless. Empty = all tokens valid. Other calls reject it.
  std::span<const int64_t> lengths{};
  /// RoPE position of the first new token (positions are first_position + t). Default: 0 for
  /// forward and attention_weights, each sequence's cached length for forward_cached. Must be ≥ 0.
  std::optional<int64_t> first_position;
  /// Threads for this call (0 = the context's thread count).
  int num_threads = 0;
  /// Kernel path of the attention (see SdpaOptions::isa). The projections run on oneDNN's own.
  Isa isa = Isa::automatic;

  /// Rounding the attention's Q·Kᵀ and P·V may do (see SdpaOptions::fpmath); the projections stay f32.
  FpMath fpmath = FpMath::strict;
  /// Threads and workspace (activations, projection scratchpads, kernel scratch) come from this
  /// context; null = Context::default_context().
  Context* context = nullptr;
};

/// An immutable attention layer. Every member function is const and safe to call from many
/// threads at once (each call takes its own workspace from its context; a KVCache is claimed by
/// the call that modifies it, see KVCache).
/// Activations are dense row-major: x and y are [batch, tokens, d_model], f32 (the pointer and
/// std::span forms; the span form also checks that x and y hold exactly batch · tokens · d_model
/// floats) or, through the forms that take a DType, bf16 or f16. batch = 0 or tokens = 0 is a valid call that computes
/// nothing (set_memory then empties the sequences, as their whole memory is replaced by none). Every call validates its
/// arguments first and throws attend::Error without writing anything.
class ATTEND_API MultiHeadAttention {
 public:
  MultiHeadAttention(const MhaConfig& config, const MhaWeights& weights);
  ~MultiHeadAttention();
  MultiHeadAttention(MultiHeadAttention&&) noexcept;
  MultiHeadAttention& operator=(MultiHeadAttention&&) noexcept;

  /// The configuration with defaults resolved (n_kv_heads, head_dim filled in).
  const MhaConfig& config() const;

  /// Self-attention over x without a cache. y may not overlap x.
  void forward(const float* x, float* y, int64_t batch, int64_t tokens, const MhaOptions& options = {}) const;
  /// The same on activations of any dtype: x f32, bf16 or f16 (16-bit: uint16_t patterns), y f32
  /// or x's dtype. bf16 x reaches bf16 weights' projections as it is (no conversion pass), and with
  /// bf16 weights a bf16 y comes straight out of the output projection; other combinations convert
  /// at the projection (f16 is widened, f32 x rounded for bf16 weights). The attention itself runs
  /// on the projections' f32 output as always. forward_cached and forward_paged have the same form.
  void forward(const void* x, DType x_dtype, void* y, DType y_dtype, int64_t batch, int64_t tokens,
               const MhaOptions& options = {}) const;
  void forward(std::span<const float> x, std::span<float> y, int64_t batch, int64_t tokens,
               const MhaOptions& options = {}) const;

  /// Prefill or decode with a cache: projects the `tokens` new tokens of each sequence
  /// `seqs[b]` (distinct slots), appends their K/V (rotated, if RoPE, at positions
  /// length(seq) + t unless options.first_position says otherwise) to the cache, attends causally
  /// over everything cached for that sequence, and writes y [batch, tokens, d_model]. Sequences
  /// may have different cached lengths. Throws attend::Error, leaving the cache unchanged, if any
  /// sequence would exceed its capacity (ErrorCode::capacity, naming it).
  void forward_cached(const float* x, float* y, int64_t batch, int64_t tokens, KVCache& cache,
                      std::span<const int64_t> seqs, const MhaOptions& options = {}) const;
  void forward_cached(std::span<const float> x, std::span<float> y, int64_t batch, int64_t tokens, KVCache& cache,
                      std::span<const int64_t> seqs, const MhaOptions& options = {}) const;
  void forward_cached(const void* x, DType x_dtype, void* y, DType y_dtype, int64_t batch, int64_t tokens,
                      KVCache& cache, std::span<const int64_t> seqs, const MhaOptions& options = {}) const;

  /// One continuous-batching step over a paged cache: x and y are [T, d_model] with the chunks'
  /// tokens packed in chunk order (T = Σ chunks[i].tokens). The Q/K/V projections of all T tokens
  /// run as one GEMM; each chunk's K/V (rotated, if RoPE, at positions length(seq) + t) are
  /// appended to its sequence and its queries attend causally over everything the sequence holds
  /// (see paged_attention: any mix of prompt chunks and decode tokens, batch invariant, all or
  /// nothing — a pool short of blocks throws ErrorCode::capacity with Error::blocks_missing()
  /// before anything is projected). The causal option may only be true; lengths and
  /// first_position are rejected (positions come from the cache).
  void forward_paged(const float* x, float* y, std::span<const SequenceChunk> chunks, PagedKVCache& cache,
                     const MhaOptions& options = {}) const;
  void forward_paged(std::span<const float> x, std::span<float> y, std::span<const SequenceChunk> chunks,
                     PagedKVCache& cache, const MhaOptions& options = {}) const;
  void forward_paged(const void* x, DType x_dtype, void* y, DType y_dtype, std::span<const SequenceChunk> chunks,
                     PagedKVCache& cache, const MhaOptions& options = {}) const;

  /// Cross-attention set-up: projects `memory` [batch, tokens, d_model] to K/V (no RoPE) and
  /// stores them as the whole content of slot seqs[b] (replacing what was there).
  void set_memory(const float* memory, int64_t batch, int64_t tokens, KVCache& cache, std::span<const int64_t> seqs,
                  const MhaOptions& options = {}) const;
  void set_memory(std::span<const float> memory, int64_t batch, int64_t tokens, KVCache& cache,
                  std::span<const int64_t> seqs, const MhaOptions& options = {}) const;

  /// Cross-attention: Q from x, K/V from the slots filled by set_memory, no mask, no RoPE.
  void cross_attend(const float* x, float* y, int64_t batch, int64_t tokens, const KVCache& cache,
                    std::span<const int64_t> seqs, const MhaOptions& options = {}) const;
  void cross_attend(std::span<const float> x, std::span<float> y, int64_t batch, int64_t tokens, const KVCache& cache,
                    std::span<const int64_t> seqs, const MhaOptions& options = {}) const;

  /// Attention weights for inspection (a slow, materialising path): the softmax matrix of each
  /// head in `heads` (indices among this shard's heads) for self-attention over x with forward()'s masks, as
  /// [batch, heads.size(), tokens, tokens]. Fully masked rows are zeros.
  std::vector<float> attention_weights(const float* x, int64_t batch, int64_t tokens, std::span<const int64_t> heads,
                                       const MhaOptions& options = {}) const;

  /// Bytes of the packed projection weights (this shard's).
  size_t weight_bytes() const;

  /// The heads this layer holds (all of them unless MhaConfig::shard_count > 1).
  MhaShardInfo shard_info() const;

 private:
  struct Impl;
  friend struct detail::MhaAccess;
  std::unique_ptr<Impl> impl_;
};

/// Adds the original Transformer's fixed sinusoidal position encoding to x [batch, tokens,
/// d_model] in place: PE(p, 2i) = sin(p / 10000^(2i/d_model)), PE(p, 2i+1) = cos(…), for
/// positions p = first_position + t.
ATTEND_API void add_sinusoidal_positions(float* x, int64_t batch, int64_t tokens, int64_t d_model,
                                         int64_t first_position = 0);

}  // namespace attend
