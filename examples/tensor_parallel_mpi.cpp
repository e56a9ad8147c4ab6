// Tensor-parallel attention over MPI: one attention layer sharded by heads across the ranks
// (MhaConfig::shard_rank / shard_count), each rank computing its heads' partial output and
// MPI_Allreduce summing them — the layout vLLM and SGLang use on CPUs, one rank per NUMA node:
//   mpirun -np 2 --map-by numa --bind-to numa tensor_parallel_mpi model.safetensors --heads 32 ...
//
// Every rank loads the layer from a .safetensors file (given, or — without arguments — a random
// Llama-style layer rank 0 writes), keeps its shard, and runs every entry point: forward, a prefill
// then decode steps through a KVCache holding only its kv heads, a continuous-batching step
// through a PagedKVCache, and cross-attention. Rank 0 also runs the unsharded layer and checks
// each all-reduced output against it: the program exits 1 if any differs by more than 1e-5 of the
// output's scale. It prints the time of a decode step and the all-reduce's share of it.
//
// usage: tensor_parallel_mpi [weights.safetensors --heads H [--kv-heads K] [--prefix P]
//                            [--rope-theta T]] [--tokens N] [--decode M] [--threads T]
#include <mpi.h>
#include <omp.h>

#include <algorithm>
#include <attend/attend.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "io/layer_file.hpp"
#include "io/npy.hpp"
#include "io/safetensors.hpp"

namespace {

struct Args {
  std::string weights, prefix = "model.layers.0.self_attn.";
  int64_t heads = 8, kv_heads = 0, tokens = 24, decode = 4;
  std::optional<double> rope_theta = 10000.0;
  int threads = 0;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(k + " needs a value");
      return argv[++i];
    };
    if (k == "--heads")
      a.heads = std::stoll(value());
    else if (k == "--kv-heads")
      a.kv_heads = std::stoll(value());
    else if (k == "--prefix")
      a.prefix = value();
    else if (k == "--rope-theta")
      a.rope_theta = std::stod(value());
    else if (k == "--no-rope")
      a.rope_theta.reset();
    else if (k == "--tokens")
      a.tokens = std::stoll(value());
    else if (k == "--decode")
      a.decode = std::stoll(value());
    else if (k == "--threads")
      a.threads = std::stoi(value());
    else if (!k.empty() && k[0] != '-' && a.weights.empty())
      a.weights = k;
    else
      throw std::runtime_error("unknown argument " + k);
  }
  if (a.decode < 0 || a.decode >= a.tokens) throw std::runtime_error("--decode must be in [0, --tokens)");
  return a;
}

// A random Llama-style layer (8 query heads, 2 kv heads of 16, with biases and sinks), written as
// safetensors: the file a real deployment would load.
void write_random_layer(const std::string& path, const std::string& prefix) {
  const int64_t d = 64, hq = 8, hkv = 2, hd = 16;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-0.125f, 0.125f);
  auto rnd = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = u(rng);
    return v;
  };
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> t;
  t[prefix + "q_proj.weight"] = {{hq * hd, d}, rnd(hq * hd * d)};
  t[prefix + "k_proj.weight"] = {{hkv * hd, d}, rnd(hkv * hd * d)};
  t[prefix + "v_proj.weight"] = {{hkv * hd, d}, rnd(hkv * hd * d)};
  t[prefix + "o_proj.weight"] = {{d, hq * hd}, rnd(d * hq * hd)};
  t[prefix + "q_proj.bias"] = {{hq * hd}, rnd(hq * hd)};
  t[prefix + "k_proj.bias"] = {{hkv * hd}, rnd(hkv * hd)};
  t[prefix + "v_proj.bias"] = {{hkv * hd}, rnd(hkv * hd)};
  t[prefix + "o_proj.bias"] = {{d}, rnd(d)};
  t[prefix + "sinks"] = {{hq}, rnd(hq)};
  attend::io::write_file_atomic(path, attend::io::write_safetensors_f32(t));
}

// y ← Σ over the ranks (in place), timed.
double allreduce(std::vector<float>& y) {
  const auto t0 = std::chrono::steady_clock::now();
  MPI_Allreduce(MPI_IN_PLACE, y.data(), static_cast<int>(y.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, scale = 1e-3;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::abs(want[i])));
    const double e = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(e <= err)) err = e;
  }
  return err / scale;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int failed = 0;
  try {
    Args a = parse(argc, argv);
    // Without a file: rank 0 writes a random layer next to the working directory, then all load it.
    std::string path = a.weights;
    if (path.empty()) {
      path = (std::filesystem::temp_directory_path() / "attend_tp_layer.safetensors").string();
      if (rank == 0) write_random_layer(path, a.prefix);
      MPI_Barrier(MPI_COMM_WORLD);
    }
    const attend::io::SafeTensors file = attend::io::SafeTensors::load(path);
    attend::io::LoadedLayer loaded = attend::io::load_layer(file, a.prefix, a.heads, a.kv_heads);
    attend::MhaConfig whole = loaded.config;
    whole.causal = true;
    if (a.rope_theta) {
      whole.rope = true;
      whole.rope_theta = *a.rope_theta;
    }
    attend::MhaConfig mine = whole;
    mine.shard_rank = rank;
    mine.shard_count = size;
    const attend::MultiHeadAttention layer(mine, loaded.weights());
    attend::MhaConfig cross_cfg = mine;
    cross_cfg.cross_attention = true;
    const attend::MultiHeadAttention cross(cross_cfg, loaded.weights());
    const attend::MhaShardInfo sh = layer.shard_info();
    attend::MhaOptions opt;
    opt.num_threads = a.threads;
    // The unsharded layer, on rank 0 only: the reference each all-reduced output must match.
    std::optional<attend::MultiHeadAttention> ref, ref_cross;
    if (rank == 0) {
      ref.emplace(whole, loaded.weights());
      attend::MhaConfig rc = whole;
      rc.cross_attention = true;
      ref_cross.emplace(rc, loaded.weights());
    }
    const int64_t d = whole.d_model, T = a.tokens, prefill = T - a.decode, B = 2, mem = 11;
    const int64_t hd = loaded.config.head_dim ? loaded.config.head_dim : d / whole.n_heads;
    // The same inputs on every rank (a seeded generator).
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(B * T * d)), memory(static_cast<size_t>(B * mem * d));
    for (float& v : x) v = nd(rng);
    for (float& v : memory) v = nd(rng);
    auto check = [&](const char* what, std::vector<float>& y, const std::vector<float>& want) {
      allreduce(y);
      if (rank != 0) return;
      const double e = rel_error(y, want);
      std::printf("rank 0: %-44s max error %.2e of the output's scale%s\n", what, e, e <= 1e-5 ? "" : "  FAILED");
      if (!(e <= 1e-5)) failed = 1;
    };
    auto rows = [&](const std::vector<float>& v, int64_t t0, int64_t n) {  // tokens [t0, t0+n) of each row
      std::vector<float> out(static_cast<size_t>(B * n * d));
      for (int64_t b = 0; b < B; ++b) std::copy_n(v.begin() + (b * T + t0) * d, n * d, out.begin() + b * n * d);
      return out;
    };
    if (rank == 0)
      std::printf("%d ranks: each holds %lld of %lld query heads and %lld of %lld kv heads (%s)\n", size,
                  static_cast<long long>(sh.heads), static_cast<long long>(whole.n_heads),
                  static_cast<long long>(sh.kv_heads), static_cast<long long>(whole.n_kv_heads),
                  whole.n_kv_heads % size == 0 ? "kv heads split" : "kv heads replicated");

    // 1. forward (causal self-attention over the whole input).
    std::vector<float> y(x.size()), want(x.size());
    layer.forward(x.data(), y.data(), B, T, opt);
    if (rank == 0) ref->forward(x.data(), want.data(), B, T, opt);
    check("forward", y, want);

    // 2. prefill, then decode steps, through slot caches of this rank's kv heads.
    attend::KVCache cache({sh.kv_heads, hd, B, T, attend::DType::f32});
    std::optional<attend::KVCache> ref_cache;
    if (rank == 0) ref_cache.emplace(attend::KVCacheConfig{whole.n_kv_heads, hd, B, T, attend::DType::f32});
    const int64_t seqs[] = {0, 1};
    {
      std::vector<float> xp = rows(x, 0, prefill), yp(xp.size()), wp(xp.size());
      layer.forward_cached(xp.data(), yp.data(), B, prefill, cache, seqs, opt);
      if (rank == 0) ref->forward_cached(xp.data(), wp.data(), B, prefill, *ref_cache, seqs, opt);
      check("forward_cached: prefill", yp, wp);
    }
    double step_s = 0, reduce_s = 0, decode_worst = 0;
    for (int64_t t = prefill; t < T; ++t) {
      std::vector<float> x1 = rows(x, t, 1), y1(x1.size()), w1(x1.size());
      MPI_Barrier(MPI_COMM_WORLD);
      const auto t0 = std::chrono::steady_clock::now();
      layer.forward_cached(x1.data(), y1.data(), B, 1, cache, seqs, opt);
      const double r = allreduce(y1);
      step_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      reduce_s += r;
      if (rank == 0) {
        ref->forward_cached(x1.data(), w1.data(), B, 1, *ref_cache, seqs, opt);
        decode_worst = std::max(decode_worst, rel_error(y1, w1));
        if (t == T - 1) {
          std::printf("rank 0: %-44s max error %.2e of the output's scale%s\n", "forward_cached: decode steps",
                      decode_worst, decode_worst <= 1e-5 ? "" : "  FAILED");
          if (!(decode_worst <= 1e-5)) failed = 1;
        }
      }
    }

    // 3. one continuous-batching step: a prompt chunk of one sequence and a decode of another.
    {
      attend::PagedKVCache pool({sh.kv_heads, hd, 16, 16, attend::DType::f32});
      std::optional<attend::PagedKVCache> ref_pool;
      if (rank == 0) ref_pool.emplace(attend::PagedKVCacheConfig{whole.n_kv_heads, hd, 16, 16, attend::DType::f32});
      const int64_t s0 = pool.create_sequence(), s1 = pool.create_sequence();
      const attend::SequenceChunk chunks[] = {{s0, T}, {s1, 1}};
      std::vector<float> xp(x.begin(), x.begin() + (T + 1) * d), yp(xp.size()), wp(xp.size());
      layer.forward_paged(xp.data(), yp.data(), chunks, pool, opt);
      if (rank == 0) {
        const int64_t r0 = ref_pool->create_sequence(), r1 = ref_pool->create_sequence();
        const attend::SequenceChunk rchunks[] = {{r0, T}, {r1, 1}};
        ref->forward_paged(xp.data(), wp.data(), rchunks, *ref_pool, opt);
      }
      check("forward_paged: a prompt chunk and a decode", yp, wp);
    }

    // 4. cross-attention over a memory projected by each shard.
    {
      attend::KVCache mem_cache({sh.kv_heads, hd, B, mem, attend::DType::f32});
      cross.set_memory(memory.data(), B, mem, mem_cache, seqs, opt);
      std::vector<float> yc(x.size()), wc(x.size());
      cross.cross_attend(x.data(), yc.data(), B, T, mem_cache, seqs, opt);
      if (rank == 0) {
        attend::KVCache rm({whole.n_kv_heads, hd, B, mem, attend::DType::f32});
        ref_cross->set_memory(memory.data(), B, mem, rm, seqs, opt);
        ref_cross->cross_attend(x.data(), wc.data(), B, T, rm, seqs, opt);
      }
      check("cross_attend", yc, wc);
    }
    if (rank == 0 && a.decode > 0)
      std::printf("decode step (batch %lld, %d threads per rank): %.3f ms, all-reduce %.1f%% of it\n",
                  static_cast<long long>(B), a.threads > 0 ? a.threads : omp_get_max_threads(),
                  1e3 * step_s / static_cast<double>(a.decode), 100.0 * reduce_s / step_s);
  } catch (const std::exception& e) {
    // The other ranks may be waiting in a collective: end them all.
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) std::printf("%s\n", any ? "tensor_parallel_mpi: FAILED" : "tensor_parallel_mpi: sharded == unsharded");
  MPI_Finalize();
  return any ? 1 : 0;
}
