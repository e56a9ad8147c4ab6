#include "attention_call.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <optional>
#include <sstream>

#include "../dispatch/registry.hpp"
#include "kv_cache_access.hpp"

namespace attend::detail {

void fail(const char* who, const std::string& message, ErrorCode code) {
  throw Error(code, std::string(who) + ": " + message);
}

std::string dims(const TensorView::Dims& d) {
  std::ostringstream s;
  s << '[' << d[0] << ',' << d[1] << ',' << d[2] << ',' << d[3] << ']';
  return s.str();
}

namespace {

// Masks compare key indices as f32 inside the kernels; they are exact below 2^24.
constexpr int64_t kMaxKeys = int64_t{1} << 24;

// [first, last] byte addresses a view can touch; empty views touch nothing.
struct Extent {
  const char* first = nullptr;
  const char* last = nullptr;
  bool empty = true;
};

Extent extent(const TensorView& t) {
  Extent e;
  if (t.numel() == 0) return e;
  int64_t span = 0;
  for (int i = 0; i < 4; ++i) span += (t.dim(i) - 1) * t.stride(i);
  const int64_t bytes = static_cast<int64_t>(dtype_size(t.dtype()));
  e.first = static_cast<const char*>(t.data_ptr());
  e.last = e.first + span * bytes + bytes - 1;
  e.empty = false;
  return e;
}

bool overlaps(const Extent& a, const Extent& b) {
  return !a.empty && !b.empty && !(a.last < b.first || b.last < a.first);
}

// Distinct output elements must have distinct addresses, or threads would race on them.
void check_no_self_overlap(const char* who, const TensorView& t) {
  int order[4] = {0, 1, 2, 3};
  std::sort(order, order + 4, [&](int a, int b) { return t.stride(a) < t.stride(b); });
  int64_t reach = 0;  // elements spanned by the dimensions seen so far, minus one
  for (int i : order) {
    if (t.dim(i) <= 1) continue;
    if (t.stride(i) <= reach)
      fail(who, "o strides " + dims(t.strides()) + " make distinct elements of shape " + dims(t.shape()) + " alias");
    reach += (t.dim(i) - 1) * t.stride(i);
  }
}

// An optional per-query-head array: empty, or Hq finite values.
void check_per_head(const char* who, const char* name, std::span<const float> values, int64_t heads) {
  if (values.empty()) return;
  if (static_cast<int64_t>(values.size()) != heads)
    fail(who, std::string(name) + " has " + std::to_string(values.size()) + " values, expected one per query head (" +
                  std::to_string(heads) + ")");
  for (size_t h = 0; h < values.size(); ++h)
    if (!std::isfinite(values[h]))
      fail(who, std::string(name) + "[" + std::to_string(h) + "] = " + std::to_string(values[h]) + " is not finite");
}

}  // namespace

void check_dtype(const char* who, const char* name, const TensorView& t, const TensorView* like,
                 const char* like_name) {
  if (dtype_size(t.dtype()) == 0)
    fail(who, std::string(name) + " has an unknown dtype (" + std::to_string(static_cast<int>(t.dtype())) + ")");
  if (t.dtype() == DType::i8)
    fail(who, std::string(name) + " is i8: i8 is a KV-cache storage type; tensors are f32, bf16 or f16");
  if (like && t.dtype() != like->dtype())
    fail(who, std::string(name) + " is " + dtype_name(t.dtype()) + " but " + like_name + " is " +
                  dtype_name(like->dtype()) + " (they must have one dtype)");
}

void check_view(const char* who, const char* name, const TensorView& t) {
  check_dtype(who, name, t);
  for (int i = 0; i < 4; ++i) {
    if (t.dim(i) < 0) fail(who, std::string(name) + " has a negative dimension: shape " + dims(t.shape()));
    if (t.stride(i) < 0) fail(who, std::string(name) + " has a negative stride: strides " + dims(t.strides()));
  }
  if (t.numel() > 0 && t.data_ptr() == nullptr)
    fail(who, std::string(name) + " data is null (shape " + dims(t.shape()) + ")");
  if (t.dim(3) > 1 && t.stride(3) != 1)
    fail(who, std::string(name) + " last dimension must be contiguous (stride 1), strides " + dims(t.strides()));
}

std::vector<int64_t> check_cache_batch(const char* who, const KVCache& cache, std::span<const int64_t> seqs,
                                       int64_t batch, int64_t new_tokens, int64_t kv_heads, int64_t head_dim,
                                       int64_t value_dim) {
  const KVCacheConfig& c = cache.config();
  if (c.kv_heads != kv_heads || c.head_dim != head_dim || c.value_dim != value_dim)
    fail(who, "the cache holds " + std::to_string(c.kv_heads) + " kv heads of dims " + std::to_string(c.head_dim) +
                  "/" + std::to_string(c.value_dim) + " (K/V), the call has " + std::to_string(kv_heads) + " of dims " +
                  std::to_string(head_dim) + "/" + std::to_string(value_dim));
  if (static_cast<int64_t>(seqs.size()) != batch)
    fail(who, std::to_string(seqs.size()) + " sequence ids for a batch of " + std::to_string(batch));
  std::vector<int64_t> cached(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int64_t seq = seqs[i];
    if (seq < 0 || seq >= c.slots)
      fail(who, "sequence id " + std::to_string(seq) + " is outside [0, " + std::to_string(c.slots) + ")");
    for (size_t j = 0; j < i; ++j)
      if (seqs[j] == seq) fail(who, "sequence id " + std::to_string(seq) + " appears twice");
    cached[i] = KVCacheAccess::length(cache, seq);
    if (cached[i] + new_tokens > c.capacity)
      fail(who,
           "sequence " + std::to_string(seq) + " holds " + std::to_string(cached[i]) + " tokens; " +
               std::to_string(new_tokens) + " more exceed its capacity " + std::to_string(c.capacity) + " (remaining " +
               std::to_string(c.capacity - cached[i]) + ")",
           ErrorCode::capacity);
  }
  return cached;
}

Checked validate(const AttentionCall& call) {
  const char* who = call.who;
  const TensorView &q = call.q, &k = call.k, &v = call.v, &o = call.o;
  check_view(who, "q", q);
  check_view(who, call.cache ? "k_new" : "k", k);
  check_view(who, call.cache ? "v_new" : "v", v);
  if (call.check_output) check_view(who, "o", o);
  check_dtype(who, call.cache || call.paged ? "k_new" : "k", k, &q, "q");
  check_dtype(who, call.cache || call.paged ? "v_new" : "v", v, &q, "q");
  if (call.check_output && o.dtype() != DType::f32 && o.dtype() != q.dtype())
    fail(who, std::string("o is ") + dtype_name(o.dtype()) + ": it must be f32 or q's dtype (" + dtype_name(q.dtype()) +
                  ")");
  Checked s;
  s.B = q.dim(0);
  s.Hq = q.dim(1);
  s.Hkv = k.dim(1);
  s.Nq = q.dim(2);
  s.Nk = k.dim(2);
  s.D = q.dim(3);
  s.Dv = v.dim(3);
  // The shapes suffix is formatted only when a check fails (this runs on every decode step).
  const auto shapes = [&] {
    return " (q " + dims(q.shape()) + ", k " + dims(k.shape()) + ", v " + dims(v.shape()) + ", o " + dims(o.shape()) +
           ")";
  };
  if (s.D == 0) fail(who, "head dim D must be > 0" + shapes());
  if (s.Dv == 0) fail(who, "value dim Dv must be > 0" + shapes());
  if (k.dim(0) != s.B || v.dim(0) != s.B) fail(who, "batch sizes differ" + shapes());
  if (k.dim(3) != s.D) fail(who, "k head dim does not match q head dim" + shapes());
  if (v.dim(1) != s.Hkv || v.dim(2) != s.Nk) fail(who, "v heads/keys do not match k" + shapes());
  if (call.check_output && (o.dim(0) != s.B || o.dim(1) != s.Hq || o.dim(2) != s.Nq || o.dim(3) != s.Dv))
    fail(who, "o must be [B, Hq, Nq, Dv]" + shapes());
  if (s.Hkv == 0 && s.Hq != 0) fail(who, "k has 0 heads but q has heads" + shapes());
  if (s.Hkv > 0 && s.Hq % s.Hkv != 0) fail(who, "q heads must be a multiple of kv heads (GQA)" + shapes());
  if (s.Nk >= kMaxKeys) fail(who, "Nk must be below 2^24" + shapes());
  if (call.check_output && !o.writable()) fail(who, "o is a read-only view (built from const float*)");
  if (!std::isfinite(call.scale)) fail(who, "scale must be finite");
  if (call.window < 0) fail(who, "window must be >= 0, got " + std::to_string(call.window));
  if (!(call.softcap >= 0.0f) || !std::isfinite(call.softcap))
    fail(who, "softcap must be finite and >= 0, got " + std::to_string(call.softcap));
  check_per_head(who, "sinks", call.sinks, s.Hq);
  check_per_head(who, "alibi_slopes", call.alibi_slopes, s.Hq);
  if (call.num_threads < 0) fail(who, "num_threads must be >= 0, got " + std::to_string(call.num_threads));
  const Extent oe = call.check_output ? extent(o) : Extent{};
  if (overlaps(oe, extent(q)) || overlaps(oe, extent(k)) || overlaps(oe, extent(v)))
    fail(who, "o overlaps an input" + shapes());
  if (call.check_output) check_no_self_overlap(who, o);
  s.max_keys = s.Nk;
  if ((call.paged || call.cache) && call.top_left)
    fail(who, "causal_alignment top_left is not supported with a cache: its queries are the last positions");
  if (call.paged) {
    const PagedKVCacheConfig& c = call.paged->config();
    if (!call.kv_lens.empty() || call.bias.data_ptr()) fail(who, "kv_lens and bias are not supported with a cache");
    if (s.B != 1) fail(who, "tokens are packed along dimension 2: the batch dimension must be 1" + shapes());
    if (s.Nk != s.Nq) fail(who, "k_new/v_new must hold one token per query" + shapes());
    if (c.kv_heads != s.Hkv || c.head_dim != s.D || c.value_dim != s.Dv)
      fail(who, "the cache holds " + std::to_string(c.kv_heads) + " kv heads of dims " + std::to_string(c.head_dim) +
                    "/" + std::to_string(c.value_dim) + " (K/V), the call has " + std::to_string(s.Hkv) + " of dims " +
                    std::to_string(s.D) + "/" + std::to_string(s.Dv));
  } else if (call.cache) {
    if (!call.kv_lens.empty() || call.bias.data_ptr()) fail(who, "kv_lens and bias are not supported with a cache");
    if (call.append && s.Nk != s.Nq) fail(who, "k_new/v_new must hold one token per query" + shapes());
    s.cached = check_cache_batch(who, *call.cache, call.seqs, s.B, call.append ? s.Nq : 0, s.Hkv, s.D, s.Dv);
    s.max_keys = 0;
    for (int64_t c : s.cached) s.max_keys = std::max(s.max_keys, c + (call.append ? s.Nq : 0));
  } else {
    if (!call.kv_lens.empty()) {
      if (static_cast<int64_t>(call.kv_lens.size()) != s.B)
        fail(who,
             "kv_lens has " + std::to_string(call.kv_lens.size()) + " entries, expected B = " + std::to_string(s.B));
      for (size_t b = 0; b < call.kv_lens.size(); ++b)
        if (call.kv_lens[b] < 0 || call.kv_lens[b] > s.Nk)
          fail(who, "kv_lens[" + std::to_string(b) + "] = " + std::to_string(call.kv_lens[b]) +
                        " is outside [0, Nk = " + std::to_string(s.Nk) + "]");
    }
    if (call.bias.data_ptr()) {
      const TensorView& b = call.bias;
      check_view(who, "bias", b);
      if (b.dtype() != DType::f32) fail(who, std::string("bias must be f32, got ") + dtype_name(b.dtype()));
      const TensorView::Dims full{s.B, s.Hq, s.Nq, s.Nk};
      for (int i = 0; i < 4; ++i)
        if (b.dim(i) != 1 && b.dim(i) != full[i])
          fail(who, "bias shape " + dims(b.shape()) + " does not broadcast to [B, Hq, Nq, Nk] = " + dims(full));
      if (overlaps(oe, extent(b))) fail(who, "o overlaps bias");
    }
  }
  s.scale = call.scale != 0.0f ? call.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.D)));
  return s;
}

void set_score_terms(const AttentionCall& call, exec::Problem& p) {
  p.softcap = call.softcap;
  p.alibi = call.alibi_slopes.empty() ? nullptr : call.alibi_slopes.data();
  p.sinks = call.sinks.empty() ? nullptr : call.sinks.data();
}

exec::Problem build_problem(const AttentionCall& call, const Checked& s) {
  const TensorView &q = call.q, &o = call.o;
  exec::Problem p;
  p.q_heads = s.Hq;
  p.kv_heads = s.Hkv;
  p.head_dim = s.D;
  p.value_dim = s.Dv;
  p.q_head_stride = q.stride(1);
  p.q_row_stride = q.stride(2);
  p.o_head_stride = o.stride(1);
  p.o_row_stride = o.stride(2);
  p.q_type = elem_type(q.dtype());
  p.o_type = elem_type(o.dtype());
  p.causal = call.causal;
  p.top_left = call.top_left;
  p.window = call.window;
  p.scale = s.scale;
  set_score_terms(call, p);
  p.entries.resize(static_cast<size_t>(s.B));
  if (call.cache) {
    const KVCache& cache = *call.cache;
    p.kv_type = KVCacheAccess::kv_type(cache);
    const int64_t rows = KVCacheAccess::head_tokens(cache);
    p.k_head_stride = rows * s.D;
    p.v_head_stride = rows * s.Dv;
    p.k_row_stride = s.D;
    p.v_row_stride = s.Dv;
    p.k_blocked = true;
    p.scale_head_stride = rows;
    for (int64_t b = 0; b < s.B; ++b) {
      const int64_t seq = call.seqs[static_cast<size_t>(b)];
      exec::BatchEntry& e = p.entries[static_cast<size_t>(b)];
      e.q = element_at(q, b);
      e.o = mutable_element_at(o, b);
      e.k = KVCacheAccess::keys(cache, seq);
      e.v = KVCacheAccess::values(cache, seq);
      e.k_scale = KVCacheAccess::key_scales(cache, seq);
      e.v_scale = KVCacheAccess::value_scales(cache, seq);
      e.bias = nullptr;
      e.pages = nullptr;
      e.num_queries = s.Nq;
      e.num_keys = e.valid_keys = s.cached[static_cast<size_t>(b)] + (call.append ? s.Nq : 0);
    }
    return p;
  }
  const TensorView &k = call.k, &v = call.v;
  p.kv_type = elem_type(k.dtype());
  p.k_head_stride = k.stride(1);
  p.k_row_stride = k.stride(2);
  p.v_head_stride = v.stride(1);
  p.v_row_stride = v.stride(2);
  // Broadcast dimensions of the bias are read with stride 0.
  TensorView::Dims bstride{0, 0, 0, 0};
  if (call.bias.data_ptr())
    for (int i = 0; i < 4; ++i) bstride[i] = call.bias.dim(i) == 1 ? 0 : call.bias.stride(i);
  p.bias_head_stride = bstride[1];
  p.bias_row_stride = bstride[2];
  p.bias_key_stride = bstride[3];
  for (int64_t b = 0; b < s.B; ++b) {
    exec::BatchEntry& e = p.entries[static_cast<size_t>(b)];
    e.q = element_at(q, b);
    e.k = element_at(k, b);
    e.v = element_at(v, b);
    e.o = mutable_element_at(o, b);
    e.bias = call.bias.data() ? call.bias.data() + b * bstride[0] : nullptr;
    e.pages = nullptr;
    e.num_queries = s.Nq;
    e.num_keys = s.Nk;
    e.valid_keys = call.kv_lens.empty() ? s.Nk : call.kv_lens[static_cast<size_t>(b)];
  }
  return p;
}

AttentionCall call_from_options(const char* who, const TensorView& q, const TensorView& k, const TensorView& v,
                                const TensorView& o, const SdpaOptions& opt) {
  AttentionCall c;
  c.who = who;
  c.q = q;
  c.k = k;
  c.v = v;
  c.o = o;
  c.scale = opt.scale;
  c.causal = opt.causal;
  if (opt.causal_alignment != CausalAlignment::bottom_right && opt.causal_alignment != CausalAlignment::top_left)
    fail(who, "causal_alignment is not a CausalAlignment value");
  c.top_left = opt.causal_alignment == CausalAlignment::top_left;
  c.window = opt.window;
  c.softcap = opt.softcap;
  c.sinks = opt.sinks;
  c.alibi_slopes = opt.alibi_slopes;
  c.kv_lens = opt.kv_lens;
  c.bias = opt.bias;
  c.num_threads = opt.num_threads;
  c.isa = opt.isa;
  c.fpmath = opt.fpmath;
  c.context = opt.context;
  return c;
}

const kernels::KernelTable& kernel_table(Isa isa, FpMath fpmath) { return dispatch::kernel_table_for(isa, fpmath); }

void add_attention_needs(const kernels::KernelTable& table, int64_t batch, int64_t q_heads, int64_t kv_heads,
                         int64_t num_queries, int64_t max_keys, int64_t head_dim, int64_t value_dim, int threads,
                         Needs& needs) {
  exec::add_attention_needs(table, batch, q_heads, kv_heads, num_queries, max_keys, head_dim, value_dim, threads,
                            needs);
}

void add_needs(const kernels::KernelTable& table, const Checked& s, int threads, Needs& needs) {
  exec::add_attention_needs(table, s.B, s.Hq, s.Hkv, s.Nq, s.max_keys, s.D, s.Dv, threads, needs);
}

namespace {
// Problem::store for a slot cache's append: call, checked.
struct CacheStore {
  const AttentionCall* call;
  const Checked* s;
};
void store_cache_entry(const void* ctx, size_t b, int64_t h) {
  const CacheStore& c = *static_cast<const CacheStore*>(ctx);
  const TensorView &k = c.call->k, &v = c.call->v;
  KVCacheAccess::store(*c.call->cache, c.call->seqs[b], h, c.s->cached[b], c.s->Nq,
                       element_at(k, static_cast<int64_t>(b), h), k.stride(2),
                       element_at(v, static_cast<int64_t>(b), h), v.stride(2), elem_type(k.dtype()));
}
}  // namespace

void execute(const AttentionCall& call, const Checked& s, const kernels::KernelTable& table, const Lease& lease) {
  exec::Problem p = build_problem(call, s);
  if (!(call.cache && call.append)) return exec::run_attention(p, table, lease);
  // The new K/V are stored by run_attention (each head's by the item that reads it, for decode).
  const CacheStore ctx{&call, &s};
  p.store = store_cache_entry;
  p.store_ctx = &ctx;
  for (exec::BatchEntry& e : p.entries) e.new_keys = s.Nq;
  KVCache& cache = *call.cache;
  for (int64_t b = 0; b < s.B; ++b)
    KVCacheAccess::set_length(cache, call.seqs[static_cast<size_t>(b)], s.cached[static_cast<size_t>(b)] + s.Nq);
  try {
    exec::run_attention(p, table, lease);
  } catch (...) {
    for (int64_t b = 0; b < s.B; ++b)
      KVCacheAccess::set_length(cache, call.seqs[static_cast<size_t>(b)], s.cached[static_cast<size_t>(b)]);
    throw;
  }
}

void run(const AttentionCall& call) {
  // A cache is claimed before its lengths are read, so a concurrent modification cannot slip in
  // between validation and the append.
  std::optional<CacheUse> use;
  if (call.cache) use.emplace(*call.cache, call.append, call.who);
  const Checked s = validate(call);
  const kernels::KernelTable& table = dispatch::kernel_table_for(call.isa, call.fpmath);
  Lease lease(call.context, call.num_threads);
  Needs needs;
  add_needs(table, s, lease.threads(), needs);
  lease.reserve(needs, call.who);
  execute(call, s, table, lease);
}

CacheUse::CacheUse(const KVCache& cache, bool modify, const char* who) : cache_(cache), modify_(modify) {
  std::atomic<int>& state = KVCacheAccess::use_state(cache);
  // state: > 0 readers, −1 one modifier, 0 free.
  if (modify) {
    int expected = 0;
    if (!state.compare_exchange_strong(expected, -1))
      fail(who, "the KVCache is in use by another call (a cache may be modified by one call at a time)",
           ErrorCode::concurrent_use);
  } else {
    int seen = state.load();
    do {
      if (seen < 0) fail(who, "the KVCache is being modified by another call", ErrorCode::concurrent_use);
    } while (!state.compare_exchange_weak(seen, seen + 1));
  }
}

CacheUse::~CacheUse() {
  std::atomic<int>& state = KVCacheAccess::use_state(cache_);
  if (modify_)
    state.store(0);
  else
    state.fetch_sub(1);
}

}  // namespace attend::detail
