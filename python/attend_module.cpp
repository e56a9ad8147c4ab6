// `import attend`: attend for Python. scaled_dot_product_attention with the semantics of
// torch.nn.functional.scaled_dot_product_attention, the caches, the layer, on torch tensors and
// numpy arrays read in place (their data pointers and strides; no copy of q, k, v or x), the GIL
// released while attend computes. attend::Error becomes ValueError (invalid arguments) or
// RuntimeError (capacity, concurrent use, unsupported) with attend's message.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <attend/attend.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "io/io_error.hpp"
#include "io/layer_file.hpp"
#include "io/safetensors.hpp"

namespace py = pybind11;
using attend::DType;
using attend::TensorView;

namespace {

// ---- arrays: torch tensors and numpy arrays, in place --------------------------------------------

enum class Kind { torch, numpy };
enum class Elem { f32, bf16, f16, boolean, other };

struct Array {
  py::object obj;  // the tensor or array (kept alive by the caller's frame, and by this)
  Kind kind = Kind::numpy;
  Elem elem = Elem::other;
  std::vector<int64_t> shape, strides;  // strides in elements
  void* data = nullptr;
  bool writable = true;
  int64_t ndim() const { return static_cast<int64_t>(shape.size()); }
  int64_t size() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
  bool contiguous() const {
    int64_t want = 1;
    for (int64_t i = ndim() - 1; i >= 0; --i) {
      if (shape[i] != 1 && strides[i] != want) return false;
      want *= shape[i];
    }
    return true;
  }
};

[[noreturn]] void value_error(const std::string& m) { throw py::value_error(m); }

bool is_torch(py::handle h) {
  const std::string module = py::str(py::type::handle_of(h).attr("__module__"));
  return module.rfind("torch", 0) == 0 && py::hasattr(h, "data_ptr");
}

DType dtype_of(Elem e) {
  switch (e) {
    case Elem::bf16: return DType::bf16;
    case Elem::f16: return DType::f16;
    default: return DType::f32;
  }
}
const char* elem_name(Elem e) {
  switch (e) {
    case Elem::f32: return "float32";
    case Elem::bf16: return "bfloat16";
    case Elem::f16: return "float16";
    case Elem::boolean: return "bool";
    default: return "an unsupported dtype";
  }
}

Array as_array(py::handle h, const std::string& name) {
  Array a;
  a.obj = py::reinterpret_borrow<py::object>(h);
  if (is_torch(h)) {
    a.kind = Kind::torch;
    const std::string device = py::str(h.attr("device").attr("type"));
    if (device != "cpu") value_error(name + " is on device '" + device + "': attend computes on the CPU");
    const std::string dt = py::str(h.attr("dtype"));
    a.elem = dt == "torch.float32"    ? Elem::f32
             : dt == "torch.bfloat16" ? Elem::bf16
             : dt == "torch.float16"  ? Elem::f16
             : dt == "torch.bool"     ? Elem::boolean
                                      : Elem::other;
    if (a.elem == Elem::other) value_error(name + " has dtype " + dt + ": attend takes float32, bfloat16 or float16");
    for (py::handle s : py::tuple(h.attr("shape"))) a.shape.push_back(s.cast<int64_t>());
    for (py::handle s : py::tuple(h.attr("stride")())) a.strides.push_back(s.cast<int64_t>());
    a.data = reinterpret_cast<void*>(h.attr("data_ptr")().cast<uintptr_t>());
    return a;
  }
  if (!py::isinstance<py::array>(h))
    value_error(name + " must be a torch.Tensor or a numpy.ndarray, got " +
                std::string(py::str(py::type::handle_of(h).attr("__name__"))));
  const py::array arr = py::reinterpret_borrow<py::array>(h);
  const py::dtype dt = arr.dtype();
  const char kind = dt.kind();
  const int64_t item = static_cast<int64_t>(dt.itemsize());
  a.elem = kind == 'f' && item == 4   ? Elem::f32
           : kind == 'f' && item == 2 ? Elem::f16
           : kind == 'b'              ? Elem::boolean
                                      : Elem::other;
  if (a.elem == Elem::other)
    value_error(name + " has numpy dtype " + std::string(py::str(static_cast<const py::handle&>(dt))) +
                ": attend takes float32 or float16");
  for (py::ssize_t i = 0; i < arr.ndim(); ++i) {
    a.shape.push_back(arr.shape(i));
    if (arr.strides(i) % item != 0) value_error(name + " has strides that are not whole elements");
    a.strides.push_back(arr.strides(i) / item);
  }
  a.data = const_cast<void*>(arr.data());
  a.writable = arr.writeable();
  return a;
}

// A new, dense array of `like`'s kind and element type.
Array empty_like(const Array& like, const std::vector<int64_t>& shape, Elem elem) {
  py::tuple dims(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) dims[i] = py::int_(shape[i]);
  py::object out;
  if (like.kind == Kind::torch) {
    const py::module_ torch = py::module_::import("torch");
    const char* name = elem == Elem::bf16 ? "bfloat16" : elem == Elem::f16 ? "float16" : "float32";
    out = torch.attr("empty")(dims, py::arg("dtype") = torch.attr(name));
  } else {
    out = py::array(elem == Elem::f16 ? py::dtype("float16") : py::dtype("float32"),
                    std::vector<py::ssize_t>(shape.begin(), shape.end()));
  }
  return as_array(out, "output");
}

// A float vector from a sequence, a numpy array or a tensor (None → empty).
std::vector<float> float_vector(const py::object& o) {
  if (o.is_none()) return {};
  py::object x = o;
  if (is_torch(o))
    x = o.attr("detach")().attr("float")().attr("tolist")();
  else if (py::isinstance<py::array>(o))
    x = o.attr("tolist")();
  return x.cast<std::vector<float>>();
}

// A contiguous float32 copy of a weight (torch, numpy or a nested sequence): construction copies
// weights anyway.
py::array_t<float, py::array::c_style | py::array::forcecast> weight_array(const py::object& o) {
  py::object x = o;
  if (is_torch(o))
    x = o.attr("detach")()
            .attr("to")(py::module_::import("torch").attr("float32"))
            .attr("contiguous")()
            .attr("numpy")();
  return py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(x);
}

DType storage_dtype(const std::string& s) {
  if (s == "f32" || s == "float32") return DType::f32;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "f16" || s == "float16") return DType::f16;
  if (s == "i8" || s == "int8") return DType::i8;
  value_error("dtype '" + s + "': expected f32, bf16, f16 or i8");
}
attend::FpMath fpmath_of(const std::string& s) {
  if (s == "strict") return attend::FpMath::strict;
  if (s == "bf16") return attend::FpMath::bf16;
  value_error("fpmath '" + s + "': expected 'strict' or 'bf16'");
}
attend::Isa isa_of(const std::string& s) {
  for (attend::Isa i :
       {attend::Isa::automatic, attend::Isa::generic, attend::Isa::avx2, attend::Isa::avx512, attend::Isa::avx512_bf16})
    if (s == attend::isa_name(i)) return i;
  value_error("isa '" + s + "': expected automatic, generic, avx2, avx512 or avx512_bf16");
}

// A 4-d view of an array whose dims are [.., H, N, D] at the given element offset.
TensorView view4(const Array& a, int64_t offset, const std::array<int64_t, 4>& shape,
                 const std::array<int64_t, 4>& strides, bool writable) {
  const size_t bytes = a.elem == Elem::f32 ? 4 : 2;
  char* p = static_cast<char*>(a.data) + offset * static_cast<int64_t>(bytes);
  if (writable) return TensorView(static_cast<void*>(p), dtype_of(a.elem), shape, strides);
  return TensorView(static_cast<const void*>(p), dtype_of(a.elem), shape, strides);
}

// ---- scaled_dot_product_attention ----------------------------------------------------------------

// Right-aligns `a`'s dims to `nd` (missing leading dims: size 1).
void pad_to(Array& a, int64_t nd) {
  while (a.ndim() < nd) {
    a.shape.insert(a.shape.begin(), 1);
    a.strides.insert(a.strides.begin(), 0);
  }
}

// Options shared by the attention entry points.
struct CommonOptions {
  int64_t window = 0;
  float softcap = 0.0f;
  std::vector<float> sinks, slopes;
  int num_threads = 0;
  std::string fpmath = "strict", isa = "automatic";
  void apply(attend::SdpaOptions& o) const {
    o.window = window;
    o.softcap = softcap;
    o.sinks = sinks;
    o.alibi_slopes = slopes;
    o.num_threads = num_threads;
    o.fpmath = fpmath_of(fpmath);
    o.isa = isa_of(isa);
  }
};

// The keyword options every attention entry point takes, as passed from Python.
CommonOptions common_options(int64_t window, double softcap, const py::object& sinks, const py::object& slopes,
                             int num_threads, const std::string& fpmath, const std::string& isa) {
  return CommonOptions{
      window, static_cast<float>(softcap), float_vector(sinks), float_vector(slopes), num_threads, fpmath, isa};
}

py::object sdpa(const py::object& query, const py::object& key, const py::object& value, const py::object& attn_mask,
                double dropout_p, bool is_causal, std::optional<double> scale, bool enable_gqa, int64_t window,
                double softcap, const py::object& sinks, const py::object& alibi_slopes,
                const std::string& causal_alignment, int num_threads, const std::string& fpmath,
                const std::string& isa) {
  if (dropout_p != 0.0) value_error("dropout_p must be 0: attend computes attention for inference, without dropout");
  Array q = as_array(query, "query"), k = as_array(key, "key"), v = as_array(value, "value");
  for (const Array* a : {&q, &k, &v})
    if (a->elem == Elem::boolean) value_error("query, key and value must be floating point");
  if (q.elem != k.elem || q.elem != v.elem)
    value_error(std::string("query, key and value must have one dtype, got ") + elem_name(q.elem) + ", " +
                elem_name(k.elem) + " and " + elem_name(v.elem));
  if (q.kind != k.kind || q.kind != v.kind)
    value_error("query, key and value must all be torch tensors or all numpy arrays");
  if (q.ndim() < 2 || k.ndim() < 2 || v.ndim() < 2)
    value_error("query, key and value need at least 2 dimensions (..., L, E)");
  const int64_t user_nd = std::max(q.ndim(), std::max(k.ndim(), v.ndim()));
  const int64_t nd = std::max({q.ndim(), k.ndim(), v.ndim(), int64_t{3}});
  pad_to(q, nd);
  pad_to(k, nd);
  pad_to(v, nd);
  const int64_t L = q.shape[nd - 2], E = q.shape[nd - 1], S = k.shape[nd - 2], Ev = v.shape[nd - 1];
  if (k.shape[nd - 1] != E)
    value_error("key's last dimension " + std::to_string(k.shape[nd - 1]) + " differs from query's " +
                std::to_string(E));
  if (v.shape[nd - 2] != S)
    value_error("value has " + std::to_string(v.shape[nd - 2]) + " positions, key " + std::to_string(S));
  const int64_t Hq = q.shape[nd - 3], Hk = k.shape[nd - 3];
  if (v.shape[nd - 3] != Hk) value_error("key and value have different numbers of heads");
  if (Hk != Hq && !(enable_gqa ? Hk > 0 && Hq % Hk == 0 : Hk == 1))
    value_error("query has " + std::to_string(Hq) + " heads and key " + std::to_string(Hk) +
                (enable_gqa ? ": the query heads must be a multiple of the key heads"
                            : ": pass enable_gqa=True for grouped-query attention"));
  // Batch dims (before the heads): key and value equal to query's or broadcast from 1.
  for (int64_t d = 0; d < nd - 3; ++d)
    for (Array* a : {&k, &v}) {
      if (a->shape[d] == q.shape[d]) continue;
      if (a->shape[d] != 1) value_error("the batch dimensions of query, key and value do not broadcast");
      a->shape[d] = q.shape[d];
      a->strides[d] = 0;
    }
  attend::SdpaOptions opt;
  opt.causal = is_causal;
  if (causal_alignment == "top_left")
    opt.causal_alignment = attend::CausalAlignment::top_left;
  else if (causal_alignment != "bottom_right")
    value_error("causal_alignment must be 'top_left' or 'bottom_right'");
  if (scale) {
    if (!std::isfinite(*scale)) value_error("scale must be finite");
    // attend reads 0 as "1/sqrt(E)"; torch's scale=0 means all scores 0. The smallest positive float
    // gives scores that round to 0 (exactly what 0 would).
    opt.scale = *scale == 0.0 ? std::numeric_limits<float>::denorm_min() : static_cast<float>(*scale);
  }
  // (opt's sinks and slopes are views of co's vectors: co lives as long as the calls.)
  const CommonOptions co = common_options(window, softcap, sinks, alibi_slopes, num_threads, fpmath, isa);
  co.apply(opt);

  std::vector<int64_t> out_shape(q.shape.begin(), q.shape.end() - 1);
  out_shape.push_back(Ev);
  // The output: query's kind and dtype, its shape with Ev, dense (a 2-d query's padding is dropped
  // at the end).
  Array o = empty_like(q, out_shape, q.elem);

  // The mask: bool (True = attend) or float (added), broadcast to [..., L, S].
  std::vector<float> mask_buf;
  Array m;
  const bool has_mask = !attn_mask.is_none();
  if (has_mask) {
    if (is_causal) value_error("attn_mask and is_causal=True are exclusive (as in torch)");
    m = as_array(attn_mask, "attn_mask");
    if (m.ndim() > nd) value_error("attn_mask has more dimensions than query");
    pad_to(m, nd);
    std::vector<int64_t> want = out_shape;
    want[nd - 1] = S;
    for (int64_t d = 0; d < nd; ++d)
      if (m.shape[d] != 1 && m.shape[d] != want[d])
        value_error("attn_mask does not broadcast to the attention shape (dimension " + std::to_string(d) + ")");
    // attend's bias is f32 with a unit key stride. A bool mask becomes 0 / −inf, another float mask
    // a float32 copy (the mask only: q, k and v are always read in place).
    if (m.elem == Elem::boolean) {
      mask_buf.resize(static_cast<size_t>(m.size()));
      std::vector<int64_t> idx(static_cast<size_t>(nd), 0);
      for (int64_t n = 0; n < m.size(); ++n) {
        int64_t off = 0;
        for (int64_t d = 0; d < nd; ++d) off += idx[d] * m.strides[d];
        mask_buf[static_cast<size_t>(n)] = static_cast<const uint8_t*>(m.data)[off] ? 0.0f : -INFINITY;
        for (int64_t d = nd - 1; d >= 0; --d) {
          if (++idx[d] < m.shape[d]) break;
          idx[d] = 0;
        }
      }
      std::vector<int64_t> dense(static_cast<size_t>(nd), 1);
      for (int64_t d = nd - 2; d >= 0; --d) dense[d] = dense[d + 1] * m.shape[d + 1];
      m.strides = dense;
      m.data = mask_buf.data();
      m.elem = Elem::f32;
    } else if (m.elem != Elem::f32 || (m.shape[nd - 1] > 1 && m.strides[nd - 1] != 1)) {
      py::object f32 = m.kind == Kind::torch
                           ? attn_mask.attr("to")(py::module_::import("torch").attr("float32")).attr("contiguous")()
                           : py::module_::import("numpy").attr("ascontiguousarray")(attn_mask, "float32");
      Array c = as_array(f32, "attn_mask");
      pad_to(c, nd);
      m = c;
    }
  }

  // One attend call per index of the dims before the batch dim (nd − 4); the batch dim is B.
  const int64_t outer_nd = std::max<int64_t>(0, nd - 4);
  int64_t outer = 1;
  for (int64_t d = 0; d < outer_nd; ++d) outer *= q.shape[d];
  const int64_t bd = nd - 4;  // the batch dim, or −1 (nd = 3)
  auto dims4 = [&](const Array& a, int64_t rows, int64_t cols) {
    return std::array<int64_t, 4>{bd >= 0 ? a.shape[bd] : 1, a.shape[nd - 3], rows, cols};
  };
  auto strides4 = [&](const Array& a) {
    return std::array<int64_t, 4>{bd >= 0 ? a.strides[bd] : 0, a.strides[nd - 3], a.strides[nd - 2], a.strides[nd - 1]};
  };
  std::vector<int64_t> idx(static_cast<size_t>(outer_nd), 0);
  for (int64_t n = 0; n < outer; ++n) {
    int64_t oq = 0, ok = 0, ov = 0, oo = 0, om = 0;
    for (int64_t d = 0; d < outer_nd; ++d) {
      oq += idx[d] * q.strides[d];
      ok += idx[d] * k.strides[d];
      ov += idx[d] * v.strides[d];
      oo += idx[d] * o.strides[d];
      if (has_mask && m.shape[d] > 1) om += idx[d] * m.strides[d];
    }
    const TensorView tq = view4(q, oq, dims4(q, L, E), strides4(q), false);
    const TensorView tk = view4(k, ok, dims4(k, S, E), strides4(k), false);
    const TensorView tv = view4(v, ov, dims4(v, S, Ev), strides4(v), false);
    const TensorView to = view4(o, oo, dims4(o, L, Ev), strides4(o), true);
    attend::SdpaOptions call = opt;
    if (has_mask) {
      const std::array<int64_t, 4> ms{bd >= 0 ? m.shape[bd] : 1, m.shape[nd - 3], m.shape[nd - 2], m.shape[nd - 1]};
      const std::array<int64_t, 4> mst{bd >= 0 ? m.strides[bd] : 0, m.strides[nd - 3], m.strides[nd - 2],
                                       m.strides[nd - 1]};
      call.bias = TensorView(static_cast<const float*>(m.data) + om, ms, mst);
    }
    {
      py::gil_scoped_release unlocked;
      attend::scaled_dot_product_attention(tq, tk, tv, to, call);
    }
    for (int64_t d = outer_nd - 1; d >= 0; --d) {
      if (++idx[d] < q.shape[d]) break;
      idx[d] = 0;
    }
  }
  // Back to the caller's rank: 2-d inputs give a 2-d output.
  if (user_nd < nd) {
    std::vector<int64_t> shape(out_shape.end() - user_nd, out_shape.end());
    py::tuple dims(shape.size());
    for (size_t i = 0; i < shape.size(); ++i) dims[i] = py::int_(shape[i]);
    return o.obj.attr("reshape")(dims);
  }
  return o.obj;
}

// ---- caches ------------------------------------------------------------------------------------

// q/k/v of the cache calls: [1 or B, H, N, D] views (a 3-d [H, N, D] array is one sequence).
TensorView cache_view(const Array& a, const char* name, bool writable) {
  if (a.elem == Elem::boolean) value_error(std::string(name) + " must be floating point");
  if (a.ndim() != 3 && a.ndim() != 4) value_error(std::string(name) + " must be [B, H, N, D] or [H, N, D]");
  const int64_t o = a.ndim() == 4 ? 1 : 0;
  const std::array<int64_t, 4> shape{o ? a.shape[0] : 1, a.shape[o], a.shape[o + 1], a.shape[o + 2]};
  const std::array<int64_t, 4> strides{o ? a.strides[0] : 0, a.strides[o], a.strides[o + 1], a.strides[o + 2]};
  return view4(a, 0, shape, strides, writable);
}

struct Chunks {
  std::vector<std::vector<int32_t>> parents;
  std::vector<attend::SequenceChunk> chunks;
};
// A list of (seq, tokens) or (seq, tokens, parents) tuples.
Chunks chunks_of(const py::sequence& list) {
  Chunks c;
  c.parents.reserve(list.size());
  for (py::handle h : list) {
    const py::tuple t = py::reinterpret_borrow<py::object>(h).cast<py::tuple>();
    if (t.size() != 2 && t.size() != 3) value_error("a chunk is (seq, tokens) or (seq, tokens, parents)");
    c.parents.push_back(t.size() == 3 && !t[2].is_none() ? t[2].cast<std::vector<int32_t>>() : std::vector<int32_t>{});
    c.chunks.push_back({t[0].cast<int64_t>(), t[1].cast<int64_t>(), {}});
  }
  for (size_t i = 0; i < c.chunks.size(); ++i) c.chunks[i].parents = c.parents[i];
  return c;
}

py::object attention_output(const Array& q, int64_t value_dim) {
  std::vector<int64_t> shape = q.shape;
  shape.back() = value_dim;
  return empty_like(q, shape, q.elem).obj;
}

// The views of a cache call: q, k_new, v_new read in place, o a new array of q's type with the
// cache's value width.
struct CacheCall {
  Array q, k, v, o;
  TensorView tq, tk, tv, to;
  attend::SdpaOptions opt;
};
CacheCall cache_call(const py::object& query, const py::object& k_new, const py::object& v_new, int64_t head_dim,
                     int64_t value_dim, const CommonOptions& co) {
  CacheCall c;
  c.q = as_array(query, "query");
  c.k = as_array(k_new, "k_new");
  c.v = as_array(v_new, "v_new");
  c.o = as_array(attention_output(c.q, value_dim ? value_dim : head_dim), "output");
  c.tq = cache_view(c.q, "query", false);
  c.tk = cache_view(c.k, "k_new", false);
  c.tv = cache_view(c.v, "v_new", false);
  c.to = cache_view(c.o, "output", true);
  co.apply(c.opt);
  return c;
}

py::object cached_attention(const py::object& query, const py::object& k_new, const py::object& v_new,
                            attend::KVCache& cache, const std::vector<int64_t>& seqs, const CommonOptions& co) {
  const CacheCall c = cache_call(query, k_new, v_new, cache.config().head_dim, cache.config().value_dim, co);
  {
    py::gil_scoped_release unlocked;
    attend::cached_attention(c.tq, c.tk, c.tv, cache, seqs, c.to, c.opt);
  }
  return c.o.obj;
}

py::object paged_attention(const py::object& query, const py::object& k_new, const py::object& v_new,
                           attend::PagedKVCache& cache, const py::sequence& chunk_list, const CommonOptions& co) {
  const CacheCall c = cache_call(query, k_new, v_new, cache.config().head_dim, cache.config().value_dim, co);
  const Chunks chunks = chunks_of(chunk_list);
  {
    py::gil_scoped_release unlocked;
    attend::paged_attention(c.tq, c.tk, c.tv, cache, chunks.chunks, c.to, c.opt);
  }
  return c.o.obj;
}

// ---- the layer -----------------------------------------------------------------------------------

struct Layer {
  std::unique_ptr<attend::MultiHeadAttention> layer;
  std::string scheme;  // where the weights came from
};

attend::MhaOptions layer_options(std::optional<bool> causal, std::optional<int64_t> first_position, int num_threads,
                                 const std::string& fpmath, const std::string& isa) {
  attend::MhaOptions m;
  m.causal = causal;
  m.first_position = first_position;
  m.num_threads = num_threads;
  m.fpmath = fpmath_of(fpmath);
  m.isa = isa_of(isa);
  return m;
}

// x: [tokens, d_model] or [batch, tokens, d_model], dense; y the same shape, x's kind and dtype.
struct Activations {
  Array x, y;
  int64_t batch = 1, tokens = 0;
};
Activations activations(const attend::MultiHeadAttention& l, const py::object& x_obj, bool packed) {
  Activations a;
  a.x = as_array(x_obj, "x");
  const int64_t d = l.config().d_model;
  if (a.x.elem == Elem::boolean) value_error("x must be floating point");
  if (packed ? a.x.ndim() != 2 : (a.x.ndim() != 2 && a.x.ndim() != 3))
    value_error(packed ? "x must be [T, d_model]" : "x must be [tokens, d_model] or [batch, tokens, d_model]");
  if (a.x.shape.back() != d)
    value_error("x's last dimension is " + std::to_string(a.x.shape.back()) + ", the layer's d_model " +
                std::to_string(d));
  if (!a.x.contiguous()) value_error("x must be contiguous (row-major)");
  a.batch = a.x.ndim() == 3 ? a.x.shape[0] : 1;
  a.tokens = a.x.shape[a.x.ndim() - 2];
  a.y = empty_like(a.x, a.x.shape, a.x.elem);
  return a;
}

Layer layer_from_safetensors(const std::string& path, const std::string& prefix, int64_t heads, int64_t kv_heads,
                             bool causal, std::optional<double> rope_theta, int64_t window, double softcap, bool alibi,
                             const std::string& weight_dtype, bool cross_attention, int64_t shard_rank,
                             int64_t shard_count) {
  attend::io::LoadedLayer loaded = [&] {
    py::gil_scoped_release unlocked;
    return attend::io::load_layer(attend::io::SafeTensors::load(path), prefix, heads, kv_heads);
  }();
  attend::MhaConfig& c = loaded.config;
  if (rope_theta) {
    c.rope = true;
    c.rope_theta = *rope_theta;
  }
  c.causal = causal;
  c.window = window;
  c.softcap = static_cast<float>(softcap);
  if (alibi) c.alibi_slopes = attend::alibi_slopes(c.n_heads);
  c.weight_dtype = storage_dtype(weight_dtype);
  c.cross_attention = cross_attention;
  c.shard_rank = shard_rank;
  c.shard_count = shard_count;
  Layer l;
  l.scheme = loaded.scheme;
  l.layer = std::make_unique<attend::MultiHeadAttention>(c, loaded.weights());
  return l;
}

}  // namespace

PYBIND11_MODULE(attend, m) {
  m.doc() =
      "attend: fused, tiled attention for CPUs. scaled_dot_product_attention has the semantics of "
      "torch.nn.functional.scaled_dot_product_attention (plus sliding windows, softcapping, sinks and ALiBi); "
      "KVCache, PagedKVCache and MultiHeadAttention wrap the C++ library. Tensors (torch or numpy, CPU, "
      "float32/bfloat16/float16, any strides with a contiguous last dimension) are read in place; the GIL is "
      "released while attend computes.";
  m.attr("__version__") = ATTEND_PYTHON_VERSION_INFO;

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const attend::Error& e) {
      if (e.code() == attend::ErrorCode::invalid_argument)
        PyErr_SetString(PyExc_ValueError, e.what());
      else
        PyErr_SetString(PyExc_RuntimeError, e.what());
    } catch (const attend::io::IoError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  m.def("scaled_dot_product_attention", &sdpa, py::arg("query"), py::arg("key"), py::arg("value"),
        py::arg("attn_mask") = py::none(), py::arg("dropout_p") = 0.0, py::arg("is_causal") = false,
        py::arg("scale") = py::none(), py::arg("enable_gqa") = false, py::kw_only(), py::arg("window") = 0,
        py::arg("softcap") = 0.0, py::arg("sinks") = py::none(), py::arg("alibi_slopes") = py::none(),
        py::arg("causal_alignment") = "top_left", py::arg("num_threads") = 0, py::arg("fpmath") = "strict",
        py::arg("isa") = "automatic",
        R"(softmax(query·keyᵀ·scale + attn_mask)·value, as torch.nn.functional.scaled_dot_product_attention.

query (..., Hq, L, E), key (..., Hk, S, E), value (..., Hk, S, Ev): torch tensors or numpy arrays on the CPU,
float32, bfloat16 or float16 (one dtype), any strides with a contiguous last dimension, read in place.
Returns a new tensor/array of query's type and dtype, shape (..., Hq, L, Ev).
attn_mask: bool (True = take part) or float (added), broadcastable to (..., Hq, L, S).
is_causal: query i sees keys j <= i (causal_alignment="top_left", torch's convention), or
j <= i + S - L ("bottom_right": the queries are the last positions, as in decode).
scale: None = 1/sqrt(E). enable_gqa: Hq a multiple of Hk (grouped-query attention).
dropout_p must be 0. Keyword-only: window (sliding window), softcap (Gemma 2), sinks (gpt-oss, Hq logits),
alibi_slopes (Hq slopes; attend.alibi_slopes(Hq)), num_threads, fpmath ("strict" or "bf16"), isa.
A row whose keys are all masked returns zeros (torch returns NaN there).)");

  m.def("alibi_slopes", &attend::alibi_slopes, py::arg("heads"), "BLOOM's ALiBi slopes for `heads` heads.");
  m.def(
      "active_isa", [] { return std::string(attend::isa_name(attend::active_isa())); },
      "The kernel path attend runs (capped by ATTEND_ISA).");
  m.def("supported_isas", [] {
    std::vector<std::string> out;
    for (attend::Isa i : attend::supported_isas()) out.push_back(attend::isa_name(i));
    return out;
  });
  m.def(
      "cpu_class",
      [] {
        const attend::CpuClass c = attend::cpu_class();
        py::dict d;
        d["name"] = c.name;
        d["vendor"] = c.vendor;
        d["family"] = c.family;
        d["model"] = c.model;
        d["avx512_bits"] = c.avx512_bits;
        return d;
      },
      "The machine class performance figures are quoted for: {'name': 'Zen 4', 'vendor': 'AuthenticAMD', "
      "'family': 25, 'model': 17, 'avx512_bits': 256} ('' and 0 where unknown).");
  m.def(
      "decode_tuning",
      [] {
        const attend::DecodeTuning t = attend::decode_tuning();
        py::dict d;
        d["rules"] = t.rules;
        d["rules_from_environment"] = t.rules_from_environment;
        d["l2_ahead_bytes"] = t.l2_ahead_bytes;
        d["l2_page_starts"] = t.l2_page_starts;
        d["i8_one_row_integer"] = t.i8_one_row_integer;
        d["hardware_stream"] = t.hardware_stream;
        d["adaptive_request_kind"] = t.adaptive_request_kind;
        d["bf16_gemv_rows"] = t.bf16_gemv_rows;
        d["bf16_gemv_l2_ahead_bytes"] = t.bf16_gemv_l2_ahead_bytes;
        d["one_block_scores"] = t.one_block_scores;
        d["overrides"] = t.overrides;
        return d;
      },
      "The decode requests' rules in force: {'rules': 'zen5', 'rules_from_environment': False, "
      "'l2_ahead_bytes': 65536, 'l2_page_starts': True, 'i8_one_row_integer': False, 'hardware_stream': False, "
      "'adaptive_request_kind': False, 'bf16_gemv_rows': 8, 'bf16_gemv_l2_ahead_bytes': 0, "
      "'one_block_scores': True, 'overrides': ''} "
      "(attend-info's 'decode rules').");
  m.def(
      "bf16_math_native", [] { return attend::bf16_math_native(); },
      "Whether fpmath='bf16' runs bf16 kernels (AMX tiles or vdpbf16ps) on this CPU (else it is 'strict').");
  m.def(
      "bf16_math_amx", [] { return attend::bf16_math_amx(); },
      "Whether fpmath='bf16' runs its two products on AMX tiles on this CPU (ATTEND_AMX=0 turns them off).");

  py::class_<attend::KVCache>(m, "KVCache", "Keys and values of up to `slots` sequences of `capacity` tokens.")
      .def(py::init([](int64_t kv_heads, int64_t head_dim, int64_t slots, int64_t capacity, const std::string& dtype,
                       int64_t value_dim) {
             return std::make_unique<attend::KVCache>(
                 attend::KVCacheConfig{kv_heads, head_dim, slots, capacity, storage_dtype(dtype), value_dim});
           }),
           py::arg("kv_heads"), py::arg("head_dim"), py::arg("slots"), py::arg("capacity"), py::arg("dtype") = "f32",
           py::arg("value_dim") = 0)
      .def("length", &attend::KVCache::length, py::arg("seq"))
      .def("remaining", &attend::KVCache::remaining, py::arg("seq"))
      .def("reset", &attend::KVCache::reset, py::arg("seq"))
      .def("truncate", &attend::KVCache::truncate, py::arg("seq"), py::arg("tokens"))
      .def_property_readonly("memory_bytes", &attend::KVCache::memory_bytes)
      .def(
          "append",
          [](attend::KVCache& c, int64_t seq, const py::object& k, const py::object& v) {
            const Array ka = as_array(k, "k"), va = as_array(v, "v");
            const TensorView tk = cache_view(ka, "k", false), tv = cache_view(va, "v", false);
            py::gil_scoped_release unlocked;
            c.append(seq, tk, tv);
          },
          py::arg("seq"), py::arg("k"), py::arg("v"), "k, v: [1, kv_heads, n, head_dim] (or [kv_heads, n, head_dim]).");

  py::class_<attend::PagedKVCache>(m, "PagedKVCache",
                                   "A pool of `num_blocks` blocks of `block_tokens` tokens shared by sequences.")
      .def(py::init([](int64_t kv_heads, int64_t head_dim, int64_t num_blocks, int64_t block_tokens,
                       const std::string& dtype, int64_t value_dim) {
             return std::make_unique<attend::PagedKVCache>(attend::PagedKVCacheConfig{
                 kv_heads, head_dim, num_blocks, block_tokens, storage_dtype(dtype), value_dim});
           }),
           py::arg("kv_heads"), py::arg("head_dim"), py::arg("num_blocks"), py::arg("block_tokens") = 32,
           py::arg("dtype") = "f32", py::arg("value_dim") = 0)
      .def("create_sequence", &attend::PagedKVCache::create_sequence)
      .def("fork", &attend::PagedKVCache::fork, py::arg("seq"))
      .def("release", &attend::PagedKVCache::release, py::arg("seq"))
      .def("length", &attend::PagedKVCache::length, py::arg("seq"))
      .def("truncate", &attend::PagedKVCache::truncate, py::arg("seq"), py::arg("tokens"))
      .def(
          "keep",
          [](attend::PagedKVCache& c, int64_t seq, int64_t first, const std::vector<int64_t>& positions) {
            c.keep(seq, first, positions);
          },
          py::arg("seq"), py::arg("first"), py::arg("positions"))
      .def(
          "append",
          [](attend::PagedKVCache& c, int64_t seq, const py::object& k, const py::object& v) {
            const Array ka = as_array(k, "k"), va = as_array(v, "v");
            const TensorView tk = cache_view(ka, "k", false), tv = cache_view(va, "v", false);
            py::gil_scoped_release unlocked;
            c.append(seq, tk, tv);
          },
          py::arg("seq"), py::arg("k"), py::arg("v"))
      .def("blocks", &attend::PagedKVCache::blocks, py::arg("seq"))
      .def("blocks_needed", [](const attend::PagedKVCache& c,
                               const py::sequence& chunks) { return c.blocks_needed(chunks_of(chunks).chunks); })
      .def_property_readonly("free_blocks", &attend::PagedKVCache::free_blocks)
      .def_property_readonly("sequences", &attend::PagedKVCache::sequences)
      .def_property_readonly("memory_bytes", &attend::PagedKVCache::memory_bytes)
      .def_property_readonly("used_bytes", &attend::PagedKVCache::used_bytes);

  m.def(
      "cached_attention",
      [](const py::object& q, const py::object& k, const py::object& v, attend::KVCache& cache,
         const std::vector<int64_t>& seqs, int64_t window, double softcap, const py::object& sinks,
         const py::object& slopes, int num_threads, const std::string& fpmath, const std::string& isa) {
        return cached_attention(q, k, v, cache, seqs,
                                common_options(window, softcap, sinks, slopes, num_threads, fpmath, isa));
      },
      py::arg("query"), py::arg("k_new"), py::arg("v_new"), py::arg("cache"), py::arg("seqs"), py::kw_only(),
      py::arg("window") = 0, py::arg("softcap") = 0.0, py::arg("sinks") = py::none(),
      py::arg("alibi_slopes") = py::none(), py::arg("num_threads") = 0, py::arg("fpmath") = "strict",
      py::arg("isa") = "automatic",
      "Appends k_new/v_new ([B, Hkv, N, D]) to the slots `seqs`, then attends causally (bottom-right). Returns o.");
  m.def(
      "paged_attention",
      [](const py::object& q, const py::object& k, const py::object& v, attend::PagedKVCache& cache,
         const py::sequence& chunks, int64_t window, double softcap, const py::object& sinks, const py::object& slopes,
         int num_threads, const std::string& fpmath, const std::string& isa) {
        return paged_attention(q, k, v, cache, chunks,
                               common_options(window, softcap, sinks, slopes, num_threads, fpmath, isa));
      },
      py::arg("query"), py::arg("k_new"), py::arg("v_new"), py::arg("cache"), py::arg("chunks"), py::kw_only(),
      py::arg("window") = 0, py::arg("softcap") = 0.0, py::arg("sinks") = py::none(),
      py::arg("alibi_slopes") = py::none(), py::arg("num_threads") = 0, py::arg("fpmath") = "strict",
      py::arg("isa") = "automatic",
      "One continuous-batching step: chunks = [(seq, tokens[, parents]), ...], tokens packed along dim 2 of "
      "query [1, Hq, T, D] and k_new/v_new [1, Hkv, T, D]. Returns o.");

  py::class_<Layer>(m, "MultiHeadAttention", "An attention layer: projections on oneDNN, RoPE, GQA, KV caches.")
      .def(py::init([](int64_t d_model, int64_t n_heads, const py::object& q, const py::object& k, const py::object& v,
                       const py::object& o, int64_t n_kv_heads, int64_t head_dim, const py::object& q_bias,
                       const py::object& k_bias, const py::object& v_bias, const py::object& o_bias,
                       const py::object& sinks, bool causal, std::optional<double> rope_theta, int64_t window,
                       double softcap, const py::object& alibi_slopes, const std::string& weight_dtype,
                       bool cross_attention, int64_t shard_rank, int64_t shard_count) {
             attend::MhaConfig c;
             c.d_model = d_model;
             c.n_heads = n_heads;
             c.n_kv_heads = n_kv_heads;
             c.head_dim = head_dim;
             c.causal = causal;
             if (rope_theta) {
               c.rope = true;
               c.rope_theta = *rope_theta;
             }
             c.window = window;
             c.softcap = static_cast<float>(softcap);
             c.alibi_slopes = float_vector(alibi_slopes);
             c.weight_dtype = storage_dtype(weight_dtype);
             c.cross_attention = cross_attention;
             c.shard_rank = shard_rank;
             c.shard_count = shard_count;
             const bool biased = !q_bias.is_none() || !k_bias.is_none() || !v_bias.is_none() || !o_bias.is_none();
             if (biased && (q_bias.is_none() || k_bias.is_none() || v_bias.is_none() || o_bias.is_none()))
               value_error("give all four biases or none");
             c.bias = biased;
             if (d_model <= 0 || n_heads <= 0) value_error("d_model and n_heads must be positive");
             const int64_t hd = head_dim ? head_dim : d_model / n_heads, kvh = n_kv_heads ? n_kv_heads : n_heads;
             // Weights are raw buffers to the C++ layer: their sizes are checked here.
             auto w = [&](const py::object& x, int64_t rows, int64_t cols, const char* name) {
               auto a = weight_array(x);
               if (a.size() != rows * cols)
                 value_error(std::string(name) + " has " + std::to_string(a.size()) + " elements, expected [" +
                             std::to_string(rows) + ", " + std::to_string(cols) + "] (nn.Linear's [out, in])");
               return a;
             };
             const auto wq = w(q, n_heads * hd, d_model, "q"), wk = w(k, kvh * hd, d_model, "k"),
                        wv = w(v, kvh * hd, d_model, "v"), wo = w(o, d_model, n_heads * hd, "o");
             py::array_t<float, py::array::c_style | py::array::forcecast> bq, bk, bv, bo, sk;
             if (biased) {
               bq = w(q_bias, n_heads * hd, 1, "q_bias");
               bk = w(k_bias, kvh * hd, 1, "k_bias");
               bv = w(v_bias, kvh * hd, 1, "v_bias");
               bo = w(o_bias, d_model, 1, "o_bias");
             }
             if (!sinks.is_none()) sk = w(sinks, n_heads, 1, "sinks");
             attend::MhaWeights mw;
             mw.q = wq.data();
             mw.k = wk.data();
             mw.v = wv.data();
             mw.o = wo.data();
             if (biased) {
               mw.q_bias = bq.data();
               mw.k_bias = bk.data();
               mw.v_bias = bv.data();
               mw.o_bias = bo.data();
             }
             if (!sinks.is_none()) mw.sinks = sk.data();
             Layer l;
             l.scheme = "arrays";
             l.layer = std::make_unique<attend::MultiHeadAttention>(c, mw);
             return l;
           }),
           py::arg("d_model"), py::arg("n_heads"), py::arg("q"), py::arg("k"), py::arg("v"), py::arg("o"),
           py::kw_only(), py::arg("n_kv_heads") = 0, py::arg("head_dim") = 0, py::arg("q_bias") = py::none(),
           py::arg("k_bias") = py::none(), py::arg("v_bias") = py::none(), py::arg("o_bias") = py::none(),
           py::arg("sinks") = py::none(), py::arg("causal") = false, py::arg("rope_theta") = py::none(),
           py::arg("window") = 0, py::arg("softcap") = 0.0, py::arg("alibi_slopes") = py::none(),
           py::arg("weight_dtype") = "f32", py::arg("cross_attention") = false, py::arg("shard_rank") = 0,
           py::arg("shard_count") = 1,
           "From nn.Linear-layout weights q [Hq·hd, d], k/v [Hkv·hd, d], o [d, Hq·hd] (copied). rope_theta: RoPE "
           "(Llama's rotate_half) with that base, None = no RoPE.")
      .def_static("from_safetensors", &layer_from_safetensors, py::arg("path"), py::arg("prefix") = "", py::kw_only(),
                  py::arg("heads"), py::arg("kv_heads") = 0, py::arg("causal") = false,
                  py::arg("rope_theta") = py::none(), py::arg("window") = 0, py::arg("softcap") = 0.0,
                  py::arg("alibi") = false, py::arg("weight_dtype") = "f32", py::arg("cross_attention") = false,
                  py::arg("shard_rank") = 0, py::arg("shard_count") = 1,
                  "Loads a layer from a .safetensors file: nn.MultiheadAttention (prefix+in_proj_weight, "
                  "out_proj.*) or Llama-style (prefix+{q,k,v,o}_proj.weight, optional biases and 'sinks').")
      .def_property_readonly("d_model", [](const Layer& l) { return l.layer->config().d_model; })
      .def_property_readonly("n_heads", [](const Layer& l) { return l.layer->config().n_heads; })
      .def_property_readonly("n_kv_heads", [](const Layer& l) { return l.layer->config().n_kv_heads; })
      .def_property_readonly("head_dim", [](const Layer& l) { return l.layer->config().head_dim; })
      .def_property_readonly("value_head_dim", [](const Layer& l) { return l.layer->config().value_head_dim; })
      .def_property_readonly("scheme", [](const Layer& l) { return l.scheme; })
      .def_property_readonly(
          "shard_info",
          [](const Layer& l) {
            const attend::MhaShardInfo sh = l.layer->shard_info();
            py::dict d;
            d["first_head"] = sh.first_head;
            d["heads"] = sh.heads;
            d["first_kv_head"] = sh.first_kv_head;
            d["kv_heads"] = sh.kv_heads;
            return d;
          },
          "The heads this layer (shard) holds; its caches have kv_heads heads.")
      .def_property_readonly("weight_bytes", [](const Layer& l) { return l.layer->weight_bytes(); })
      .def(
          "forward",
          [](const Layer& l, const py::object& x, std::optional<bool> causal, int num_threads,
             const std::string& fpmath, const std::string& isa) {
            Activations a = activations(*l.layer, x, false);
            const attend::MhaOptions mo = layer_options(causal, std::nullopt, num_threads, fpmath, isa);
            {
              py::gil_scoped_release unlocked;
              l.layer->forward(a.x.data, dtype_of(a.x.elem), a.y.data, dtype_of(a.y.elem), a.batch, a.tokens, mo);
            }
            return a.y.obj;
          },
          py::arg("x"), py::kw_only(), py::arg("causal") = py::none(), py::arg("num_threads") = 0,
          py::arg("fpmath") = "strict", py::arg("isa") = "automatic",
          "Self-attention over x [tokens, d_model] or [batch, tokens, d_model]; returns y of x's shape and dtype.")
      .def(
          "forward_cached",
          [](const Layer& l, const py::object& x, attend::KVCache& cache, const std::vector<int64_t>& seqs,
             std::optional<int64_t> first_position, int num_threads, const std::string& fpmath,
             const std::string& isa) {
            Activations a = activations(*l.layer, x, false);
            const attend::MhaOptions mo = layer_options(std::nullopt, first_position, num_threads, fpmath, isa);
            {
              py::gil_scoped_release unlocked;
              l.layer->forward_cached(a.x.data, dtype_of(a.x.elem), a.y.data, dtype_of(a.y.elem), a.batch, a.tokens,
                                      cache, seqs, mo);
            }
            return a.y.obj;
          },
          py::arg("x"), py::arg("cache"), py::arg("seqs"), py::kw_only(), py::arg("first_position") = py::none(),
          py::arg("num_threads") = 0, py::arg("fpmath") = "strict", py::arg("isa") = "automatic",
          "Prefill or decode through a KVCache: x [batch, tokens, d_model] (2-d: batch 1), one slot per sequence.")
      .def(
          "forward_paged",
          [](const Layer& l, const py::object& x, attend::PagedKVCache& cache, const py::sequence& chunk_list,
             int num_threads, const std::string& fpmath, const std::string& isa) {
            Activations a = activations(*l.layer, x, true);
            const Chunks c = chunks_of(chunk_list);
            const attend::MhaOptions mo = layer_options(std::nullopt, std::nullopt, num_threads, fpmath, isa);
            {
              py::gil_scoped_release unlocked;
              l.layer->forward_paged(a.x.data, dtype_of(a.x.elem), a.y.data, dtype_of(a.y.elem), c.chunks, cache, mo);
            }
            return a.y.obj;
          },
          py::arg("x"), py::arg("cache"), py::arg("chunks"), py::kw_only(), py::arg("num_threads") = 0,
          py::arg("fpmath") = "strict", py::arg("isa") = "automatic",
          "One continuous-batching step: x [T, d_model] with the chunks' tokens packed in order; chunks = "
          "[(seq, tokens[, parents]), ...].");
}
