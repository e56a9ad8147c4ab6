/* attend's C API: C11 (and C++), opaque handles, no exceptions.
 *
 * Every function returns an attend_status; ATTEND_OK is 0. On failure the function has changed
 * nothing (outputs, caches and handles are exactly as before, as in the C++ API) and
 * attend_last_error() returns the message of the calling thread's last failure (thread-local; it
 * stays valid until that thread's next attend call). No C++ exception ever crosses this boundary:
 * every error, including allocation failure, becomes a status.
 *
 * Zero-initialised option and config structs are the defaults (`attend_sdpa_options o = {0};`), so
 * code written against this header keeps compiling as fields are appended.
 *
 * Semantics are those of the C++ API (attend/sdpa.hpp, attend/kv_cache.hpp,
 * attend/paged_kv_cache.hpp, attend/mha.hpp, attend/context.hpp), which documents every
 * argument; this header says how each maps.
 *
 * Link: pkg-config --cflags --libs --static attend (CMake: find_package(attend), attend::attend).
 */
#ifndef ATTEND_ATTEND_H
#define ATTEND_ATTEND_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define ATTEND_C_API
#else
#define ATTEND_C_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status and errors ------------------------------------------------------------------- */

typedef enum attend_status {
  ATTEND_OK = 0,
  ATTEND_ERROR_INVALID_ARGUMENT = 1, /* a shape, stride, pointer, enum value or option is wrong */
  ATTEND_ERROR_UNSUPPORTED = 2,      /* valid, but this build or CPU cannot serve it (a forced ISA) */
  ATTEND_ERROR_CAPACITY = 3,         /* a cache's capacity, a pool's blocks, a workspace limit */
  ATTEND_ERROR_CONCURRENT_USE = 4,   /* an object another thread is modifying was used */
  ATTEND_ERROR_OUT_OF_MEMORY = 5,    /* an allocation failed */
  ATTEND_ERROR_INTERNAL = 6          /* anything else (a bug: please report the message) */
} attend_status;

/* The message of this thread's last failed call ("" when its last call succeeded). */
ATTEND_C_API const char* attend_last_error(void);
/* After ATTEND_ERROR_CAPACITY from a paged cache: the free blocks the call lacked (else 0). */
ATTEND_C_API int64_t attend_last_blocks_missing(void);
/* The name of a status ("ok", "invalid_argument", …); "unknown" for other values. */
ATTEND_C_API const char* attend_status_name(attend_status status);

/* ---- enums ------------------------------------------------------------------------------- */

typedef enum attend_dtype { ATTEND_F32 = 0, ATTEND_BF16 = 1, ATTEND_F16 = 2, ATTEND_I8 = 3 } attend_dtype;

typedef enum attend_isa {
  ATTEND_ISA_AUTOMATIC = 0,
  ATTEND_ISA_GENERIC = 1,
  ATTEND_ISA_AVX2 = 2,
  ATTEND_ISA_AVX512 = 3,
  ATTEND_ISA_AVX512_BF16 = 4
} attend_isa;

typedef enum attend_fpmath { ATTEND_FPMATH_STRICT = 0, ATTEND_FPMATH_BF16 = 1 } attend_fpmath;

typedef enum attend_causal_alignment {
  ATTEND_CAUSAL_BOTTOM_RIGHT = 0, /* query i at key position i + Nk − Nq (attend's default) */
  ATTEND_CAUSAL_TOP_LEFT = 1      /* query i at key position i (PyTorch's is_causal); sdpa only */
} attend_causal_alignment;

/* ---- library facts ----------------------------------------------------------------------- */

ATTEND_C_API attend_status attend_version(const char** version); /* "0.1.0" */
ATTEND_C_API attend_status attend_active_isa(attend_isa* isa);   /* what AUTOMATIC runs */
ATTEND_C_API attend_status attend_isa_name(attend_isa isa, const char** name);
ATTEND_C_API attend_status attend_isa_supported(attend_isa isa, int* supported);
/* The machine class performance figures are quoted for (attend::cpu_class()): name "Zen 3",
 * "Zen 4", "Zen 5", "Sapphire Rapids", "Xeon with AMX", … or "" when unknown; vendor the CPUID vendor string ("" off
 * x86); family and model CPUID's display values; avx512_bits 512, 256 (each 512-bit instruction in two halves) or 0. */
typedef struct attend_cpu_class_info {
  char name[32];
  char vendor[16];
  int family, model, avx512_bits;
} attend_cpu_class_info;
ATTEND_C_API attend_status attend_cpu_class(attend_cpu_class_info* info);
/* The decode requests' rules in force (attend::decode_tuning()): rules "zen4", "zen5", "amx_xeon",
 * "amx_xeon_pages" or "none"; rules_from_environment 1 when ATTEND_DECODE_TUNING chose them;
 * l2_ahead_bytes (0: no L2 requests); l2_page_starts 1 for one line per 4 KiB page (an 8-bit cache's: every line);
 * i8_one_row_integer 1 when an 8-bit cache's one-row decode runs the integer kernels (the AMX Xeons' rule);
 * hardware_stream 1 when decode over a cache's blocked K leaves K and V to the hardware prefetchers, its blocks scored
 * in address order (a Zen 4's rule; ATTEND_DECODE_HW_STREAM overrides); adaptive_request_kind 1 when decode calls
 * choose page starts or whole lines at run time from their own times (the model-167 AMX Xeon's rule;
 * ATTEND_DECODE_ADAPT overrides); bf16_gemv_rows the most rows of a bf16-weight projection attend's bf16 GEMV takes
 * (8 on Zen 5, 4 elsewhere; ATTEND_BF16_GEMV_ROWS overrides), bf16_gemv_l2_ahead_bytes how far ahead its 1–4 row
 * kernel requests weights into L2 (0: none, Zen 5); one_block_scores 1 when decode of a GQA group over a cache's
 * f32 or 8-bit K scores its blocks one at a time in address order (a Zen 5's rule; ATTEND_DECODE_ONE_BLOCK
 * overrides). ATTEND_ERROR_INVALID_ARGUMENT when an ATTEND_DECODE_*
 * variable or ATTEND_BF16_GEMV_ROWS holds an invalid value. */
typedef struct attend_decode_tuning_info {
  char rules[16];
  int rules_from_environment;
  int64_t l2_ahead_bytes;
  int l2_page_starts;
  int i8_one_row_integer;
  int hardware_stream;
  int adaptive_request_kind;
  int64_t bf16_gemv_rows;
  int64_t bf16_gemv_l2_ahead_bytes;
  int one_block_scores;
} attend_decode_tuning_info;
ATTEND_C_API attend_status attend_decode_tuning(attend_decode_tuning_info* info);
/* BLOOM's / the ALiBi paper's slopes for `heads` heads, written to slopes[0 .. heads). */
ATTEND_C_API attend_status attend_alibi_slopes(int64_t heads, float* slopes);

/* ---- tensors ----------------------------------------------------------------------------- */

/* A 4-d view [B, H, N, D] of caller memory; strides in elements, the last must be 1.
 * bf16/f16 elements are uint16_t bit patterns. data NULL = "absent" where a tensor is optional. */
typedef struct attend_tensor {
  void* data;
  attend_dtype dtype;
  int64_t shape[4];
  int64_t strides[4];
} attend_tensor;

/* A dense row-major view. */
static inline attend_tensor attend_tensor_dense(void* data, attend_dtype dtype, int64_t b, int64_t h, int64_t n,
                                                int64_t d) {
  attend_tensor t;
  t.data = data;
  t.dtype = dtype;
  t.shape[0] = b;
  t.shape[1] = h;
  t.shape[2] = n;
  t.shape[3] = d;
  t.strides[3] = 1;
  t.strides[2] = d;
  t.strides[1] = n * d;
  t.strides[0] = h * n * d;
  return t;
}

/* ---- execution context ------------------------------------------------------------------- */

typedef struct attend_context attend_context;

/* num_threads 0 = OpenMP's default shared among calls in flight; max_workspace_bytes 0 = unbounded. */
ATTEND_C_API attend_status attend_context_create(int num_threads, size_t max_workspace_bytes, attend_context** out);
/* The same, with its calls' threads bound to NUMA node `numa_node` (ContextConfig::numa_node; -1 = none). */
ATTEND_C_API attend_status attend_context_create_on_node(int num_threads, size_t max_workspace_bytes, int numa_node,
                                                         attend_context** out);
ATTEND_C_API attend_status attend_context_destroy(attend_context* ctx); /* NULL is a no-op */
ATTEND_C_API attend_status attend_context_set_num_threads(attend_context* ctx, int num_threads);
ATTEND_C_API attend_status attend_context_set_max_workspace_bytes(attend_context* ctx, size_t bytes);
ATTEND_C_API attend_status attend_context_workspace_bytes(const attend_context* ctx, size_t* bytes);
ATTEND_C_API attend_status attend_context_release(attend_context* ctx); /* return idle workspace to the OS */

/* ---- scaled dot-product attention --------------------------------------------------------- */

/* SdpaOptions. Counts go with their pointers (0 with NULL = none). */
typedef struct attend_sdpa_options {
  float scale; /* 0 = 1/sqrt(D) */
  int causal;  /* nonzero = causal */
  attend_causal_alignment causal_alignment;
  int64_t window;     /* 0 = none */
  float softcap;      /* 0 = none */
  const float* sinks; /* Hq logits, or NULL */
  size_t sinks_count;
  const float* alibi_slopes; /* Hq slopes, or NULL */
  size_t alibi_slopes_count;
  const int64_t* kv_lens; /* B valid key counts, or NULL */
  size_t kv_lens_count;
  attend_tensor bias; /* f32, broadcastable to [B, Hq, Nq, Nk]; data NULL = none */
  int num_threads;    /* 0 = the context's */
  attend_isa isa;
  attend_fpmath fpmath;
  attend_context* context; /* NULL = the process-wide default */
} attend_sdpa_options;

/* o = softmax(q·kᵀ·scale + terms + mask)·v. options may be NULL (defaults). */
ATTEND_C_API attend_status attend_sdpa(const attend_tensor* q, const attend_tensor* k, const attend_tensor* v,
                                       const attend_tensor* o, const attend_sdpa_options* options);
ATTEND_C_API attend_status attend_sdpa_workspace_bytes(const attend_tensor* q, const attend_tensor* k,
                                                       const attend_tensor* v, const attend_sdpa_options* options,
                                                       size_t* bytes);

/* ---- KV cache (fixed slots) --------------------------------------------------------------- */

typedef struct attend_kv_cache attend_kv_cache;
typedef struct attend_kv_cache_config {
  int64_t kv_heads, head_dim, slots, capacity;
  attend_dtype dtype;
  int64_t value_dim; /* 0 = head_dim */
} attend_kv_cache_config;

ATTEND_C_API attend_status attend_kv_cache_create(const attend_kv_cache_config* config, attend_kv_cache** out);
ATTEND_C_API attend_status attend_kv_cache_destroy(attend_kv_cache* cache); /* NULL is a no-op */
ATTEND_C_API attend_status attend_kv_cache_length(const attend_kv_cache* cache, int64_t seq, int64_t* length);
ATTEND_C_API attend_status attend_kv_cache_remaining(const attend_kv_cache* cache, int64_t seq, int64_t* tokens);
ATTEND_C_API attend_status attend_kv_cache_reset(attend_kv_cache* cache, int64_t seq);
ATTEND_C_API attend_status attend_kv_cache_truncate(attend_kv_cache* cache, int64_t seq, int64_t tokens);
ATTEND_C_API attend_status attend_kv_cache_memory_bytes(const attend_kv_cache* cache, size_t* bytes);
/* k, v: [1, kv_heads, n, head_dim / value_dim] f32, bf16 or f16. */
ATTEND_C_API attend_status attend_kv_cache_append(attend_kv_cache* cache, int64_t seq, const attend_tensor* k,
                                                  const attend_tensor* v);
/* cached_attention: append k_new/v_new to the slots seqs[0 .. n_seqs) (= B), attend causally. */
ATTEND_C_API attend_status attend_cached_attention(const attend_tensor* q, const attend_tensor* k_new,
                                                   const attend_tensor* v_new, attend_kv_cache* cache,
                                                   const int64_t* seqs, size_t n_seqs, const attend_tensor* o,
                                                   const attend_sdpa_options* options);

/* ---- paged KV cache ----------------------------------------------------------------------- */

typedef struct attend_paged_kv_cache attend_paged_kv_cache;
typedef struct attend_paged_kv_cache_config {
  int64_t kv_heads, head_dim, num_blocks;
  int64_t block_tokens; /* 0 = 32 */
  attend_dtype dtype;
  int64_t value_dim; /* 0 = head_dim */
} attend_paged_kv_cache_config;

/* `tokens` new tokens of sequence `seq`; parents NULL = a causal chain, else `tokens` entries
 * (tree verification: parents[t] < t, or -1 for a root). */
typedef struct attend_sequence_chunk {
  int64_t seq;
  int64_t tokens;
  const int32_t* parents;
} attend_sequence_chunk;

ATTEND_C_API attend_status attend_paged_kv_cache_create(const attend_paged_kv_cache_config* config,
                                                        attend_paged_kv_cache** out);
ATTEND_C_API attend_status attend_paged_kv_cache_destroy(attend_paged_kv_cache* cache); /* NULL is a no-op */
ATTEND_C_API attend_status attend_paged_kv_cache_create_sequence(attend_paged_kv_cache* cache, int64_t* seq);
ATTEND_C_API attend_status attend_paged_kv_cache_fork(attend_paged_kv_cache* cache, int64_t seq, int64_t* forked);
ATTEND_C_API attend_status attend_paged_kv_cache_release(attend_paged_kv_cache* cache, int64_t seq);
ATTEND_C_API attend_status attend_paged_kv_cache_length(const attend_paged_kv_cache* cache, int64_t seq,
                                                        int64_t* length);
ATTEND_C_API attend_status attend_paged_kv_cache_truncate(attend_paged_kv_cache* cache, int64_t seq, int64_t tokens);
ATTEND_C_API attend_status attend_paged_kv_cache_keep(attend_paged_kv_cache* cache, int64_t seq, int64_t first,
                                                      const int64_t* positions, size_t n_positions);
ATTEND_C_API attend_status attend_paged_kv_cache_append(attend_paged_kv_cache* cache, int64_t seq,
                                                        const attend_tensor* k, const attend_tensor* v);
ATTEND_C_API attend_status attend_paged_kv_cache_free_blocks(const attend_paged_kv_cache* cache, int64_t* blocks);
ATTEND_C_API attend_status attend_paged_kv_cache_blocks(const attend_paged_kv_cache* cache, int64_t seq,
                                                        int64_t* blocks);
ATTEND_C_API attend_status attend_paged_kv_cache_blocks_needed(const attend_paged_kv_cache* cache,
                                                               const attend_sequence_chunk* chunks, size_t n_chunks,
                                                               int64_t* blocks);
ATTEND_C_API attend_status attend_paged_kv_cache_sequences(const attend_paged_kv_cache* cache, int64_t* count);
ATTEND_C_API attend_status attend_paged_kv_cache_memory_bytes(const attend_paged_kv_cache* cache, size_t* bytes);
ATTEND_C_API attend_status attend_paged_kv_cache_used_bytes(const attend_paged_kv_cache* cache, size_t* bytes);
/* One continuous-batching step: q [1, Hq, T, D], k_new/v_new [1, Hkv, T, D/Dv], o [1, Hq, T, Dv]. */
ATTEND_C_API attend_status attend_paged_attention(const attend_tensor* q, const attend_tensor* k_new,
                                                  const attend_tensor* v_new, attend_paged_kv_cache* cache,
                                                  const attend_sequence_chunk* chunks, size_t n_chunks,
                                                  const attend_tensor* o, const attend_sdpa_options* options);

/* ---- the layer ---------------------------------------------------------------------------- */

typedef struct attend_layer attend_layer;
typedef enum attend_weight_layout { ATTEND_WEIGHTS_OUT_IN = 0, ATTEND_WEIGHTS_IN_OUT = 1 } attend_weight_layout;

/* MhaConfig. */
typedef struct attend_layer_config {
  int64_t d_model, n_heads;
  int64_t n_kv_heads;     /* 0 = n_heads */
  int64_t head_dim;       /* 0 = d_model / n_heads */
  int64_t value_head_dim; /* 0 = head_dim */
  int bias, causal, rope;
  double rope_theta;         /* 0 = 10000 */
  attend_dtype weight_dtype; /* f32 or bf16 */
  int cross_attention;
  int64_t window;
  float softcap;
  const float* alibi_slopes; /* n_heads slopes, or NULL (copied) */
  size_t alibi_slopes_count;
  int64_t shard_rank;  /* tensor parallelism (MhaConfig::shard_rank / shard_count): this layer is */
  int64_t shard_count; /* shard shard_rank of shard_count (0 = 1: the whole layer) */
} attend_layer_config;

/* MhaWeights: f32 buffers, copied by attend_layer_create (free them afterwards). The caller
 * guarantees their sizes (see attend/mha.hpp): q [n_heads·head_dim, d_model], k
 * [n_kv_heads·head_dim, d_model], v [n_kv_heads·value_head_dim, d_model], o [d_model,
 * n_heads·value_head_dim] for OUT_IN (the transpose for IN_OUT); biases iff config.bias; sinks
 * n_heads logits or NULL. */
typedef struct attend_layer_weights {
  attend_weight_layout layout;
  const float *q, *k, *v, *o;
  const float *q_bias, *k_bias, *v_bias, *o_bias;
  const float* sinks;
} attend_layer_weights;

/* MhaOptions. */
typedef struct attend_layer_options {
  int causal;             /* 0 = the layer's config, 1 = causal, -1 = not causal */
  const int64_t* lengths; /* forward: per-sequence valid tokens, or NULL */
  size_t lengths_count;
  int has_first_position; /* nonzero: first_position is the RoPE position of the first new token */
  int64_t first_position;
  int num_threads;
  attend_isa isa;
  attend_fpmath fpmath;
  attend_context* context;
} attend_layer_options;

ATTEND_C_API attend_status attend_layer_create(const attend_layer_config* config, const attend_layer_weights* weights,
                                               attend_layer** out);
ATTEND_C_API attend_status attend_layer_destroy(attend_layer* layer); /* NULL is a no-op */
/* The configuration with defaults resolved (alibi_slopes points into the layer). */
ATTEND_C_API attend_status attend_layer_get_config(const attend_layer* layer, attend_layer_config* config);
ATTEND_C_API attend_status attend_layer_weight_bytes(const attend_layer* layer, size_t* bytes);
/* x, y: dense [batch, tokens, d_model]; x f32/bf16/f16, y f32 or x's dtype. options may be NULL. */
ATTEND_C_API attend_status attend_layer_forward(const attend_layer* layer, const void* x, attend_dtype x_dtype, void* y,
                                                attend_dtype y_dtype, int64_t batch, int64_t tokens,
                                                const attend_layer_options* options);
ATTEND_C_API attend_status attend_layer_forward_cached(const attend_layer* layer, const void* x, attend_dtype x_dtype,
                                                       void* y, attend_dtype y_dtype, int64_t batch, int64_t tokens,
                                                       attend_kv_cache* cache, const int64_t* seqs, size_t n_seqs,
                                                       const attend_layer_options* options);
/* x, y: [T, d_model], the chunks' tokens packed in order. */
ATTEND_C_API attend_status attend_layer_forward_paged(const attend_layer* layer, const void* x, attend_dtype x_dtype,
                                                      void* y, attend_dtype y_dtype,
                                                      const attend_sequence_chunk* chunks, size_t n_chunks,
                                                      attend_paged_kv_cache* cache,
                                                      const attend_layer_options* options);
ATTEND_C_API attend_status attend_layer_set_memory(const attend_layer* layer, const float* memory, int64_t batch,
                                                   int64_t tokens, attend_kv_cache* cache, const int64_t* seqs,
                                                   size_t n_seqs, const attend_layer_options* options);
ATTEND_C_API attend_status attend_layer_cross_attend(const attend_layer* layer, const float* x, float* y, int64_t batch,
                                                     int64_t tokens, const attend_kv_cache* cache, const int64_t* seqs,
                                                     size_t n_seqs, const attend_layer_options* options);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTEND_ATTEND_H */
