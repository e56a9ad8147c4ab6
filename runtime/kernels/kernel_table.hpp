// The boundary between the runtime and the kernels: plain structs of pointers, strides and sizes
// describing one unit of work, and a table of function pointers per ISA. Kernels never see
// TensorView, OpenMP or oneDNN; the runtime never sees xsimd.
#pragma once

#include <cstddef>
#include <cstdint>

namespace attend::kernels {

/// Element type of Q, K, V and O. bf16 and f16 (16-bit tensors, a KV cache's storage) are converted
/// to f32 as they are loaded and rounded (to nearest even) as O is stored; arithmetic is f32. i8
/// (an 8-bit cache's K and V only, blocked K) is widened and multiplied by its token's scale
/// (FlashWork::k_scale, v_scale); on AVX512_VNNI tables its decode of two or more rows multiplies
/// the codes in integers instead (flash_narrow_i8.hpp).
enum class KvType : int { f32, bf16, f16, i8 };

/// Bytes per element of `t`.
constexpr int64_t kv_type_bytes(KvType t) { return t == KvType::f32 ? 4 : t == KvType::i8 ? 1 : 2; }

/// Keys per block of a blocked K layout (see FlashWork::k_blocked); fixed for every ISA so a KV
/// cache's storage does not depend on the kernel that reads it.
constexpr int64_t kKeyBlock = 16;

/// One block of query rows of one (batch, kv head) against one contiguous range of keys.
///
/// Query rows are the G query heads that share the kv head, stacked position-major:
/// stacked row s ↦ (query position i = s / G, head-in-group g = s % G). The block covers stacked
/// rows [row_begin, row_begin + row_count). Stacking the group's heads lets each K/V byte be read
/// once per group (GQA) and turns decode (Nq = 1) into a G-row problem.
struct FlashWork {
  // Q for (b, first head of the group), elements of `q_type`: element (g, i, d) at
  // q[g*q_head_stride + i*q_row_stride + d].
  const void* q;
  int64_t q_head_stride, q_row_stride;
  KvType q_type;
  // K and V of (b, kv head), elements of `kv_type`: key j at k[j*k_row_stride + d], v[j*v_row_stride + d].
  // Blocked K (a KV cache's layout): keys in blocks of kKeyBlock, each stored [D][kKeyBlock], so key
  // j's element d is at k[(j / kKeyBlock)·kKeyBlock·D + d·kKeyBlock + j % kKeyBlock] and k_row_stride
  // is unused. Decode then scores kKeyBlock keys per FMA without horizontal reductions.
  const void* k;
  int64_t k_row_stride;
  bool k_blocked;
  const void* v;
  int64_t v_row_stride;
  KvType kv_type;
  // Paged K/V (a paged KV cache; needs k_blocked): null = one contiguous run as above. Otherwise
  // key j lives in pool page pages[j / page_tokens] at in-page index j % page_tokens, laid out as
  // above within the page; k and v address this kv head in pool page 0 and pool pages are
  // page_stride token rows apart (page_stride·head_dim K elements, page_stride·value_dim V
  // elements, page_stride scales). page_tokens is a multiple of kKeyBlock.
  const int32_t* pages;
  int64_t page_tokens, page_stride;
  // i8 K/V: one f32 scale per key for K and for V, laid out like V rows of one element: key j's at
  // k_scale[pages[j / page_tokens]·page_stride + j % page_tokens] (pages null: k_scale[j]). Null
  // for other types.
  const float* k_scale;
  const float* v_scale;
  // Optional additive bias for (b, first head of the group), in natural-log units (the kernel
  // multiplies by log2 e). Element (g, i, j) at bias[g*bias_head_stride + i*bias_row_stride +
  // j*bias_key_stride]; null when absent.
  const float* bias;
  int64_t bias_head_stride, bias_row_stride, bias_key_stride;

  int64_t group;      // G: query heads per kv head
  int64_t row_begin;  // first stacked row
  int64_t row_count;  // rows in this block (<= plan's block_rows)
  int64_t head_dim;   // D
  int64_t value_dim;  // Dv
  // Position of query row 0 among the keys, off: Nk − Nq (bottom-right alignment, every path but
  // sdpa's top-left option) or 0 (top-left: query i sits at key position i).
  int64_t first_position;

  // Mask, per query position i: keys [lo(i), hi(i)) are visible:
  //   hi(i) = min(valid_keys, causal ? i + off + 1 : Nk),  lo(i) = window > 0 ? i + off - window + 1 : 0.
  int64_t valid_keys;  // kv_lens[b], or Nk
  bool causal;
  int64_t window;

  // The key range this work item covers (a split of [0, Nk) for split-K decode, else all keys).
  int64_t key_begin, key_end;
  // The block holds every query row of its kv head (decode-shaped: a GQA group, MLA's heads), so
  // no other work item reads these keys: K comes from memory, once. The wide path fetches it ahead.
  bool stream_keys;
  // Decode (the narrow path): besides the requests into L1 just ahead of what it reads, request K
  // and V this many bytes ahead into L2 (prefetcht1), so more lines are in flight than L1's miss
  // buffers hold. 0 = none. The executor sets it from dispatch::decode_l2_ahead_bytes where
  // dispatch::decode_l2_requests says they help (per storage type, GQA group or one row, and
  // machine class); prefetch only: results are the same.
  int64_t l2_ahead_bytes;
  // The L2 requests touch only the first line of each 4 KiB page they pass (starts_page and
  // request_row_pages in tile_traits.hpp): the address translation of every page, and the
  // hardware prefetchers' start on it, run l2_ahead_bytes ahead without filling the miss buffers
  // with whole rows. dispatch::decode_l2_pages.
  bool l2_pages;
  // Decode: leave K's next key group to the hardware prefetchers (no prefetcht0 of it while
  // scoring): dispatch::decode_k_l1_requests, per storage type, rows and machine class.
  bool no_k_l1_requests;
  // Decode over an 8-bit cache: one query row per kv head takes the integer kernels too
  // (flash_narrow_i8's one-row instances), not the f32 ones. dispatch::decode_i8_one_row_integer.
  bool i8_one_row_integer;
  // Decode over a blocked f32 or 16-bit K (flash_narrow; the 8-bit kernels keep their requests): K's
  // blocks scored one at a time in address order (the same sums as in groups) and no software
  // requests of K or V into L1 (the executor sets l2_ahead_bytes to 0 and no_k_l1_requests with
  // it): the hardware prefetchers stream the cache alone. dispatch::decode_hardware_stream.
  bool hardware_stream;
  // Decode of a GQA group over a blocked f32 or 8-bit K, with its requests: K's blocks scored one at
  // a time in address order (the same sums as in groups), one stream instead of two blocks at once.
  // dispatch::decode_one_block_scores.
  bool one_block_scores;

  float scale;  // multiplies Q·Kᵀ (folded into Q once)

  // Score terms, applied to each scaled score s of query row (g, i) and key j in this order, before
  // the bias and the masks: softcap > 0: s ← softcap·tanh(s / softcap); alibi (slopes of the group's
  // heads, alibi[g], or null): s += alibi[g]·(j − (i + off)). sinks (logits of the group's
  // heads, or null): the softmax of row (g, i) has e^(sinks[g] − m) in its denominator; it enters
  // the running sum of the work item holding key 0 (key_begin == 0), once, so split-K merges count
  // it once.
  float softcap;
  const float* alibi;
  const float* sinks;

  // Tree verification (a paged chunk with parents), else null. The chunk's tokens are the last
  // Nq keys, from off = Nk − Nq; chunk token c sits at position off + tree_depth[c]. Query position
  // i sees keys [lo(i), off) — lo from its position off + tree_depth[i] and the window — and chunk
  // key off + c iff bit c of tree[i·tree_words + c / 64] is set (its ancestors and itself, within
  // the window). ALiBi distances use these positions.
  const uint64_t* tree;
  int64_t tree_words;
  const int32_t* tree_depth;

  // bf16 math (the wide driver of a table with keeps_packed_kv): the calling thread's buffer for
  // this (batch, kv head), kept across the head's row blocks that run on the thread: its K rounded to
  // bf16 rows and its V packed into bf16 pairs of keys, unit by unit (kPackUnitKeys keys) as a block
  // first needs them; null: each block packs its own tiles. Over keys [0, valid_keys): key j's K at
  // packed_k + j·packed_k_words(head_dim), the V of keys 2p and 2p + 1 at packed_v +
  // p·packed_v_words(value_dim); packed_state[u] for keys [u·kPackUnitKeys, (u + 1)·kPackUnitKeys):
  // 0 not packed, 2 packed, 3 packed and its V holds a NaN or an infinity (a masked key's weight 0
  // must not meet it in a pair's product: such tiles pack their own V).
  uint32_t* packed_k;
  uint32_t* packed_v;
  int32_t* packed_state;

  // Output, elements of `o_type`. Final: o[g*o_head_stride + i*o_row_stride + d], normalised.
  // Partial (split-K): per row r of the block, partial_ml[2*r] = running max of the scores,
  // partial_ml[2*r+1] = sum, partial_acc[r*value_dim + d] = unnormalised accumulator (f32).
  void* o;
  int64_t o_head_stride, o_row_stride;
  KvType o_type;
  float* partial_ml;
  float* partial_acc;
};

/// Tile geometry of one ISA's kernels; the plan sizes scratch and blocks from it.
struct KernelGeometry {
  int vector_floats;    // W: floats per vector register
  int block_rows;       // query rows per block (wide path)
  int block_keys;       // keys per tile (wide path)
  int narrow_max_rows;  // the narrow (decode) path takes blocks of at most this many rows…
  /// …and only when head_dim is a multiple of the vector width. The plan decides with this, the
  /// one place the path is chosen (plan::AttentionPlan::narrow).
  bool narrow_fits(int64_t rows, int64_t head_dim) const {
    return rows <= narrow_max_rows && head_dim % vector_floats == 0;
  }
};

using FlashFn = void (*)(const FlashWork& work, float* scratch);
using ScratchFn = size_t (*)(int64_t head_dim, int64_t value_dim, int64_t row_count);
/// Keys per unit of FlashWork::packed_state.
constexpr int64_t kPackUnitKeys = 128;
/// 32-bit words per key of FlashWork::packed_k, per key pair of packed_v.
constexpr int64_t packed_k_words(int64_t head_dim) { return (head_dim + 31) / 32 * 16; }
constexpr int64_t packed_v_words(int64_t value_dim) { return (value_dim + 15) / 16 * 16; }
/// Floats one (batch, kv head) of `keys` keys takes packed: its K rows (16 rows of slack: AMX reads
/// K in tiles of 16 keys from any key), V pairs or, on AMX, V transposed per unit (whole units) and
/// unit states, each part a whole number of 64-byte lines.
constexpr int64_t packed_k_floats(int64_t keys, int64_t head_dim) {
  return ((keys + 16) * packed_k_words(head_dim) + 15) / 16 * 16;
}
constexpr int64_t packed_kv_floats(int64_t keys, int64_t head_dim, int64_t value_dim) {
  return packed_k_floats(keys, head_dim) +
         ((keys + kPackUnitKeys - 1) / kPackUnitKeys * (kPackUnitKeys / 2) * packed_v_words(value_dim) + 15) / 16 * 16 +
         ((keys + kPackUnitKeys - 1) / kPackUnitKeys + 15) / 16 * 16;
}

/// The kernels of one ISA. `name` follows XNNPACK's convention: datatype, operation, ISA.
struct KernelTable {
  const char* name;
  KernelGeometry geometry;
  FlashFn flash_narrow;      // computes one FlashWork of a few rows (decode); needs narrow_fits
  FlashFn flash_wide;        // computes one FlashWork of any rows (prefill)
  ScratchFn scratch_floats;  // per-thread scratch the flash kernel needs, in floats (64-byte aligned)
  // The bf16-math table: its wide driver keeps K/V packed across a (batch, kv head)'s row blocks
  // on one thread (FlashWork::packed_k) when the runtime provides the buffers.
  bool keeps_packed_kv;
};

// One table per compiled ISA (defined in runtime/kernels/arch/*.cpp). Null when not compiled in.
const KernelTable* kernel_table_avx512();
/// Which table of the avx512_bf16 tier: f32 arithmetic (the avx512 kernels), or FpMath::bf16's
/// prefill on vdpbf16ps or on AMX tiles (null where AMX was not compiled in).
enum class Bf16Math { none, dot, amx };
/// AVX-512 + AVX512_BF16 (+ AMX-BF16 for Bf16Math::amx, which only CPUs with it may run).
const KernelTable* kernel_table_avx512_bf16(Bf16Math math);
const KernelTable* kernel_table_avx2();
const KernelTable* kernel_table_generic();

}  // namespace attend::kernels

namespace attend::kernels {

/// One thread's share of a decode projection y[rows, out] = x[rows, in] · W (+ bias) over bf16
/// weights in oneDNN's brgemm packing for bf16 matmuls, BA16a64b2a: the columns in blocks of 64,
/// each block one contiguous run of k_padded / 2 rows of 64 (column) × 2 (reduction) bf16 — the
/// 16 × 2 pairs of one 64-byte line are one vdpbf16ps operand. Column block c starts at
/// w + c·k_padded·64; k_padded is `in` rounded up to 32, the padding rows and columns are zero.
/// Every output sums its terms in reduction order in one f32 accumulator, so the bits do not
/// depend on how the blocks are shared between threads.
struct Bf16GemvWork {
  const uint16_t* x;  // bf16 rows: row r at x + r·x_stride
  int64_t x_stride, rows, in;
  const uint16_t* w;
  int64_t k_padded, out;
  int64_t block_begin, block_end;  // this thread's column blocks of 64
  const float* bias;               // out floats, or null
  void* y;                         // row r at y + r·y_stride elements: f32, or bf16 (rounded to nearest even)
  int64_t y_stride;
  bool y_bf16;
  bool l2_requests = true;  // 1–4 rows also request each line 24 KiB ahead into L2 (the class's rule)
};
using Bf16GemvFn = void (*)(const Bf16GemvWork& work);
/// Rows a Bf16GemvWork may have. Each row costs one vdpbf16ps per line of weights: 1–4 rows in one
/// pass over a column block (4R accumulators), 5–8 in two halves of each 4 KiB chunk (2R). The AMX
/// Xeon issues vdpbf16ps at ~0.45 per cycle and oneDNN's AMX kernel beats it from 5 rows (session
/// 37), so there the layer stops at 4 (detail::bf16_decode_gemv_rows); on Zen 5 oneDNN's 5+ rows
/// run brg:avx512_core_bf16 on the same vdpbf16ps, which this kernel outpaces at 8 rows (session
/// 64; a Zen 4 not measured: it stays at 4 there).
constexpr int64_t kBf16GemvMaxRows = 8;
/// How far ahead of its reads the GEMV requests lines into L2 where Bf16GemvWork::l2_requests says so.
constexpr int64_t kBf16GemvL2Ahead = 24576;
/// The avx512_bf16 object's GEMV (null where it is not compiled in).
Bf16GemvFn bf16_gemv_avx512_bf16();

}  // namespace attend::kernels
