// attend::Context: what a server relies on to bound, see and release attend's memory, and to keep
// its own threads from oversubscribing the machine.
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <attend/attend.hpp>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../test_tensors.hpp"

namespace attend::testing {
namespace {

// Resident set size of this process in bytes (second field of /proc/self/statm, in pages).
size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t total = 0, resident = 0;
  statm >> total >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

struct Layer {
  std::vector<float> wq, wk, wv, wo;
  MhaConfig cfg;
  Layer(int64_t dm, int64_t heads, int64_t kv_heads) {
    std::mt19937 rng(3);
    const float ws = 1.0f / std::sqrt(static_cast<float>(dm));
    const int64_t hd = dm / heads;
    wq = random_values(rng, static_cast<size_t>(dm * dm), -ws, ws);
    wk = random_values(rng, static_cast<size_t>(kv_heads * hd * dm), -ws, ws);
    wv = random_values(rng, wk.size(), -ws, ws);
    wo = random_values(rng, static_cast<size_t>(dm * dm), -ws, ws);
    cfg.d_model = dm;
    cfg.n_heads = heads;
    cfg.n_kv_heads = kv_heads;
    cfg.causal = true;
  }
  MultiHeadAttention make() const {
    MhaWeights w;
    w.q = wq.data();
    w.k = wk.data();
    w.v = wv.data();
    w.o = wo.data();
    return MultiHeadAttention(cfg, w);
  }
};

// The issue this guards against: per-thread buffers kept a long prefill's activations (129 MiB for
// 8192 tokens at d_model 1024) resident for the life of the process. Through a context, release()
// gives them back: workspace_bytes() drops to 0 and the process's resident memory returns to within
// 10% of what it was before the call. The held workspace is checked to be large first, so the test
// cannot pass by measuring nothing.
TEST(Context, ReleaseAfterLongPrefillReturnsTheMemory) {
  constexpr int64_t kTokens = 8192, kModel = 1024;
  const Layer spec(kModel, 16, 16);
  const MultiHeadAttention layer = spec.make();
  std::vector<float> x(static_cast<size_t>(kTokens * kModel), 0.01f), y(x.size(), 0.0f);
  std::vector<float> warm_x(static_cast<size_t>(16 * kModel), 0.01f), warm_y(warm_x.size());
  Context context;
  MhaOptions opt;
  opt.context = &context;
  // oneDNN creates its kernels (and their code) on first use: warm up, release, then measure.
  layer.forward(warm_x.data(), warm_y.data(), 1, 16, opt);
  context.release();
  const size_t before = resident_bytes();

  layer.forward(x.data(), y.data(), 1, kTokens, opt);
  const size_t held = context.workspace_bytes();
  EXPECT_GT(held, size_t{100} << 20) << "the prefill's activations should be in the context";
  EXPECT_GE(resident_bytes(), before + held / 2) << "the workspace should be resident after the call";
  EXPECT_EQ(context.peak_workspace_bytes(), held);

  context.release();
  EXPECT_EQ(context.workspace_bytes(), 0u);
  const size_t after = resident_bytes();
  EXPECT_LE(static_cast<double>(after), 1.10 * static_cast<double>(before))
      << "resident " << (before >> 20) << " MiB before, " << (after >> 20) << " MiB after release";
  EXPECT_TRUE(std::isfinite(y[0]) && std::isfinite(y.back()));
}

TEST(Context, WorkspaceIsReusedAcrossCalls) {
  const Layer spec(64, 4, 2);
  const MultiHeadAttention layer = spec.make();
  std::vector<float> x(64 * 64, 0.1f), y(x.size());
  Context context;
  MhaOptions opt;
  opt.context = &context;
  layer.forward(x.data(), y.data(), 1, 64, opt);
  const size_t first = context.workspace_bytes();
  EXPECT_GT(first, 0u);
  for (int i = 0; i < 3; ++i) layer.forward(x.data(), y.data(), 1, 64, opt);
  EXPECT_EQ(context.workspace_bytes(), first);    // no growth: the same workspace serves every call
  layer.forward(x.data(), y.data(), 1, 32, opt);  // a smaller call fits in what is held
  EXPECT_EQ(context.workspace_bytes(), first);
}

// A byte limit rejects, before anything is written, a call whose workspace would not fit; calls
// that fit still run, and the context never holds more than the limit.
TEST(Context, ByteLimitRejectsBeforeWriting) {
  const Layer spec(256, 8, 2);
  const MultiHeadAttention layer = spec.make();
  std::vector<float> x(static_cast<size_t>(1024 * 256), 0.01f);
  std::vector<float> y(x.size(), 7.0f);
  ContextConfig cc;
  cc.max_workspace_bytes = size_t{1} << 20;  // 1 MiB: 1024 tokens need ~3.5 MiB of activations
  Context context(cc);
  MhaOptions opt;
  opt.context = &context;
  try {
    layer.forward(x.data(), y.data(), 1, 1024, opt);
    FAIL() << "a call needing more than the limit ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::capacity);
    EXPECT_NE(std::string(e.what()).find("limit"), std::string::npos) << e.what();
  }
  for (float v : y) ASSERT_EQ(v, 7.0f);
  EXPECT_EQ(context.workspace_bytes(), 0u);

  layer.forward(x.data(), y.data(), 1, 16, opt);  // fits
  EXPECT_NE(y[0], 7.0f);
  EXPECT_LE(context.workspace_bytes(), cc.max_workspace_bytes);

  // sdpa through the same context: rejected with the same code when over the limit.
  std::vector<float> q(static_cast<size_t>(64 * 4096), 0.1f), o(q.size(), 7.0f);
  SdpaOptions so;
  so.context = &context;
  so.num_threads = 64;  // 64 threads' tile scratch exceeds 1 MiB
  const TensorView qv = TensorView::dense(static_cast<const float*>(q.data()), {1, 64, 64, 64});
  try {
    scaled_dot_product_attention(qv, qv, qv, TensorView::dense(o.data(), {1, 64, 64, 64}), so);
    FAIL() << "sdpa over the limit ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::capacity);
  }
  for (float v : o) ASSERT_EQ(v, 7.0f);
}

TEST(Context, ThreadCountsAndTheDefaultContext) {
  EXPECT_THROW(Context().set_num_threads(-1), Error);
  Context context;
  EXPECT_EQ(context.num_threads(), 0);
  context.set_num_threads(3);
  EXPECT_EQ(context.num_threads(), 3);
  // Results do not depend on where the threads come from.
  std::mt19937 rng(8);
  const auto q = random_values(rng, 2 * 8 * 100 * 32), k = random_values(rng, q.size()),
             v = random_values(rng, q.size());
  std::vector<float> a(q.size()), b(q.size());
  auto run = [&](std::vector<float>& out, Context* ctx) {
    SdpaOptions opt;
    opt.causal = true;
    opt.context = ctx;
    scaled_dot_product_attention(
        TensorView::dense(q.data(), {2, 8, 100, 32}), TensorView::dense(k.data(), {2, 8, 100, 32}),
        TensorView::dense(v.data(), {2, 8, 100, 32}), TensorView::dense(out.data(), {2, 8, 100, 32}), opt);
  };
  run(a, &context);
  run(b, nullptr);  // the default context
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  EXPECT_GT(Context::default_context().workspace_bytes(), 0u);
  Context::default_context().release();
  EXPECT_EQ(Context::default_context().workspace_bytes(), 0u);
}

// One context shared by several server threads: each call in flight checks out its own workspace,
// so results are those of serial calls, and what the context holds is bounded by one workspace per
// concurrent call.
TEST(Context, SharedByConcurrentCallers) {
  const Layer spec(64, 4, 2);
  const MultiHeadAttention layer = spec.make();
  constexpr int kThreads = 4, kCalls = 20;
  std::mt19937 rng(4);
  const auto x = random_values(rng, 48 * 64);
  std::vector<float> serial(x.size());
  Context context;
  MhaOptions opt;
  opt.context = &context;
  layer.forward(x.data(), serial.data(), 1, 48, opt);
  const size_t one = context.workspace_bytes();
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      std::vector<float> y(x.size());
      for (int i = 0; i < kCalls; ++i) {
        layer.forward(x.data(), y.data(), 1, 48, opt);
        if (std::memcmp(y.data(), serial.data(), y.size() * sizeof(float)) != 0) ++mismatches;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_LE(context.workspace_bytes(), kThreads * one);
  context.release();
  EXPECT_EQ(context.workspace_bytes(), 0u);
}

// NUMA: numa_nodes() describes the machine (nodes with distinct, online CPUs), and a context on a
// node binds its calls' threads to that node's CPUs and computes the same bits; on a one-node
// machine that binding changes nothing (node 0 is every CPU). Run on a thread of its own so the
// binding (which stays with a thread) does not follow the rest of the suite's main thread.
TEST(Numa, NodesAndAContextOnANode) {
  const std::vector<NumaNode> nodes = numa_nodes();
  ASSERT_FALSE(nodes.empty());
  std::vector<int> seen;
  const long online = sysconf(_SC_NPROCESSORS_CONF);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (i) {
      EXPECT_GT(nodes[i].id, nodes[i - 1].id);
    }
    EXPECT_FALSE(nodes[i].cpus.empty());
    for (int c : nodes[i].cpus) {
      EXPECT_GE(c, 0);
      EXPECT_LT(c, online);
      EXPECT_EQ(std::count(seen.begin(), seen.end(), c), 0) << "cpu " << c << " in two nodes";
      seen.push_back(c);
    }
    EXPECT_GE(nodes[i].memory_bytes, nodes[i].free_bytes);
  }
  EXPECT_THROW(Context(ContextConfig{0, 0, nodes.back().id + 1}), Error);
  EXPECT_THROW(Context(ContextConfig{0, 0, -2}), Error);

  std::mt19937 rng(9);
  TestTensor q = TestTensor::make({1, 4, 37, 32}), k = TestTensor::make({1, 2, 200, 32}),
             v = TestTensor::make({1, 2, 200, 32}), o1 = TestTensor::make({1, 4, 37, 32}),
             o2 = TestTensor::make({1, 4, 37, 32});
  q.fill_uniform(rng);
  k.fill_uniform(rng);
  v.fill_uniform(rng);
  SdpaOptions opt;
  opt.causal = true;
  opt.num_threads = 2;
  scaled_dot_product_attention(q.cview(), k.cview(), v.cview(), o1.view, opt);
  auto affinity = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    sched_getaffinity(0, sizeof set, &set);
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
    return cpus;
  };
  std::vector<int> before, after;
  std::thread worker([&] {
    before = affinity();
    Context ctx(ContextConfig{2, 0, nodes[0].id});
    EXPECT_EQ(ctx.numa_node(), nodes[0].id);
    SdpaOptions on = opt;
    on.context = &ctx;
    scaled_dot_product_attention(q.cview(), k.cview(), v.cview(), o2.view, on);
    after = affinity();
  });
  worker.join();
  std::vector<int> node_cpus = nodes[0].cpus;
  // The calling thread now runs on exactly the node's CPUs (those the process may use).
  std::vector<int> allowed;
  for (int c : node_cpus)
    if (std::count(before.begin(), before.end(), c)) allowed.push_back(c);
  if (!allowed.empty()) {
    EXPECT_EQ(after, node_cpus);
  }
  if (nodes.size() == 1 && before == node_cpus) {
    EXPECT_EQ(after, before) << "one node: a no-op";
  }
  for (int64_t i = 0; i < 4 * 37 * 32; ++i) ASSERT_EQ(o1.view.data()[i], o2.view.data()[i]) << "same bits on the node";
}

}  // namespace
}  // namespace attend::testing
