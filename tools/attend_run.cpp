// attend-run: run one attention layer from a .safetensors file over a .npy input.
//
//   attend-run -w layer.safetensors -i x.npy -o y.npy --heads 8 [--causal] [--prefix P]
//              [--kv-heads K] [--rope-theta T] [--threads N] [--decode M --cache-dtype f32|bf16|f16|i8]
//              [--window W] [--softcap C] [--alibi] (a "sinks" tensor of the layer is used when present)
//              [--attention-map map.svg --head H [--map-scale log|clip|linear]]
//
// Every failure exits non-zero with one message naming the file (and tensor); outputs are written
// atomically, so a failed run leaves no partial file.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <attend/attend.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "io/layer_file.hpp"
#include "io/npy.hpp"
#include "io/svg_heatmap.hpp"

// Layer options: the thread count and the attention's fpmath.
inline attend::MhaOptions run_options(int threads, attend::FpMath fpmath) {
  attend::MhaOptions o;
  o.num_threads = threads;
  o.fpmath = fpmath;
  return o;
}

namespace {

struct Args {
  std::string weights, input, output, prefix, cache_dtype = "f32", map_path, map_scale = "log", fpmath = "strict";
  std::string shard;  // "R/N": tensor-parallel shard R of N (MhaConfig::shard_rank / shard_count)
  int64_t heads = 0, kv_heads = 0, decode = 0, head = 0, window = 0;
  double softcap = 0.0;
  bool alibi = false;
  std::optional<double> rope_theta;
  bool causal = false;
  int threads = 0;
};

std::string shape_str(const std::vector<int64_t>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) o += ',';
    o += std::to_string(s[i]);
  }
  o += ']';
  return o;
}

// The model-family terms in use, for the summary line.
std::string terms_note(const Args& a, const attend::io::LoadedLayer& layer) {
  std::string n;
  if (a.window > 0) n += ", window " + std::to_string(a.window);
  if (a.softcap > 0) n += ", softcap " + std::to_string(a.softcap);
  if (a.alibi) n += ", alibi";
  if (!layer.sinks.empty()) n += ", sinks";
  if (!a.shard.empty()) n += ", shard " + a.shard + " (partial output)";
  return n;
}

int run(const Args& a) {
  using namespace attend;
  const io::SafeTensors file = io::SafeTensors::load(a.weights);
  io::LoadedLayer layer = io::load_layer(file, a.prefix, a.heads, a.kv_heads);
  if (a.rope_theta) {
    if (!(*a.rope_theta > 0.0) || !std::isfinite(*a.rope_theta)) throw io::IoError("--rope-theta must be positive");
    layer.config.rope = true;
    layer.config.rope_theta = *a.rope_theta;
  }
  layer.config.causal = a.causal || a.decode > 0;
  layer.config.window = a.window;
  layer.config.softcap = static_cast<float>(a.softcap);
  if (a.alibi) layer.config.alibi_slopes = alibi_slopes(layer.config.n_heads);
  if (!a.shard.empty()) {
    const size_t slash = a.shard.find('/');
    char* end = nullptr;
    const long long r = slash == std::string::npos ? -1 : std::strtoll(a.shard.c_str(), &end, 10);
    const bool r_ok = end == a.shard.c_str() + slash;
    const long long n = r_ok ? std::strtoll(a.shard.c_str() + slash + 1, &end, 10) : 0;
    if (!r_ok || *end != '\0' || end == a.shard.c_str() + slash + 1)
      throw io::IoError("--shard must be R/N (shard R of N), got '" + a.shard + "'");
    layer.config.shard_rank = r;
    layer.config.shard_count = n;
  }

  const io::NpyArray x = io::load_npy(a.input);
  const int64_t d = layer.config.d_model;
  if ((x.shape.size() != 2 && x.shape.size() != 3) || x.shape.back() != d)
    throw io::IoError(a.input + ": input shape " + shape_str(x.shape) + ", expected [N, " + std::to_string(d) +
                      "] or [B, N, " + std::to_string(d) + "] (d_model of " + a.weights + ")");
  const int64_t batch = x.shape.size() == 3 ? x.shape[0] : 1, tokens = x.shape[x.shape.size() - 2];
  if (a.decode < 0 || a.decode > tokens)
    throw io::IoError("--decode " + std::to_string(a.decode) + " must be within [0, " + std::to_string(tokens) + "]");
  if (!a.map_path.empty() && !a.shard.empty()) throw io::IoError("--attention-map and --shard do not combine");
  if (!a.map_path.empty() && (a.head < 0 || a.head >= layer.config.n_heads))
    throw io::IoError("--head " + std::to_string(a.head) + " outside [0, " + std::to_string(layer.config.n_heads) +
                      ")");
  DType cache_dtype = DType::f32;
  if (a.cache_dtype == "bf16")
    cache_dtype = DType::bf16;
  else if (a.cache_dtype == "f16")
    cache_dtype = DType::f16;
  else if (a.cache_dtype == "i8")
    cache_dtype = DType::i8;
  else if (a.cache_dtype != "f32")
    throw io::IoError("--cache-dtype must be f32, bf16, f16 or i8");

  const MultiHeadAttention mha(layer.config, layer.weights());
  const FpMath fpmath = a.fpmath == "bf16" ? FpMath::bf16 : FpMath::strict;
  io::NpyArray y{x.shape, std::vector<float>(x.data.size())};
  const auto t0 = std::chrono::steady_clock::now();
  if (a.decode == 0) {
    mha.forward(x.data.data(), y.data.data(), batch, tokens, run_options(a.threads, fpmath));
  } else {
    // The first N − M tokens as one prefill, the last M one at a time through the cache; each
    // batch row is its own sequence slot.
    KVCache cache(
        {mha.shard_info().kv_heads, layer.config.head_dim, batch, tokens, cache_dtype, layer.config.value_head_dim});
    std::vector<int64_t> seqs(static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch; ++b) seqs[static_cast<size_t>(b)] = b;
    const int64_t prefill = tokens - a.decode;
    std::vector<float> xs(static_cast<size_t>(batch * d)), ys(xs.size());
    auto gather = [&](int64_t t0_, int64_t n, std::vector<float>& dst) {  // tokens [t0, t0+n) of every row
      dst.resize(static_cast<size_t>(batch * n * d));
      for (int64_t b = 0; b < batch; ++b)
        std::copy_n(x.data.begin() + (b * tokens + t0_) * d, n * d, dst.begin() + b * n * d);
    };
    auto scatter = [&](int64_t t0_, int64_t n, const std::vector<float>& src) {
      for (int64_t b = 0; b < batch; ++b)
        std::copy_n(src.begin() + b * n * d, n * d, y.data.begin() + (b * tokens + t0_) * d);
    };
    if (prefill > 0) {
      gather(0, prefill, xs);
      ys.resize(xs.size());
      mha.forward_cached(xs.data(), ys.data(), batch, prefill, cache, seqs, run_options(a.threads, fpmath));
      scatter(0, prefill, ys);
    }
    for (int64_t t = prefill; t < tokens; ++t) {
      gather(t, 1, xs);
      ys.resize(xs.size());
      mha.forward_cached(xs.data(), ys.data(), batch, 1, cache, seqs, run_options(a.threads, fpmath));
      scatter(t, 1, ys);
    }
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  std::string map_note;
  if (!a.map_path.empty()) {
    const int64_t heads[] = {a.head};
    MhaOptions opt;
    opt.num_threads = a.threads;
    const std::vector<float> w = mha.attention_weights(x.data.data(), 1, tokens, heads, opt);
    const std::string title = "attention weights, head " + std::to_string(a.head) + " of " +
                              std::to_string(layer.config.n_heads) + (layer.config.causal ? " (causal)" : "") +
                              ", batch 0";
    const io::MapScale scale = a.map_scale == "linear" ? io::MapScale::linear
                               : a.map_scale == "clip" ? io::MapScale::clipped
                                                       : io::MapScale::log;
    const std::string svg = io::attention_svg(w, tokens, tokens, title, 256, scale);
    io::write_file_atomic(a.map_path, std::vector<unsigned char>(svg.begin(), svg.end()));
    map_note = ", map " + a.map_path;
  }
  io::write_file_atomic(a.output, io::npy_bytes(y));

  std::printf(
      "attend-run: %s x %s -> %s, %s layer d_model %lld, heads %lld (kv %lld, dim %lld)%s%s%s%s, isa %s, "
      "fpmath %s, threads %d, %.3f ms%s\n",
      a.input.c_str(), shape_str(x.shape).c_str(), a.output.c_str(), layer.scheme.c_str(), static_cast<long long>(d),
      static_cast<long long>(layer.config.n_heads), static_cast<long long>(layer.config.n_kv_heads),
      static_cast<long long>(layer.config.head_dim), layer.config.causal ? ", causal" : "",
      layer.config.rope ? ", rope" : "", terms_note(a, layer).c_str(),
      (a.decode ? ", decode " + std::to_string(a.decode) + " (" + a.cache_dtype + " cache)" : std::string()).c_str(),
      isa_name(active_isa()), fpmath_name(fpmath), a.threads > 0 ? a.threads : omp_get_max_threads(), ms,
      map_note.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Run one attention layer from a .safetensors file over a .npy input (f32, [N, d] or [B, N, d])."};
  Args a;
  app.add_option("-w,--weights", a.weights, "layer weights (.safetensors; F32, BF16 or F16 tensors)")->required();
  app.add_option("-i,--input", a.input, "input activations (.npy, f32, [N, d_model] or [B, N, d_model])")->required();
  app.add_option("-o,--output", a.output, "output (.npy, same shape as the input)")->required();
  app.add_option("--heads", a.heads, "number of query heads")->required()->check(CLI::PositiveNumber);
  app.add_option("--kv-heads", a.kv_heads, "key/value heads (default: inferred from k_proj's shape)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--prefix", a.prefix, "tensor name prefix of the layer, e.g. model.layers.0.self_attn.");
  app.add_flag("--causal", a.causal, "mask later tokens");
  app.add_option("--window", a.window, "sliding window: each query sees at most the W most recent positions (0: none)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--softcap", a.softcap, "logit soft-capping: scores become C*tanh(s/C) (Gemma 2: 50; 0: none)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--alibi", a.alibi, "ALiBi with BLOOM's slopes for the number of heads");
  app.add_option("--shard", a.shard,
                 "R/N: run tensor-parallel shard R of N (its heads only); the output is the partial sum the N "
                 "shards' outputs add up to");
  app.add_option("--rope-theta", a.rope_theta,
                 "apply rotary embeddings (Hugging Face Llama convention) with this theta");
  app.add_option("--threads", a.threads, "threads (0: OpenMP's default)")->check(CLI::NonNegativeNumber);
  app.add_option("--decode", a.decode, "run the last M tokens one at a time through a KV cache (implies --causal)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--cache-dtype", a.cache_dtype,
                 "KV cache storage with --decode: f32, bf16, f16 or i8 (8 bits with a scale per token and kv head)")
      ->check(CLI::IsMember({"f32", "bf16", "f16", "i8"}));
  app.add_option("--fpmath", a.fpmath,
                 "attention arithmetic: strict (f32) or bf16 (Q·Kᵀ and P·V on bf16 operands where the CPU has "
                 "AVX512_BF16)")
      ->check(CLI::IsMember({"strict", "bf16"}));
  auto* map = app.add_option("--attention-map", a.map_path, "write head --head's attention weights as an SVG heat map");
  auto* head = app.add_option("--head", a.head, "head for --attention-map (required with it)")->needs(map);
  map->needs(head);
  app.add_option("--map-scale", a.map_scale,
                 "colour scale of --attention-map: log (default: every row's weights visible, also in long causal "
                 "maps), clip (linear up to the 99th percentile) or linear")
      ->check(CLI::IsMember({"log", "clip", "linear"}))
      ->needs(map);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attend-run: error: %s\n", e.what());
    return 1;
  }
}
