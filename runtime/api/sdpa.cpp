// scaled_dot_product_attention: validate → plan → execute. The only file of the SDPA path that
// touches public types.
#include <algorithm>
#include <attend/error.hpp>
#include <attend/sdpa.hpp>
#include <cmath>
#include <sstream>
#include <string>

#include "../dispatch/registry.hpp"
#include "../exec/attention.hpp"

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
  // The shapes suffix is formatted only when a check fails (this runs on every decode step).
  const auto shapes = [&] {
    return " (q " + dims(q.shape()) + ", k " + dims(k.shape()) + ", v " + dims(v.shape()) + ", o " + dims(o.shape()) +
           ")";
  };
  if (s.D == 0) fail("head dim D must be > 0" + shapes());
  if (s.Dv == 0) fail("value dim Dv must be > 0" + shapes());
  if (k.dim(0) != s.B || v.dim(0) != s.B || o.dim(0) != s.B) fail("batch sizes differ" + shapes());
  if (k.dim(3) != s.D) fail("k head dim does not match q head dim" + shapes());
  if (v.dim(1) != s.Hkv || v.dim(2) != s.Nk) fail("v heads/keys do not match k" + shapes());
  if (o.dim(1) != s.Hq || o.dim(2) != s.Nq || o.dim(3) != s.Dv) fail("o must be [B, Hq, Nq, Dv]" + shapes());
  if (s.Hkv == 0 && s.Hq != 0) fail("k has 0 heads but q has heads" + shapes());
  if (s.Hkv > 0 && s.Hq % s.Hkv != 0) fail("q heads must be a multiple of kv heads (GQA)" + shapes());
  if (s.Nk >= kMaxKeys) fail("Nk must be below 2^24" + shapes());
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
    fail("o overlaps an input" + shapes());
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
  return exec::attention_workspace_bytes(dispatch::kernel_table_for(opt.isa), q.dim(0), q.dim(1), k.dim(1), q.dim(2),
                                         k.dim(2), q.dim(3), v.dim(3), opt.num_threads);
}

void scaled_dot_product_attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                                  const SdpaOptions& opt) {
  const Validated s = validate(q, k, v, o, opt);
  const kernels::KernelTable& table = dispatch::kernel_table_for(opt.isa);

  exec::Problem p;
  p.batch = s.B;
  p.q_heads = s.Hq;
  p.kv_heads = s.Hkv;
  p.num_queries = s.Nq;
  p.head_dim = s.D;
  p.value_dim = s.Dv;
  p.q_head_stride = q.stride(1);
  p.q_row_stride = q.stride(2);
  p.k_head_stride = k.stride(1);
  p.k_row_stride = k.stride(2);
  p.v_head_stride = v.stride(1);
  p.v_row_stride = v.stride(2);
  p.o_head_stride = o.stride(1);
  p.o_row_stride = o.stride(2);
  p.causal = opt.causal;
  p.window = opt.window;
  p.scale = s.scale;
  // Broadcast dimensions of the bias are read with stride 0.
  TensorView::Dims bstride{0, 0, 0, 0};
  if (opt.bias.data())
    for (int i = 0; i < 4; ++i) bstride[i] = opt.bias.dim(i) == 1 ? 0 : opt.bias.stride(i);
  p.bias_head_stride = bstride[1];
  p.bias_row_stride = bstride[2];
  p.bias_key_stride = bstride[3];
  p.entries.resize(static_cast<size_t>(s.B));
  for (int64_t b = 0; b < s.B; ++b) {
    exec::BatchEntry& e = p.entries[static_cast<size_t>(b)];
    e.q = q.data() + b * q.stride(0);
    e.k = k.data() + b * k.stride(0);
    e.v = v.data() + b * v.stride(0);
    e.o = o.mutable_data() + b * o.stride(0);
    e.bias = opt.bias.data() ? opt.bias.data() + b * bstride[0] : nullptr;
    e.num_keys = s.Nk;
    e.valid_keys = opt.kv_lens.empty() ? s.Nk : opt.kv_lens[b];
  }
  exec::run_attention(p, table, opt.num_threads);
}

}  // namespace attend
