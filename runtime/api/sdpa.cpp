// scaled_dot_product_attention: validate → plan → execute. The only file of the SDPA path that
// touches public types.
#include <algorithm>
#include <attend/error.hpp>
#include <attend/sdpa.hpp>
#include <cmath>
#include <sstream>
#include <string>

#include "../dispatch/registry.hpp"
#include "../parallel/scheduler.hpp"
#include "../plan/attention_plan.hpp"

namespace attend {
namespace {

std::string dims(const TensorView::Dims& d) {
  std::ostringstream s;
  s << '[' << d[0] << ',' << d[1] << ',' << d[2] << ',' << d[3] << ']';
  return s.str();
}

[[noreturn]] void fail(const std::string& message) { throw Error(ErrorCode::invalid_argument, "sdpa: " + message); }

// Masks compare key indices as f32 inside the kernels; they are exact below 2^24.
constexpr int64_t kMaxKeys = int64_t{1} << 24;

// [first, last] element addresses a view can touch; empty views touch nothing.
struct Extent {
  const float* first = nullptr;
  const float* last = nullptr;
  bool empty = true;
};

Extent extent(const TensorView& t) {
  Extent e;
  if (t.numel() == 0) return e;
  int64_t span = 0;
  for (int i = 0; i < 4; ++i) span += (t.dim(i) - 1) * t.stride(i);
  e.first = t.data();
  e.last = t.data() + span;
  e.empty = false;
  return e;
}

bool overlaps(const Extent& a, const Extent& b) {
  return !a.empty && !b.empty && !(a.last < b.first || b.last < a.first);
}

void check_view(const char* name, const TensorView& t) {
  for (int i = 0; i < 4; ++i) {
    if (t.dim(i) < 0) fail(std::string(name) + " has a negative dimension: shape " + dims(t.shape()));
    if (t.stride(i) < 0) fail(std::string(name) + " has a negative stride: strides " + dims(t.strides()));
  }
  if (t.numel() > 0 && t.data() == nullptr) fail(std::string(name) + " data is null (shape " + dims(t.shape()) + ")");
  if (t.dim(3) > 1 && t.stride(3) != 1)
    fail(std::string(name) + " last dimension must be contiguous (stride 1), strides " + dims(t.strides()));
}

// Distinct output elements must have distinct addresses, or threads would race on them.
void check_no_self_overlap(const TensorView& t) {
  int order[4] = {0, 1, 2, 3};
  std::sort(order, order + 4, [&](int a, int b) { return t.stride(a) < t.stride(b); });
  int64_t reach = 0;  // elements spanned by the dimensions seen so far, minus one
  for (int i : order) {
    if (t.dim(i) <= 1) continue;
    if (t.stride(i) <= reach)
      fail("o strides " + dims(t.strides()) + " make distinct elements of shape " + dims(t.shape()) + " alias");
    reach += (t.dim(i) - 1) * t.stride(i);
  }
}

struct Validated {
  int64_t B, Hq, Hkv, Nq, Nk, D, Dv;
  float scale;
};

Validated validate(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                   const SdpaOptions& opt) {
  check_view("q", q);
  check_view("k", k);
  check_view("v", v);
  check_view("o", o);
  Validated s{q.dim(0), q.dim(1), k.dim(1), q.dim(2), k.dim(2), q.dim(3), v.dim(3), 0.0f};
  const std::string shapes =
      " (q " + dims(q.shape()) + ", k " + dims(k.shape()) + ", v " + dims(v.shape()) + ", o " + dims(o.shape()) + ")";
  if (s.D == 0) fail("head dim D must be > 0" + shapes);
  if (s.Dv == 0) fail("value dim Dv must be > 0" + shapes);
  if (k.dim(0) != s.B || v.dim(0) != s.B || o.dim(0) != s.B) fail("batch sizes differ" + shapes);
  if (k.dim(3) != s.D) fail("k head dim does not match q head dim" + shapes);
  if (v.dim(1) != s.Hkv || v.dim(2) != s.Nk) fail("v heads/keys do not match k" + shapes);
  if (o.dim(1) != s.Hq || o.dim(2) != s.Nq || o.dim(3) != s.Dv) fail("o must be [B, Hq, Nq, Dv]" + shapes);
  if (s.Hkv == 0 && s.Hq != 0) fail("k has 0 heads but q has heads" + shapes);
  if (s.Hkv > 0 && s.Hq % s.Hkv != 0) fail("q heads must be a multiple of kv heads (GQA)" + shapes);
  if (s.Nk >= kMaxKeys) fail("Nk must be below 2^24" + shapes);
  if (!o.writable()) fail("o is a read-only view (built from const float*)");
  if (!std::isfinite(opt.scale)) fail("scale must be finite");
  if (opt.window < 0) fail("window must be >= 0, got " + std::to_string(opt.window));
  if (!opt.kv_lens.empty()) {
    if (static_cast<int64_t>(opt.kv_lens.size()) != s.B)
      fail("kv_lens has " + std::to_string(opt.kv_lens.size()) + " entries, expected B = " + std::to_string(s.B));
    for (size_t b = 0; b < opt.kv_lens.size(); ++b)
      if (opt.kv_lens[b] < 0 || opt.kv_lens[b] > s.Nk)
        fail("kv_lens[" + std::to_string(b) + "] = " + std::to_string(opt.kv_lens[b]) +
             " is outside [0, Nk = " + std::to_string(s.Nk) + "]");
  }
  if (opt.num_threads < 0) fail("num_threads must be >= 0, got " + std::to_string(opt.num_threads));
  const Extent oe = extent(o);
  if (overlaps(oe, extent(q)) || overlaps(oe, extent(k)) || overlaps(oe, extent(v)))
    fail("o overlaps an input" + shapes);
  check_no_self_overlap(o);
  if (opt.bias.data()) {
    const TensorView& b = opt.bias;
    check_view("bias", b);
    const TensorView::Dims full{s.B, s.Hq, s.Nq, s.Nk};
    for (int i = 0; i < 4; ++i)
      if (b.dim(i) != 1 && b.dim(i) != full[i])
        fail("bias shape " + dims(b.shape()) + " does not broadcast to [B, Hq, Nq, Nk] = " + dims(full));
    if (overlaps(oe, extent(b))) fail("o overlaps bias");
  }
  s.scale = opt.scale != 0.0f ? opt.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.D)));
  return s;
}

}  // namespace

size_t sdpa_workspace_bytes(const TensorView& q, const TensorView& k, const TensorView& v, const SdpaOptions& opt) {
  check_view("q", q);
  check_view("k", k);
  check_view("v", v);
  if (q.dim(3) == 0 || v.dim(3) == 0) fail("head dims must be > 0");
  if (k.dim(1) == 0 || q.dim(1) % k.dim(1) != 0) fail("q heads must be a multiple of kv heads (GQA)");
  const kernels::KernelTable& table = dispatch::kernel_table_for(opt.isa);
  const plan::AttentionPlan p =
      plan::make_plan(table, q.dim(0), q.dim(1), k.dim(1), q.dim(2), k.dim(2), q.dim(3), v.dim(3));
  const int64_t threads =
      std::min<int64_t>(parallel::resolve_threads(opt.num_threads), std::max<int64_t>(1, p.items()));
  return sizeof(float) * (static_cast<size_t>(threads) * p.scratch_floats + p.partial_floats());
}

void scaled_dot_product_attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                                  const SdpaOptions& opt) {
  const Validated s = validate(q, k, v, o, opt);
  const kernels::KernelTable& table = dispatch::kernel_table_for(opt.isa);
  if (s.B == 0 || s.Hq == 0 || s.Nq == 0) return;

  const plan::AttentionPlan p = plan::make_plan(table, s.B, s.Hq, s.Hkv, s.Nq, s.Nk, s.D, s.Dv);
  const int threads = parallel::resolve_threads(opt.num_threads);

  // Broadcast dimensions of the bias read with stride 0.
  TensorView::Dims bstride{0, 0, 0, 0};
  if (opt.bias.data())
    for (int i = 0; i < 4; ++i) bstride[i] = opt.bias.dim(i) == 1 ? 0 : opt.bias.stride(i);

  float* partial = p.key_splits > 1 ? parallel::thread_buffer(p.partial_floats(), 1) : nullptr;
  const float scale_log2e = s.scale * 1.4426950408889634f;

  // Items in head-major order, heaviest row block first within a head (causal rows late in the
  // sequence see more keys), so both threads walk the same head's K/V while it is in cache.
  auto run_item = [&](int64_t item) {
    int64_t rest = item;
    const int64_t split = rest % p.key_splits;
    rest /= p.key_splits;
    const int64_t block = p.row_blocks - 1 - rest % p.row_blocks;
    rest /= p.row_blocks;
    const int64_t hkv = rest % p.kv_heads;
    const int64_t b = rest / p.kv_heads;
    const int64_t h0 = hkv * p.group;

    kernels::FlashWork w{};
    w.q = q.data() + b * q.stride(0) + h0 * q.stride(1);
    w.q_head_stride = q.stride(1);
    w.q_row_stride = q.stride(2);
    w.k = k.data() + b * k.stride(0) + hkv * k.stride(1);
    w.k_row_stride = k.stride(2);
    w.v = v.data() + b * v.stride(0) + hkv * v.stride(1);
    w.v_row_stride = v.stride(2);
    if (opt.bias.data()) {
      w.bias = opt.bias.data() + b * bstride[0] + h0 * bstride[1];
      w.bias_head_stride = bstride[1];
      w.bias_row_stride = bstride[2];
      w.bias_key_stride = bstride[3];
    }
    w.group = p.group;
    w.row_begin = block * p.block_rows;
    w.row_count = std::min(p.block_rows, p.group_rows - w.row_begin);
    w.head_dim = s.D;
    w.value_dim = s.Dv;
    w.num_keys = s.Nk;
    w.num_queries = s.Nq;
    w.valid_keys = opt.kv_lens.empty() ? s.Nk : opt.kv_lens[b];
    w.causal = opt.causal;
    w.window = opt.window;
    w.key_begin = split * p.split_keys;
    w.key_end = std::min(s.Nk, w.key_begin + p.split_keys);
    w.scale_log2e = scale_log2e;
    w.o = o.mutable_data() + b * o.stride(0) + h0 * o.stride(1);
    w.o_head_stride = o.stride(1);
    w.o_row_stride = o.stride(2);
    if (partial) {
      // [b][hkv][split][row][Dv + 2]: accumulators first, then (max, sum) pairs.
      float* base = partial + ((b * p.kv_heads + hkv) * p.key_splits + split) * p.group_rows * (s.Dv + 2);
      w.partial_acc = base;
      w.partial_ml = base + p.group_rows * s.Dv;
    }
    table.flash(w, parallel::thread_buffer(p.scratch_floats));
  };
  parallel::parallel_for(p.items(), threads, run_item);
  if (!partial) return;

  // Merge the split-K partial states in split order (fixed, so the result does not depend on which
  // thread computed which split): O = Σ 2^(m_c − M)·acc_c / Σ 2^(m_c − M)·l_c.
  auto merge = [&](int64_t bh) {
    const int64_t b = bh / p.kv_heads, hkv = bh % p.kv_heads;
    const size_t split_floats = static_cast<size_t>(p.group_rows * (s.Dv + 2));
    const float* base = partial + static_cast<size_t>(bh * p.key_splits) * split_floats;
    for (int64_t r = 0; r < p.group_rows; ++r) {
      const int64_t i = r / p.group, g = r % p.group;
      float* out = o.mutable_data() + b * o.stride(0) + (hkv * p.group + g) * o.stride(1) + i * o.stride(2);
      float m = -INFINITY;
      for (int64_t c = 0; c < p.key_splits; ++c) {
        const float* ml = base + c * split_floats + p.group_rows * s.Dv;
        m = std::max(m, ml[2 * r]);
      }
      float l = 0.0f;
      for (int64_t d = 0; d < s.Dv; ++d) out[d] = 0.0f;
      if (m == -INFINITY) continue;  // every key masked: zeros
      for (int64_t c = 0; c < p.key_splits; ++c) {
        const float* split_base = base + c * split_floats;
        const float* ml = split_base + p.group_rows * s.Dv;
        if (ml[2 * r + 1] == 0.0f) continue;
        const float f = std::exp2(ml[2 * r] - m);
        l += f * ml[2 * r + 1];
        const float* acc = split_base + r * s.Dv;
        for (int64_t d = 0; d < s.Dv; ++d) out[d] += f * acc[d];
      }
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      for (int64_t d = 0; d < s.Dv; ++d) out[d] *= inv;
    }
  };
  parallel::parallel_for(p.batch * p.kv_heads, threads, merge);
}

}  // namespace attend
