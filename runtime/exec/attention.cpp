#include "attention.hpp"

#include <algorithm>
#include <cmath>

#include "../kernels/split_merge.hpp"
#include "../parallel/scheduler.hpp"
#include "../plan/attention_plan.hpp"

namespace attend::exec {

namespace {
size_t thread_stride(const plan::AttentionPlan& p) { return (p.scratch_floats + 15) / 16 * 16; }  // 64-byte aligned
int64_t max_keys_of(const Problem& pr) {
  int64_t max_keys = 0;
  for (const BatchEntry& e : pr.entries) max_keys = std::max(max_keys, e.num_keys);
  return max_keys;
}
}  // namespace

void add_attention_needs(const kernels::KernelTable& table, int64_t batch, int64_t q_heads, int64_t kv_heads,
                         int64_t num_queries, int64_t max_keys, int64_t head_dim, int64_t value_dim, int threads,
                         detail::Needs& needs) {
  if (batch == 0 || q_heads == 0 || num_queries == 0) return;
  const plan::AttentionPlan p =
      plan::make_plan(table, batch, q_heads, kv_heads, num_queries, max_keys, head_dim, value_dim);
  const int64_t t = std::min<int64_t>(std::max(threads, 1), std::max<int64_t>(1, p.items()));
  needs[detail::Slot::tile_scratch] += static_cast<size_t>(t) * thread_stride(p);
  needs[detail::Slot::split_partials] += p.partial_floats();
}

void add_attention_needs(const kernels::KernelTable& table, const Problem& pr, int threads, detail::Needs& needs) {
  add_attention_needs(table, pr.batch, pr.q_heads, pr.kv_heads, pr.num_queries, max_keys_of(pr), pr.head_dim,
                      pr.value_dim, threads, needs);
}

void run_attention(const Problem& pr, const kernels::KernelTable& table, const detail::Lease& lease) {
  if (pr.batch == 0 || pr.q_heads == 0 || pr.num_queries == 0) return;
  const int64_t max_keys = max_keys_of(pr);
  // Splits are planned for the longest entry; a shorter entry's extra splits are empty and merge
  // as nothing. Only the shape decides them, so results do not depend on the thread count.
  const plan::AttentionPlan p =
      plan::make_plan(table, pr.batch, pr.q_heads, pr.kv_heads, pr.num_queries, max_keys, pr.head_dim, pr.value_dim);
  const int nthreads = lease.threads();
  float* partial = p.key_splits > 1 ? lease.get(detail::Slot::split_partials) : nullptr;
  float* scratch = lease.get(detail::Slot::tile_scratch);
  const size_t stride = thread_stride(p);
  const int64_t Dv = pr.value_dim;
  const size_t kv_elem = pr.kv_type == kernels::KvType::f32 ? 4 : 2;

  // Items in head-major order, heaviest row block first within a head (causal rows late in the
  // sequence see more keys), so both threads walk the same head's K/V while it is in cache.
  auto run_item = [&](int64_t item, int thread) {
    int64_t rest = item;
    const int64_t split = rest % p.key_splits;
    rest /= p.key_splits;
    const int64_t block = p.row_blocks - 1 - rest % p.row_blocks;
    rest /= p.row_blocks;
    const int64_t hkv = rest % p.kv_heads;
    const int64_t b = rest / p.kv_heads;
    const int64_t h0 = hkv * p.group;
    const BatchEntry& e = pr.entries[static_cast<size_t>(b)];

    kernels::FlashWork w{};
    w.q = e.q + h0 * pr.q_head_stride;
    w.q_head_stride = pr.q_head_stride;
    w.q_row_stride = pr.q_row_stride;
    w.k = static_cast<const char*>(e.k) + static_cast<size_t>(hkv * pr.k_head_stride) * kv_elem;
    w.k_row_stride = pr.k_row_stride;
    w.k_blocked = pr.k_blocked;
    w.v = static_cast<const char*>(e.v) + static_cast<size_t>(hkv * pr.v_head_stride) * kv_elem;
    w.v_row_stride = pr.v_row_stride;
    w.kv_type = pr.kv_type;
    if (e.bias) {
      w.bias = e.bias + h0 * pr.bias_head_stride;
      w.bias_head_stride = pr.bias_head_stride;
      w.bias_row_stride = pr.bias_row_stride;
      w.bias_key_stride = pr.bias_key_stride;
    }
    w.group = p.group;
    w.row_begin = block * p.block_rows;
    w.row_count = std::min(p.block_rows, p.group_rows - w.row_begin);
    w.head_dim = pr.head_dim;
    w.value_dim = Dv;
    w.num_keys = e.num_keys;
    w.num_queries = pr.num_queries;
    w.valid_keys = e.valid_keys;
    w.causal = pr.causal;
    w.window = pr.window;
    w.key_begin = std::min(e.num_keys, split * p.split_keys);
    w.key_end = std::min(e.num_keys, w.key_begin + p.split_keys);
    w.scale = pr.scale;
    w.o = e.o + h0 * pr.o_head_stride;
    w.o_head_stride = pr.o_head_stride;
    w.o_row_stride = pr.o_row_stride;
    if (partial) {
      // [b][hkv][split][row][Dv + 2]: accumulators first, then (max, sum) pairs.
      float* base = partial + ((b * p.kv_heads + hkv) * p.key_splits + split) * p.group_rows * (Dv + 2);
      w.partial_acc = base;
      w.partial_ml = base + p.group_rows * Dv;
    }
    p.flash_for(w.row_count)(w, scratch + static_cast<size_t>(thread) * stride);
  };
  parallel::parallel_for(p.items(), nthreads, run_item);
  if (!partial) return;

  // Merge the split-K partial states of each (batch, kv head).
  auto merge = [&](int64_t bh, int) {
    const int64_t b = bh / p.kv_heads, hkv = bh % p.kv_heads;
    const BatchEntry& e = pr.entries[static_cast<size_t>(b)];
    kernels::SplitMergeArgs a;
    a.partial = partial + bh * p.key_splits * kernels::split_state_floats(p.group_rows, Dv);
    a.splits = p.key_splits;
    a.rows = p.group_rows;
    a.value_dim = Dv;
    a.group = p.group;
    a.o = e.o + hkv * p.group * pr.o_head_stride;
    a.o_head_stride = pr.o_head_stride;
    a.o_row_stride = pr.o_row_stride;
    kernels::merge_key_splits(a);
  };
  parallel::parallel_for(p.batch * p.kv_heads, nthreads, merge);
}

}  // namespace attend::exec
