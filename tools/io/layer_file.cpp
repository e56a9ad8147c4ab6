#include "layer_file.hpp"

#include <sstream>

namespace attend::io {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream o;
  o << '[';
  for (size_t i = 0; i < s.size(); ++i) o << (i ? "," : "") << s[i];
  o << ']';
  return o.str();
}

struct Reader {
  const SafeTensors& f;
  const std::string& prefix;

  [[noreturn]] void fail(const std::string& tensor, const std::string& what) const {
    throw IoError(f.name() + ": tensor '" + prefix + tensor + "': " + what);
  }
  bool has(const std::string& t) const { return f.contains(prefix + t); }
  // Reads a tensor whose shape must be `want` (2-D or 1-D).
  std::vector<float> read(const std::string& t, const std::vector<int64_t>& want) const {
    if (!has(t)) fail(t, "missing");
    const StTensor& info = f.info(prefix + t);
    if (info.shape != want) fail(t, "shape " + shape_str(info.shape) + ", expected " + shape_str(want));
    return f.read_f32(prefix + t);
  }
  const std::vector<int64_t>& shape(const std::string& t) const {
    if (!has(t)) fail(t, "missing");
    return f.info(prefix + t).shape;
  }
};

}  // namespace

MhaWeights LoadedLayer::weights() const {
  MhaWeights w;
  w.layout = WeightLayout::out_in;
  w.q = wq.data();
  w.k = wk.data();
  w.v = wv.data();
  w.o = wo.data();
  if (config.bias) {
    w.q_bias = bq.data();
    w.k_bias = bk.data();
    w.v_bias = bv.data();
    w.o_bias = bo.data();
  }
  if (!sinks.empty()) w.sinks = sinks.data();
  return w;
}

LoadedLayer load_layer(const SafeTensors& file, const std::string& prefix, int64_t heads, int64_t kv_heads) {
  const Reader r{file, prefix};
  if (heads <= 0) throw IoError(file.name() + ": --heads must be a positive number of heads");
  LoadedLayer l;
  if (r.has("in_proj_weight")) {
    l.scheme = "nn.MultiheadAttention";
    const auto& s = r.shape("in_proj_weight");
    if (s.size() != 2 || s[0] != 3 * s[1]) r.fail("in_proj_weight", "shape " + shape_str(s) + ", expected [3*d, d]");
    const int64_t d = s[1];
    if (d % heads != 0)
      throw IoError(file.name() + ": " + std::to_string(heads) + " heads do not divide d_model " + std::to_string(d));
    if (kv_heads != 0 && kv_heads != heads)
      throw IoError(file.name() + ": nn.MultiheadAttention has no grouped heads; --kv-heads must equal --heads");
    const std::vector<float> w = r.read("in_proj_weight", {3 * d, d});
    l.wq.assign(w.begin(), w.begin() + d * d);
    l.wk.assign(w.begin() + d * d, w.begin() + 2 * d * d);
    l.wv.assign(w.begin() + 2 * d * d, w.end());
    l.wo = r.read("out_proj.weight", {d, d});
    const bool in_bias = r.has("in_proj_bias"), out_bias = r.has("out_proj.bias");
    if (in_bias || out_bias) {
      const std::vector<float> b = in_bias ? r.read("in_proj_bias", {3 * d}) : std::vector<float>(3 * d, 0.0f);
      l.bq.assign(b.begin(), b.begin() + d);
      l.bk.assign(b.begin() + d, b.begin() + 2 * d);
      l.bv.assign(b.begin() + 2 * d, b.end());
      l.bo = out_bias ? r.read("out_proj.bias", {d}) : std::vector<float>(static_cast<size_t>(d), 0.0f);
    }
    l.config.d_model = d;
    l.config.n_heads = heads;
    l.config.n_kv_heads = heads;
    l.config.head_dim = d / heads;
  } else if (r.has("q_proj.weight")) {
    l.scheme = "llama";
    const auto& qs = r.shape("q_proj.weight");
    if (qs.size() != 2) r.fail("q_proj.weight", "shape " + shape_str(qs) + ", expected [heads*head_dim, d_model]");
    const int64_t q_out = qs[0], d = qs[1];
    if (q_out % heads != 0)
      throw IoError(file.name() + ": " + std::to_string(heads) + " heads do not divide q_proj's " +
                    std::to_string(q_out) + " outputs");
    const int64_t hd = q_out / heads;
    const auto& ks = r.shape("k_proj.weight");
    if (ks.size() != 2 || ks[1] != d || ks[0] % hd != 0 || ks[0] == 0)
      r.fail("k_proj.weight",
             "shape " + shape_str(ks) + ", expected [kv_heads*" + std::to_string(hd) + ", " + std::to_string(d) + "]");
    const int64_t hkv = ks[0] / hd;
    if (heads % hkv != 0)
      r.fail("k_proj.weight", std::to_string(hkv) + " kv heads do not divide " + std::to_string(heads) + " heads");
    if (kv_heads != 0 && kv_heads != hkv)
      throw IoError(file.name() + ": --kv-heads " + std::to_string(kv_heads) + " but k_proj.weight holds " +
                    std::to_string(hkv) + " kv heads of dim " + std::to_string(hd));
    l.wq = r.read("q_proj.weight", {q_out, d});
    l.wk = r.read("k_proj.weight", {hkv * hd, d});
    l.wv = r.read("v_proj.weight", {hkv * hd, d});
    l.wo = r.read("o_proj.weight", {d, q_out});
    if (r.has("q_proj.bias") || r.has("k_proj.bias") || r.has("v_proj.bias") || r.has("o_proj.bias")) {
      auto bias = [&](const std::string& t, int64_t n) {
        return r.has(t) ? r.read(t, {n}) : std::vector<float>(static_cast<size_t>(n), 0.0f);
      };
      l.bq = bias("q_proj.bias", q_out);
      l.bk = bias("k_proj.bias", hkv * hd);
      l.bv = bias("v_proj.bias", hkv * hd);
      l.bo = bias("o_proj.bias", d);
    }
    l.config.d_model = d;
    l.config.n_heads = heads;
    l.config.n_kv_heads = hkv;
    l.config.head_dim = hd;
  } else {
    throw IoError(file.name() + ": no attention layer under prefix '" + prefix +
                  "' (looked for in_proj_weight and q_proj.weight)");
  }
  l.config.bias = !l.bq.empty();
  if (r.has("sinks")) l.sinks = r.read("sinks", {heads});  // gpt-oss: one learned logit per query head
  return l;
}

}  // namespace attend::io
