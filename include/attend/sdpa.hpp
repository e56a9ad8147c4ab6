// attend::scaled_dot_product_attention — fused softmax(Q·Kᵀ·scale + terms + mask)·V on f32, bf16 or f16
// tensors.
#pragma once

#include <attend/context.hpp>
#include <attend/export.hpp>
#include <attend/isa.hpp>
#include <attend/tensor_view.hpp>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace attend {

/// Where the queries sit among the keys when Nq ≠ Nk: the positions the causal mask, the window and
/// ALiBi use.
enum class CausalAlignment {
  /// Query i is at position i + Nk − Nq: the queries are the last Nq positions (decode, chunked
  /// prefill). attend's default, and the only alignment of the cache paths.
  bottom_right,
  /// Query i is at position i (PyTorch's `is_causal`, `torch.tril(ones(Nq, Nk))`): with Nq < Nk
  /// the keys past Nq are never visible; with Nq > Nk the rows from Nk on see every key.
  top_left,
};

/// Options of scaled_dot_product_attention. The defaults give plain, unmasked attention with
/// scale 1/√D on OpenMP's default number of threads.
struct SdpaOptions {
  /// Multiplies Q·Kᵀ. 0 (the default) means 1/√D. Must be finite.
  float scale = 0.0f;

  /// Causal mask, aligned bottom-right: query i may see key j iff j ≤ i + (Nk − Nq). With Nq < Nk
  /// this is what decode (Nq = 1) and chunked prefill need: the queries are the last Nq positions.
  bool causal = false;

  /// Where query i sits among the keys (the position p_i of the causal mask, the window and
  /// ALiBi): i + Nk − Nq (bottom_right, the default) or i (top_left). Only
  /// scaled_dot_product_attention takes top_left; the cache paths reject it.
  CausalAlignment causal_alignment = CausalAlignment::bottom_right;

  /// Sliding window W > 0: query i additionally sees only keys j > i + (Nk − Nq) − W, i.e. the W
  /// most recent positions up to its own (with `causal`, exactly W keys at most). 0 = no window.
  /// Negative values are rejected.
  int64_t window = 0;

  /// Logit soft-capping (Gemma 2) when > 0: each scaled score s becomes softcap·tanh(s / softcap)
  /// before ALiBi, the bias and the masks. 0 (the default) = none. Negative or non-finite values
  /// are rejected.
  float softcap = 0.0f;

  /// Attention sinks (gpt-oss): empty, or one finite logit per query head (size Hq), in the units of
  /// the scaled scores. The softmax of a row includes the sink in its denominator only:
  /// o_i = Σ_j e^(s_ij − m)·v_j / (e^(sink_h − m) + Σ_j e^(s_ij − m)), m = max(sink_h, max_j s_ij).
  /// A row whose keys are all masked outputs zeros. The span must stay valid during the call.
  std::span<const float> sinks{};

  /// ALiBi (BLOOM, MPT): empty, or one finite slope per query head (size Hq); adds
  /// slope_h·(j − p_i) to the score of query i and key j, with p_i = i + Nk − Nq (the positions of
  /// the causal mask), so decode and chunked prefill agree. alibi_slopes() gives the usual slopes.
  std::span<const float> alibi_slopes{};

  /// Per-batch valid key counts (padding in a batch of unequal lengths): keys j ≥ kv_lens[b] are
  /// masked for batch b. Empty (the default) means all Nk keys are valid. Size must be B and every
  /// value within [0, Nk]. The span must stay valid for the duration of the call.
  std::span<const int64_t> kv_lens{};

  /// Optional additive bias broadcastable to [B, Hq, Nq, Nk]: each dimension is either 1 or the
  /// full size. Added to the scaled scores before the softmax; -inf entries mask a key. A view
  /// whose data() is null means "no bias" (the default).
  TensorView bias{};

  /// Maximum number of threads the call uses. 0 = the context's thread count (see
  /// ContextConfig::num_threads: by default OpenMP's, shared among the calls in flight).
  /// Results do not depend on it: they are bitwise identical for every thread count.
  int num_threads = 0;

  /// Kernel path. `automatic` (default) uses active_isa(); naming a path forces it and throws
  /// attend::Error (ErrorCode::unsupported) if this build or CPU cannot run it.
  Isa isa = Isa::automatic;

  /// `strict` (default): f32 arithmetic. `bf16`: Q·Kᵀ and P·V may round their operands to bf16
  /// (accumulating in f32; the softmax stays f32), which prefill-shaped calls do on the
  /// avx512_bf16 path, on AMX tiles or vdpbf16ps — see FpMath, bf16_math_native() and
  /// bf16_math_amx(). Elsewhere it is `strict`.
  FpMath fpmath = FpMath::strict;

  /// Where the call takes its threads (when num_threads is 0) and its workspace from. Null = the
  /// process-wide Context::default_context(). See attend/context.hpp.
  Context* context = nullptr;
};

/// Computes O = softmax(Q·Kᵀ·scale + bias + mask)·V for every batch b and query head h.
///
/// Shapes (element strides are free, but the last dimension must be contiguous, stride 1):
///   q [B, Hq, Nq, D], k [B, Hkv, Nk, D], v [B, Hkv, Nk, Dv], o [B, Hq, Nq, Dv].
/// Hq must be a multiple of Hkv (GQA/MQA): query head h reads kv head h / (Hq / Hkv).
/// A query row whose keys are all masked produces zeros, never NaN.
///
/// Extra memory is O(threads × tile) plus, for decode-shaped calls (few query rows per kv head,
/// where the key length is split across threads), O(B·Hq·Nq·Dv·splits) with at most 16 splits.
///
/// Throws attend::Error, before writing anything, when shapes or strides disagree, Hq % Hkv ≠ 0,
/// a pointer is null, D or Dv is 0, kv_lens has the wrong size or a value outside [0, Nk], the
/// window is negative, the softcap is negative or not finite, sinks or alibi_slopes are neither
/// empty nor Hq finite values, the bias does not broadcast, the output is read-only or overlaps an input
/// or itself, or a forced ISA is unavailable; and (ErrorCode::capacity) when the context's
/// workspace limit cannot hold the call's workspace.
ATTEND_API void scaled_dot_product_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                                             const TensorView& o, const SdpaOptions& options = {});

/// The ALiBi slopes of the paper (Press et al.) and BLOOM for `heads` heads: with n the largest
/// power of two ≤ heads, head h < n gets 2^(−8(h+1)/n) and the remaining heads the odd-indexed
/// slopes of 2n heads, 2^(−4(2k+1)/n). Throws attend::Error for heads ≤ 0.
ATTEND_API std::vector<float> alibi_slopes(int64_t heads);

/// Workspace in bytes a call with these shapes and options takes from its context, summed over its
/// threads (each buffer rounded up to whole pages): per-thread tile scratch plus, for decode-shaped
/// calls, the split-K partial states. Independent of the sequence lengths except through the ≤ 16
/// key splits. The thread count is the one the call would get now (options, then the context).
/// Throws attend::Error for shapes scaled_dot_product_attention would reject.
ATTEND_API size_t sdpa_workspace_bytes(const TensorView& q, const TensorView& k, const TensorView& v,
                                       const SdpaOptions& options = {});

}  // namespace attend
