// The C API (include/attend/attend.h): each function translates its C arguments to the C++ API
// inside `guarded`, which turns every exception into a status and the calling thread's error
// message. Nothing here throws out: the functions are noexcept, so an exception that escaped
// would terminate the process instead of unwinding through C frames (the fuzz target checks).
#include <attend/attend.h>

#include <attend/attend.hpp>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

struct attend_context {
  attend::Context ctx;
  explicit attend_context(const attend::ContextConfig& c) : ctx(c) {}
};
struct attend_kv_cache {
  attend::KVCache cache;
  explicit attend_kv_cache(const attend::KVCacheConfig& c) : cache(c) {}
};
struct attend_paged_kv_cache {
  attend::PagedKVCache cache;
  explicit attend_paged_kv_cache(const attend::PagedKVCacheConfig& c) : cache(c) {}
};
struct attend_layer {
  attend::MultiHeadAttention layer;
  attend_layer(const attend::MhaConfig& c, const attend::MhaWeights& w) : layer(c, w) {}
};

namespace {

using attend::Error;
using attend::ErrorCode;

struct LastError {
  std::string message;
  int64_t blocks_missing = 0;
};
thread_local LastError last_error;

[[noreturn]] void invalid(const char* who, const std::string& what) {
  throw Error(ErrorCode::invalid_argument, std::string(who) + ": " + what);
}

attend_status set_error(attend_status s, const char* message, int64_t blocks_missing = 0) noexcept {
  try {
    last_error.message = message;
  } catch (...) {
    last_error.message.clear();  // no memory for the message: the status still says what happened
  }
  last_error.blocks_missing = blocks_missing;
  return s;
}

template <class F>
attend_status guarded(F&& f) noexcept {
  try {
    f();
    last_error.message.clear();
    last_error.blocks_missing = 0;
    return ATTEND_OK;
  } catch (const Error& e) {
    attend_status s = ATTEND_ERROR_INTERNAL;
    switch (e.code()) {
      case ErrorCode::invalid_argument: s = ATTEND_ERROR_INVALID_ARGUMENT; break;
      case ErrorCode::unsupported: s = ATTEND_ERROR_UNSUPPORTED; break;
      case ErrorCode::capacity: s = ATTEND_ERROR_CAPACITY; break;
      case ErrorCode::concurrent_use: s = ATTEND_ERROR_CONCURRENT_USE; break;
    }
    return set_error(s, e.what(), e.blocks_missing());
  } catch (const std::bad_alloc&) {
    return set_error(ATTEND_ERROR_OUT_OF_MEMORY, "attend: out of memory");
  } catch (const std::exception& e) {
    return set_error(ATTEND_ERROR_INTERNAL, e.what());
  } catch (...) {
    return set_error(ATTEND_ERROR_INTERNAL, "attend: unknown internal error");
  }
}

template <class T>
T& need(T* p, const char* who, const char* what) {
  if (!p) invalid(who, std::string(what) + " is NULL");
  return *p;
}

// An enum a C caller filled in, as its integer: C may store any int in it, and reading an
// out-of-range value as the C++ enum type would be undefined, so its bytes are copied instead.
template <class E>
int raw(const E& e) {
  std::underlying_type_t<E> x;
  std::memcpy(&x, &e, sizeof x);
  return static_cast<int>(x);
}

attend::DType dtype(int d, const char* who) {
  switch (d) {
    case ATTEND_F32: return attend::DType::f32;
    case ATTEND_BF16: return attend::DType::bf16;
    case ATTEND_F16: return attend::DType::f16;
    case ATTEND_I8: return attend::DType::i8;
  }
  invalid(who, "dtype " + std::to_string(d) + " is not an attend_dtype");
}

attend::Isa isa(int i, const char* who) {
  switch (i) {
    case ATTEND_ISA_AUTOMATIC: return attend::Isa::automatic;
    case ATTEND_ISA_GENERIC: return attend::Isa::generic;
    case ATTEND_ISA_AVX2: return attend::Isa::avx2;
    case ATTEND_ISA_AVX512: return attend::Isa::avx512;
    case ATTEND_ISA_AVX512_BF16: return attend::Isa::avx512_bf16;
  }
  invalid(who, "isa " + std::to_string(i) + " is not an attend_isa");
}

attend_isa c_isa(attend::Isa i) {
  switch (i) {
    case attend::Isa::automatic: return ATTEND_ISA_AUTOMATIC;
    case attend::Isa::generic: return ATTEND_ISA_GENERIC;
    case attend::Isa::avx2: return ATTEND_ISA_AVX2;
    case attend::Isa::avx512: return ATTEND_ISA_AVX512;
    case attend::Isa::avx512_bf16: return ATTEND_ISA_AVX512_BF16;
  }
  return ATTEND_ISA_AUTOMATIC;
}

attend::FpMath fpmath(int f, const char* who) {
  switch (f) {
    case ATTEND_FPMATH_STRICT: return attend::FpMath::strict;
    case ATTEND_FPMATH_BF16: return attend::FpMath::bf16;
  }
  invalid(who, "fpmath " + std::to_string(f) + " is not an attend_fpmath");
}

// A C array as a span: NULL with count 0 is empty; NULL with a count is an error.
template <class T>
std::span<const T> span_of(const T* p, size_t n, const char* who, const char* what) {
  if (!p && n) invalid(who, std::string(what) + " is NULL with a count of " + std::to_string(n));
  return p ? std::span<const T>(p, n) : std::span<const T>();
}

attend::TensorView view(const attend_tensor* t, const char* who, const char* what) {
  const attend_tensor& c = need(t, who, what);
  const attend::TensorView::Dims shape{c.shape[0], c.shape[1], c.shape[2], c.shape[3]};
  const attend::TensorView::Dims strides{c.strides[0], c.strides[1], c.strides[2], c.strides[3]};
  return attend::TensorView(static_cast<const void*>(c.data), dtype(raw(c.dtype), who), shape, strides);
}
attend::TensorView mutable_view(const attend_tensor* t, const char* who, const char* what) {
  const attend_tensor& c = need(t, who, what);
  const attend::TensorView::Dims shape{c.shape[0], c.shape[1], c.shape[2], c.shape[3]};
  const attend::TensorView::Dims strides{c.strides[0], c.strides[1], c.strides[2], c.strides[3]};
  return attend::TensorView(c.data, dtype(raw(c.dtype), who), shape, strides);
}

attend::SdpaOptions sdpa_options(const attend_sdpa_options* o, const char* who) {
  attend::SdpaOptions s;
  if (!o) return s;
  s.scale = o->scale;
  s.causal = o->causal != 0;
  switch (raw(o->causal_alignment)) {
    case ATTEND_CAUSAL_BOTTOM_RIGHT: s.causal_alignment = attend::CausalAlignment::bottom_right; break;
    case ATTEND_CAUSAL_TOP_LEFT: s.causal_alignment = attend::CausalAlignment::top_left; break;
    default: invalid(who, "causal_alignment is not an attend_causal_alignment");
  }
  s.window = o->window;
  s.softcap = o->softcap;
  s.sinks = span_of(o->sinks, o->sinks_count, who, "sinks");
  s.alibi_slopes = span_of(o->alibi_slopes, o->alibi_slopes_count, who, "alibi_slopes");
  s.kv_lens = span_of(o->kv_lens, o->kv_lens_count, who, "kv_lens");
  if (o->bias.data) s.bias = view(&o->bias, who, "bias");
  s.num_threads = o->num_threads;
  s.isa = isa(raw(o->isa), who);
  s.fpmath = fpmath(raw(o->fpmath), who);
  s.context = o->context ? &o->context->ctx : nullptr;
  return s;
}

std::vector<attend::SequenceChunk> chunks_of(const attend_sequence_chunk* c, size_t n, const char* who) {
  const std::span<const attend_sequence_chunk> in = span_of(c, n, who, "chunks");
  std::vector<attend::SequenceChunk> out;
  out.reserve(n);
  for (const attend_sequence_chunk& x : in) {
    if (x.tokens < 0) invalid(who, "a chunk has " + std::to_string(x.tokens) + " tokens");
    out.push_back(
        {x.seq, x.tokens,
         x.parents ? std::span<const int32_t>(x.parents, static_cast<size_t>(x.tokens)) : std::span<const int32_t>()});
  }
  return out;
}

attend::MhaOptions layer_options(const attend_layer_options* o, const char* who) {
  attend::MhaOptions m;
  if (!o) return m;
  if (o->causal < -1 || o->causal > 1) invalid(who, "causal must be -1, 0 or 1");
  if (o->causal) m.causal = o->causal > 0;
  m.lengths = span_of(o->lengths, o->lengths_count, who, "lengths");
  if (o->has_first_position) m.first_position = o->first_position;
  m.num_threads = o->num_threads;
  m.isa = isa(raw(o->isa), who);
  m.fpmath = fpmath(raw(o->fpmath), who);
  m.context = o->context ? &o->context->ctx : nullptr;
  return m;
}

template <class T>
T& out_param(T* p, const char* who) {
  return need(p, who, "the output pointer");
}

}  // namespace

extern "C" {

const char* attend_last_error(void) { return last_error.message.c_str(); }
int64_t attend_last_blocks_missing(void) { return last_error.blocks_missing; }

const char* attend_status_name(attend_status s) {
  switch (s) {
    case ATTEND_OK: return "ok";
    case ATTEND_ERROR_INVALID_ARGUMENT: return "invalid_argument";
    case ATTEND_ERROR_UNSUPPORTED: return "unsupported";
    case ATTEND_ERROR_CAPACITY: return "capacity";
    case ATTEND_ERROR_CONCURRENT_USE: return "concurrent_use";
    case ATTEND_ERROR_OUT_OF_MEMORY: return "out_of_memory";
    case ATTEND_ERROR_INTERNAL: return "internal";
  }
  return "unknown";
}

attend_status attend_version(const char** version) {
  return guarded([&] { out_param(version, "attend_version") = ATTEND_VERSION_STRING; });
}
attend_status attend_active_isa(attend_isa* out) {
  return guarded([&] { out_param(out, "attend_active_isa") = c_isa(attend::active_isa()); });
}
attend_status attend_cpu_class(attend_cpu_class_info* info) {
  return guarded([&] {
    attend_cpu_class_info& out = out_param(info, "attend_cpu_class");
    const attend::CpuClass c = attend::cpu_class();
    out = {};
    std::snprintf(out.name, sizeof out.name, "%s", c.name.c_str());
    std::snprintf(out.vendor, sizeof out.vendor, "%s", c.vendor.c_str());
    out.family = c.family;
    out.model = c.model;
    out.avx512_bits = c.avx512_bits;
  });
}
attend_status attend_decode_tuning(attend_decode_tuning_info* info) {
  return guarded([&] {
    attend_decode_tuning_info& out = out_param(info, "attend_decode_tuning");
    const attend::DecodeTuning t = attend::decode_tuning();
    out = {};
    std::snprintf(out.rules, sizeof out.rules, "%s", t.rules.c_str());
    out.rules_from_environment = t.rules_from_environment;
    out.l2_ahead_bytes = t.l2_ahead_bytes;
    out.l2_page_starts = t.l2_page_starts;
    out.i8_one_row_integer = t.i8_one_row_integer;
    out.hardware_stream = t.hardware_stream;
    out.adaptive_request_kind = t.adaptive_request_kind;
    out.bf16_gemv_rows = t.bf16_gemv_rows;
    out.bf16_gemv_l2_ahead_bytes = t.bf16_gemv_l2_ahead_bytes;
    out.one_block_scores = t.one_block_scores;
  });
}
attend_status attend_isa_name(attend_isa i, const char** name) {
  return guarded([&] { out_param(name, "attend_isa_name") = attend::isa_name(isa(raw(i), "attend_isa_name")); });
}
attend_status attend_isa_supported(attend_isa i, int* supported) {
  return guarded([&] {
    const char* who = "attend_isa_supported";
    const attend::Isa want = isa(raw(i), who);
    int& out = out_param(supported, who);
    out = want == attend::Isa::automatic;
    for (attend::Isa s : attend::supported_isas())
      if (s == want) out = 1;
  });
}
attend_status attend_alibi_slopes(int64_t heads, float* slopes) {
  return guarded([&] {
    const std::vector<float> s = attend::alibi_slopes(heads);
    float* out = &need(slopes, "attend_alibi_slopes", "slopes");
    std::copy(s.begin(), s.end(), out);
  });
}

// ---- context

attend_status attend_context_create(int num_threads, size_t max_workspace_bytes, attend_context** out) {
  return guarded([&] {
    attend_context*& o = out_param(out, "attend_context_create");
    if (num_threads < 0) invalid("attend_context_create", "num_threads must be >= 0");
    o = new attend_context(attend::ContextConfig{num_threads, max_workspace_bytes});
  });
}
attend_status attend_context_create_on_node(int num_threads, size_t max_workspace_bytes, int numa_node,
                                            attend_context** out) {
  return guarded([&] {
    attend_context*& o = out_param(out, "attend_context_create_on_node");
    if (num_threads < 0) invalid("attend_context_create_on_node", "num_threads must be >= 0");
    o = new attend_context(attend::ContextConfig{num_threads, max_workspace_bytes, numa_node});
  });
}
attend_status attend_context_destroy(attend_context* ctx) {
  return guarded([&] { delete ctx; });
}
attend_status attend_context_set_num_threads(attend_context* ctx, int n) {
  return guarded([&] { need(ctx, "attend_context_set_num_threads", "ctx").ctx.set_num_threads(n); });
}
attend_status attend_context_set_max_workspace_bytes(attend_context* ctx, size_t bytes) {
  return guarded(
      [&] { need(ctx, "attend_context_set_max_workspace_bytes", "ctx").ctx.set_max_workspace_bytes(bytes); });
}
attend_status attend_context_workspace_bytes(const attend_context* ctx, size_t* bytes) {
  return guarded([&] {
    const char* who = "attend_context_workspace_bytes";
    out_param(bytes, who) = need(ctx, who, "ctx").ctx.workspace_bytes();
  });
}
attend_status attend_context_release(attend_context* ctx) {
  return guarded([&] { need(ctx, "attend_context_release", "ctx").ctx.release(); });
}

// ---- sdpa

attend_status attend_sdpa(const attend_tensor* q, const attend_tensor* k, const attend_tensor* v,
                          const attend_tensor* o, const attend_sdpa_options* options) {
  return guarded([&] {
    const char* who = "attend_sdpa";
    attend::scaled_dot_product_attention(view(q, who, "q"), view(k, who, "k"), view(v, who, "v"),
                                         mutable_view(o, who, "o"), sdpa_options(options, who));
  });
}
attend_status attend_sdpa_workspace_bytes(const attend_tensor* q, const attend_tensor* k, const attend_tensor* v,
                                          const attend_sdpa_options* options, size_t* bytes) {
  return guarded([&] {
    const char* who = "attend_sdpa_workspace_bytes";
    size_t& out = out_param(bytes, who);
    out = attend::sdpa_workspace_bytes(view(q, who, "q"), view(k, who, "k"), view(v, who, "v"),
                                       sdpa_options(options, who));
  });
}

// ---- KV cache

attend_status attend_kv_cache_create(const attend_kv_cache_config* config, attend_kv_cache** out) {
  return guarded([&] {
    const char* who = "attend_kv_cache_create";
    attend_kv_cache*& o = out_param(out, who);
    const attend_kv_cache_config& c = need(config, who, "config");
    o = new attend_kv_cache(
        attend::KVCacheConfig{c.kv_heads, c.head_dim, c.slots, c.capacity, dtype(raw(c.dtype), who), c.value_dim});
  });
}
attend_status attend_kv_cache_destroy(attend_kv_cache* cache) {
  return guarded([&] { delete cache; });
}
attend_status attend_kv_cache_length(const attend_kv_cache* cache, int64_t seq, int64_t* length) {
  return guarded([&] {
    const char* who = "attend_kv_cache_length";
    int64_t& out = out_param(length, who);
    out = need(cache, who, "cache").cache.length(seq);
  });
}
attend_status attend_kv_cache_remaining(const attend_kv_cache* cache, int64_t seq, int64_t* tokens) {
  return guarded([&] {
    const char* who = "attend_kv_cache_remaining";
    int64_t& out = out_param(tokens, who);
    out = need(cache, who, "cache").cache.remaining(seq);
  });
}
attend_status attend_kv_cache_reset(attend_kv_cache* cache, int64_t seq) {
  return guarded([&] { need(cache, "attend_kv_cache_reset", "cache").cache.reset(seq); });
}
attend_status attend_kv_cache_truncate(attend_kv_cache* cache, int64_t seq, int64_t tokens) {
  return guarded([&] { need(cache, "attend_kv_cache_truncate", "cache").cache.truncate(seq, tokens); });
}
attend_status attend_kv_cache_memory_bytes(const attend_kv_cache* cache, size_t* bytes) {
  return guarded([&] {
    const char* who = "attend_kv_cache_memory_bytes";
    out_param(bytes, who) = need(cache, who, "cache").cache.memory_bytes();
  });
}
attend_status attend_kv_cache_append(attend_kv_cache* cache, int64_t seq, const attend_tensor* k,
                                     const attend_tensor* v) {
  return guarded([&] {
    const char* who = "attend_kv_cache_append";
    need(cache, who, "cache").cache.append(seq, view(k, who, "k"), view(v, who, "v"));
  });
}
attend_status attend_cached_attention(const attend_tensor* q, const attend_tensor* k_new, const attend_tensor* v_new,
                                      attend_kv_cache* cache, const int64_t* seqs, size_t n_seqs,
                                      const attend_tensor* o, const attend_sdpa_options* options) {
  return guarded([&] {
    const char* who = "attend_cached_attention";
    attend::cached_attention(view(q, who, "q"), view(k_new, who, "k_new"), view(v_new, who, "v_new"),
                             need(cache, who, "cache").cache, span_of(seqs, n_seqs, who, "seqs"),
                             mutable_view(o, who, "o"), sdpa_options(options, who));
  });
}

// ---- paged KV cache

attend_status attend_paged_kv_cache_create(const attend_paged_kv_cache_config* config, attend_paged_kv_cache** out) {
  return guarded([&] {
    const char* who = "attend_paged_kv_cache_create";
    attend_paged_kv_cache*& o = out_param(out, who);
    const attend_paged_kv_cache_config& c = need(config, who, "config");
    o = new attend_paged_kv_cache(attend::PagedKVCacheConfig{c.kv_heads, c.head_dim, c.num_blocks,
                                                             c.block_tokens ? c.block_tokens : 32,
                                                             dtype(raw(c.dtype), who), c.value_dim});
  });
}
attend_status attend_paged_kv_cache_destroy(attend_paged_kv_cache* cache) {
  return guarded([&] { delete cache; });
}
attend_status attend_paged_kv_cache_create_sequence(attend_paged_kv_cache* cache, int64_t* seq) {
  return guarded([&] {
    const char* who = "attend_paged_kv_cache_create_sequence";
    int64_t& out = out_param(seq, who);
    out = need(cache, who, "cache").cache.create_sequence();
  });
}
attend_status attend_paged_kv_cache_fork(attend_paged_kv_cache* cache, int64_t seq, int64_t* forked) {
  return guarded([&] {
    const char* who = "attend_paged_kv_cache_fork";
    int64_t& out = out_param(forked, who);
    out = need(cache, who, "cache").cache.fork(seq);
  });
}
attend_status attend_paged_kv_cache_release(attend_paged_kv_cache* cache, int64_t seq) {
  return guarded([&] { need(cache, "attend_paged_kv_cache_release", "cache").cache.release(seq); });
}
attend_status attend_paged_kv_cache_length(const attend_paged_kv_cache* cache, int64_t seq, int64_t* length) {
  return guarded([&] {
    const char* who = "attend_paged_kv_cache_length";
    int64_t& out = out_param(length, who);
    out = need(cache, who, "cache").cache.length(seq);
  });
}
attend_status attend_paged_kv_cache_truncate(attend_paged_kv_cache* cache, int64_t seq, int64_t tokens) {
  return guarded([&] { need(cache, "attend_paged_kv_cache_truncate", "cache").cache.truncate(seq, tokens); });
}
attend_status attend_paged_kv_cache_keep(attend_paged_kv_cache* cache, int64_t seq, int64_t first,
                                         const int64_t* positions, size_t n_positions) {
  return guarded([&] {
    const char* who = "attend_paged_kv_cache_keep";
    need(cache, who, "cache").cache.keep(seq, first, span_of(positions, n_positions, who, "positions"));
  });
}
attend_status attend_paged_kv_cache_append(attend_paged_kv_cache* cache, int64_t seq, const attend_tensor* k,
                                           const attend_tensor* v) {
  return guarded([&] {
    const char* who = "attend_paged_kv_cache_append";
    need(cache, who, "cache").cache.append(seq, view(k, who, "k"), view(v, who, "v"));
  });
}
attend_status attend_paged_kv_cache_free_blocks(const attend_paged_kv_cache* cache, int64_t* blocks) {
  return guarded([&] {
    const char* who = "attend_paged_kv_cache_free_blocks";
    out_param(blocks, who) = need(cache, who, "cache").cache.free_blocks();
  });
}
attend_status attend_paged_kv_cache_blocks(const attend_paged_kv_cache* cache, int64_t seq, int64_t* blocks) {
  return guarded([&] {
    const char* who = "attend_paged_kv_cache_blocks";
    int64_t& out = out_param(blocks, who);
    out = need(cache, who, "cache").cache.blocks(seq);
  });
}
attend_status attend_paged_kv_cache_blocks_needed(const attend_paged_kv_cache* cache,
                                                  const attend_sequence_chunk* chunks, size_t n_chunks,
                                                  int64_t* blocks) {
  return guarded([&] {
    const char* who = "attend_paged_kv_cache_blocks_needed";
    int64_t& out = out_param(blocks, who);
    const std::vector<attend::SequenceChunk> c = chunks_of(chunks, n_chunks, who);
    out = need(cache, who, "cache").cache.blocks_needed(c);
  });
}
attend_status attend_paged_kv_cache_sequences(const attend_paged_kv_cache* cache, int64_t* count) {
  return guarded([&] {
    const char* who = "attend_paged_kv_cache_sequences";
    out_param(count, who) = need(cache, who, "cache").cache.sequences();
  });
}
attend_status attend_paged_kv_cache_memory_bytes(const attend_paged_kv_cache* cache, size_t* bytes) {
  return guarded([&] {
    const char* who = "attend_paged_kv_cache_memory_bytes";
    out_param(bytes, who) = need(cache, who, "cache").cache.memory_bytes();
  });
}
attend_status attend_paged_kv_cache_used_bytes(const attend_paged_kv_cache* cache, size_t* bytes) {
  return guarded([&] {
    const char* who = "attend_paged_kv_cache_used_bytes";
    out_param(bytes, who) = need(cache, who, "cache").cache.used_bytes();
  });
}
attend_status attend_paged_attention(const attend_tensor* q, const attend_tensor* k_new, const attend_tensor* v_new,
                                     attend_paged_kv_cache* cache, const attend_sequence_chunk* chunks, size_t n_chunks,
                                     const attend_tensor* o, const attend_sdpa_options* options) {
  return guarded([&] {
    const char* who = "attend_paged_attention";
    const std::vector<attend::SequenceChunk> c = chunks_of(chunks, n_chunks, who);
    attend::paged_attention(view(q, who, "q"), view(k_new, who, "k_new"), view(v_new, who, "v_new"),
                            need(cache, who, "cache").cache, c, mutable_view(o, who, "o"), sdpa_options(options, who));
  });
}

// ---- layer

attend_status attend_layer_create(const attend_layer_config* config, const attend_layer_weights* weights,
                                  attend_layer** out) {
  return guarded([&] {
    const char* who = "attend_layer_create";
    attend_layer*& o = out_param(out, who);
    const attend_layer_config& c = need(config, who, "config");
    const attend_layer_weights& w = need(weights, who, "weights");
    attend::MhaConfig m;
    m.d_model = c.d_model;
    m.n_heads = c.n_heads;
    m.n_kv_heads = c.n_kv_heads;
    m.head_dim = c.head_dim;
    m.value_head_dim = c.value_head_dim;
    m.bias = c.bias != 0;
    m.causal = c.causal != 0;
    m.rope = c.rope != 0;
    if (c.rope_theta != 0.0) m.rope_theta = c.rope_theta;
    m.weight_dtype = dtype(raw(c.weight_dtype), who);
    m.cross_attention = c.cross_attention != 0;
    m.window = c.window;
    m.softcap = c.softcap;
    const std::span<const float> slopes = span_of(c.alibi_slopes, c.alibi_slopes_count, who, "alibi_slopes");
    m.alibi_slopes.assign(slopes.begin(), slopes.end());
    m.shard_rank = c.shard_rank;
    m.shard_count = c.shard_count == 0 ? 1 : c.shard_count;
    attend::MhaWeights mw;
    switch (raw(w.layout)) {
      case ATTEND_WEIGHTS_OUT_IN: mw.layout = attend::WeightLayout::out_in; break;
      case ATTEND_WEIGHTS_IN_OUT: mw.layout = attend::WeightLayout::in_out; break;
      default: invalid(who, "layout is not an attend_weight_layout");
    }
    mw.q = w.q;
    mw.k = w.k;
    mw.v = w.v;
    mw.o = w.o;
    mw.q_bias = w.q_bias;
    mw.k_bias = w.k_bias;
    mw.v_bias = w.v_bias;
    mw.o_bias = w.o_bias;
    mw.sinks = w.sinks;
    o = new attend_layer(m, mw);
  });
}
attend_status attend_layer_destroy(attend_layer* layer) {
  return guarded([&] { delete layer; });
}
attend_status attend_layer_get_config(const attend_layer* layer, attend_layer_config* config) {
  return guarded([&] {
    const char* who = "attend_layer_get_config";
    attend_layer_config& c = out_param(config, who);
    const attend::MhaConfig& m = need(layer, who, "layer").layer.config();
    attend_layer_config r{};
    r.d_model = m.d_model;
    r.n_heads = m.n_heads;
    r.n_kv_heads = m.n_kv_heads;
    r.head_dim = m.head_dim;
    r.value_head_dim = m.value_head_dim;
    r.bias = m.bias;
    r.causal = m.causal;
    r.rope = m.rope;
    r.rope_theta = m.rope_theta;
    r.weight_dtype = m.weight_dtype == attend::DType::bf16 ? ATTEND_BF16 : ATTEND_F32;
    r.cross_attention = m.cross_attention;
    r.window = m.window;
    r.softcap = m.softcap;
    r.alibi_slopes = m.alibi_slopes.empty() ? nullptr : m.alibi_slopes.data();
    r.alibi_slopes_count = m.alibi_slopes.size();
    r.shard_rank = m.shard_rank;
    r.shard_count = m.shard_count;
    c = r;
  });
}
attend_status attend_layer_weight_bytes(const attend_layer* layer, size_t* bytes) {
  return guarded([&] {
    const char* who = "attend_layer_weight_bytes";
    out_param(bytes, who) = need(layer, who, "layer").layer.weight_bytes();
  });
}
attend_status attend_layer_forward(const attend_layer* layer, const void* x, attend_dtype x_dtype, void* y,
                                   attend_dtype y_dtype, int64_t batch, int64_t tokens,
                                   const attend_layer_options* options) {
  return guarded([&] {
    const char* who = "attend_layer_forward";
    need(layer, who, "layer")
        .layer.forward(x, dtype(raw(x_dtype), who), y, dtype(raw(y_dtype), who), batch, tokens,
                       layer_options(options, who));
  });
}
attend_status attend_layer_forward_cached(const attend_layer* layer, const void* x, attend_dtype x_dtype, void* y,
                                          attend_dtype y_dtype, int64_t batch, int64_t tokens, attend_kv_cache* cache,
                                          const int64_t* seqs, size_t n_seqs, const attend_layer_options* options) {
  return guarded([&] {
    const char* who = "attend_layer_forward_cached";
    need(layer, who, "layer")
        .layer.forward_cached(x, dtype(raw(x_dtype), who), y, dtype(raw(y_dtype), who), batch, tokens,
                              need(cache, who, "cache").cache, span_of(seqs, n_seqs, who, "seqs"),
                              layer_options(options, who));
  });
}
attend_status attend_layer_forward_paged(const attend_layer* layer, const void* x, attend_dtype x_dtype, void* y,
                                         attend_dtype y_dtype, const attend_sequence_chunk* chunks, size_t n_chunks,
                                         attend_paged_kv_cache* cache, const attend_layer_options* options) {
  return guarded([&] {
    const char* who = "attend_layer_forward_paged";
    const std::vector<attend::SequenceChunk> c = chunks_of(chunks, n_chunks, who);
    need(layer, who, "layer")
        .layer.forward_paged(x, dtype(raw(x_dtype), who), y, dtype(raw(y_dtype), who), c,
                             need(cache, who, "cache").cache, layer_options(options, who));
  });
}
attend_status attend_layer_set_memory(const attend_layer* layer, const float* memory, int64_t batch, int64_t tokens,
                                      attend_kv_cache* cache, const int64_t* seqs, size_t n_seqs,
                                      const attend_layer_options* options) {
  return guarded([&] {
    const char* who = "attend_layer_set_memory";
    need(layer, who, "layer")
        .layer.set_memory(memory, batch, tokens, need(cache, who, "cache").cache, span_of(seqs, n_seqs, who, "seqs"),
                          layer_options(options, who));
  });
}
attend_status attend_layer_cross_attend(const attend_layer* layer, const float* x, float* y, int64_t batch,
                                        int64_t tokens, const attend_kv_cache* cache, const int64_t* seqs,
                                        size_t n_seqs, const attend_layer_options* options) {
  return guarded([&] {
    const char* who = "attend_layer_cross_attend";
    need(layer, who, "layer")
        .layer.cross_attend(x, y, batch, tokens, need(cache, who, "cache").cache, span_of(seqs, n_seqs, who, "seqs"),
                            layer_options(options, who));
  });
}

}  // extern "C"
