#include "attention.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>

#include "../dispatch/registry.hpp"
#include "../dispatch/request_kind.hpp"
#include "../kernels/split_merge.hpp"
#include "../parallel/scheduler.hpp"
#include "../plan/attention_plan.hpp"

namespace attend::exec {

namespace {

size_t thread_stride(const plan::AttentionPlan& p) { return (p.scratch_floats + 15) / 16 * 16; }  // 64-byte aligned

// The plan of each entry, where its work items and split-K partial states start, and the order the
// entries are scheduled in. Kept per thread so a warm caller allocates nothing.
struct Schedule {
  std::vector<plan::AttentionPlan> plans;  // per entry
  std::vector<int64_t> first_item;         // per scheduled position, plus the total
  std::vector<size_t> order;               // scheduled position → entry
  std::vector<size_t> partial_at;          // per entry: offset of its split-K states (floats)
  std::vector<int64_t> pair_at;            // per entry: the number of its kv head 0's split-K pair, or -1
  std::vector<int32_t> splits_done;        // per split-K pair: its key ranges finished (atomic_ref)
  size_t partial_floats = 0, stride = 0;
  // bf16 math (KernelTable::keeps_packed_kv): the (entry, kv head) pairs whose row blocks keep K/V
  // packed across blocks (kernels::FlashWork::packed_k), "pack heads", numbered in schedule order.
  // Each thread has one buffer in the packed_kv workspace, holding the pack head it last ran a
  // block of (thread_head); a block of another head starts it over.
  std::vector<int64_t> pack_head_at;  // per entry: the number of its kv head 0, or -1
  size_t slot_floats = 0;             // one buffer: unit states, then K rows and V pairs (for the most keys)
  size_t state_floats = 0;            // the states' part
  std::vector<int64_t> thread_head;   // per thread: the pack head its buffer holds, or -1
  // Problem::store: per entry, the key range (split) whose item stores its new keys, or -1 when they
  // are stored before the items (flattened (entry, kv head) pairs in early_stores).
  std::vector<int64_t> store_split;
  std::vector<int64_t> early_stores;
  // The items run in contiguous runs per thread (parallel::parallel_for_runs): when every item reads
  // one key range of one (entry, kv head) with all its rows (decode), and when pack heads keep K/V
  // packed (bf16 math), so each thread packs its own heads instead of both packing every head.
  bool runs = false;
  // The first item of the entries that stream their K/V once (one row block: decodes), scheduled
  // after the others (prompt chunks); the item count when there are none.
  int64_t stream_item = 0;
};

int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

// Keeping a (batch, kv head)'s packed K/V across its row blocks pays from two row blocks on.
constexpr int64_t kPackMinRowBlocks = 2;

bool plan_packs(const kernels::KernelTable& table, const plan::AttentionPlan& p) {
  return table.keeps_packed_kv && p.row_blocks >= kPackMinRowBlocks && p.key_splits == 1;
}

bool packs(const kernels::KernelTable& table, const plan::AttentionPlan& p, const BatchEntry& e) {
  return plan_packs(table, p) && e.num_queries > 0 && e.valid_keys > 0;
}

void plan_packing(Schedule& s, const Problem& pr, const kernels::KernelTable& table) {
  const size_t n = pr.entries.size();
  s.pack_head_at.assign(n, -1);
  int64_t heads = 0, max_keys = 0;
  for (size_t at = 0; at < n; ++at) {
    const size_t i = s.order[at];
    const plan::AttentionPlan& p = s.plans[i];
    const BatchEntry& e = pr.entries[i];
    if (!packs(table, p, e)) continue;
    s.pack_head_at[i] = heads;
    heads += p.kv_heads;
    max_keys = std::max(max_keys, e.valid_keys);
  }
  s.slot_floats = heads ? static_cast<size_t>(kernels::packed_kv_floats(max_keys, pr.head_dim, pr.value_dim)) : 0;
  s.state_floats = static_cast<size_t>(round16((max_keys + kernels::kPackUnitKeys - 1) / kernels::kPackUnitKeys));
}

// Who stores each entry's new keys (Problem::store). A decode-shaped entry (one row block) has
// one item per key range, and only the range holding its new keys reads them: that item stores them
// first. Other entries' row blocks all read them, so they are stored before the items start.
void plan_stores(Schedule& s, const Problem& pr) {
  const size_t n = pr.entries.size();
  s.store_split.assign(n, -1);
  s.early_stores.clear();
  if (!pr.store) return;
  for (size_t i = 0; i < n; ++i) {
    const BatchEntry& e = pr.entries[i];
    const plan::AttentionPlan& p = s.plans[i];
    if (e.new_keys <= 0) continue;
    const int64_t first = e.num_keys - e.new_keys, last = e.num_keys - 1;
    if (p.row_blocks == 1 && e.num_queries > 0 && first / p.split_keys == last / p.split_keys)
      s.store_split[i] = last / p.split_keys;
    else
      for (int64_t h = 0; h < pr.kv_heads; ++h) s.early_stores.push_back(static_cast<int64_t>(i) * pr.kv_heads + h);
  }
}

Schedule& schedule_for(const Problem& pr, const kernels::KernelTable& table) {
  thread_local Schedule s;
  const size_t n = pr.entries.size();
  s.plans.resize(n);
  s.order.resize(n);
  s.partial_at.resize(n);
  s.first_item.resize(n + 1);
  if (!pr.plan_each_entry) {
    int64_t max_keys = 0;
    for (const BatchEntry& e : pr.entries) max_keys = std::max(max_keys, e.num_keys);
    const int64_t nq = n ? pr.entries[0].num_queries : 0;
    const plan::AttentionPlan p = plan::make_plan(table, static_cast<int64_t>(n), pr.q_heads, pr.kv_heads, nq, max_keys,
                                                  pr.head_dim, pr.value_dim, pr.kv_type);
    std::fill(s.plans.begin(), s.plans.end(), p);
  } else {
    for (size_t i = 0; i < n; ++i)
      s.plans[i] = plan::make_plan(table, 1, pr.q_heads, pr.kv_heads, pr.entries[i].num_queries, pr.entries[i].num_keys,
                                   pr.head_dim, pr.value_dim, pr.kv_type, /*per_entry=*/true);
  }
  for (size_t i = 0; i < n; ++i) s.order[i] = i;
  if (pr.plan_each_entry) {
    // The entries of several row blocks (prompt chunks) before those that stream their K/V once
    // (one row block: decodes; Schedule::stream_item), each kind heaviest first, so a schedule ends
    // on small items (in runs: each run ends on its smallest, and a thread done with its own takes
    // the smallest left, from a run's back). Only the schedule changes: no entry's work is split
    // differently.
    const auto cost = [&](size_t i) {
      return pr.entries[i].num_queries * std::max<int64_t>(1, pr.entries[i].num_keys);
    };
    const auto streams = [&](size_t i) { return s.plans[i].row_blocks == 1; };
    // (std::sort with the index as tie-break: stable, and unlike std::stable_sort it never allocates)
    std::sort(s.order.begin(), s.order.end(), [&](size_t a, size_t b) {
      if (streams(a) != streams(b)) return streams(b);
      return cost(a) != cost(b) ? cost(a) > cost(b) : a < b;
    });
  }
  s.partial_floats = 0;
  s.stride = 0;
  int64_t items = 0;
  for (size_t at = 0; at < n; ++at) {
    const size_t i = s.order[at];
    const plan::AttentionPlan& p = s.plans[i];
    s.first_item[at] = items;
    if (pr.entries[i].num_queries > 0) items += p.items() / std::max<int64_t>(1, p.batch);
    s.stride = std::max(s.stride, thread_stride(p));
  }
  s.first_item[n] = items;
  s.stream_item = items;
  for (size_t at = 0; at < n; ++at)
    if (pr.entries[s.order[at]].num_queries > 0 && s.plans[s.order[at]].row_blocks == 1) {
      s.stream_item = s.first_item[at];
      break;
    }
  s.runs = s.stream_item == 0;  // every item streams (or there are none)
  int64_t pairs = 0;
  s.pair_at.assign(n, -1);
  for (size_t i = 0; i < n; ++i) {
    const plan::AttentionPlan& p = s.plans[i];
    s.partial_at[i] = s.partial_floats;
    if (p.key_splits > 1 && pr.entries[i].num_queries > 0) {
      s.partial_floats += p.partial_floats() / static_cast<size_t>(p.batch);
      s.pair_at[i] = pairs;
      pairs += p.kv_heads;
    }
  }
  s.splits_done.assign(static_cast<size_t>(pairs), 0);
  plan_packing(s, pr, table);
  // bf16 math: one item at a time, both threads walked the same head and each packed it (and packed
  // each head again when it came back to it); in runs each packs about half the heads, and a thread
  // done with its run takes the smallest items left. Zen 5, 2 threads, FpMath::bf16 sdpa alternated
  // per call in one process (median µs, one item at a time → runs): 8 heads × 512, D 64 (P1)
  // 953 → 917–929; × 2048 (P2) 13998 → 13653–13709; causal (P3) 7878–7904 → 7585–7617; 8 × 4096
  // causal (P5) 28881–29022 → 28182–28495; 32 × 2048, D 128, causal (P4) 58533–58617 → 56279–56684;
  // D 80 / 256 (P6 / P7) 2.8–4.4 / 3.0–3.4% less.
  if (s.slot_floats) s.runs = true;
  plan_stores(s, pr);
  return s;
}

}  // namespace

void add_attention_needs(const kernels::KernelTable& table, int64_t batch, int64_t q_heads, int64_t kv_heads,
                         int64_t num_queries, int64_t max_keys, int64_t head_dim, int64_t value_dim, int threads,
                         detail::Needs& needs) {
  if (batch == 0 || q_heads == 0 || num_queries == 0) return;
  // (f32 K/V: the most key splits, so the most partial states and threads, for every storage type)
  const plan::AttentionPlan p = plan::make_plan(table, batch, q_heads, kv_heads, num_queries, max_keys, head_dim,
                                                value_dim, kernels::KvType::f32);
  const int64_t t = std::min<int64_t>(std::max(threads, 1), std::max<int64_t>(1, p.items()));
  needs[detail::Slot::tile_scratch] += static_cast<size_t>(t) * thread_stride(p);
  needs[detail::Slot::split_partials] += p.partial_floats();
  // (a bound for any batch of these sizes: entries of fewer keys pack less)
  if (plan_packs(table, p))
    needs[detail::Slot::packed_kv] += static_cast<size_t>(t * kernels::packed_kv_floats(max_keys, head_dim, value_dim));
}

void add_attention_needs(const kernels::KernelTable& table, const Problem& pr, int threads, detail::Needs& needs) {
  if (pr.entries.empty() || pr.q_heads == 0) return;
  const Schedule& s = schedule_for(pr, table);
  const int64_t items = s.first_item.back();
  if (items == 0) return;
  const int64_t t = std::min<int64_t>(std::max(threads, 1), items);
  needs[detail::Slot::tile_scratch] += static_cast<size_t>(t) * s.stride;
  needs[detail::Slot::split_partials] += s.partial_floats;
  needs[detail::Slot::packed_kv] += static_cast<size_t>(t) * s.slot_floats;
}

void run_attention(const Problem& pr, const kernels::KernelTable& table, const detail::Lease& lease) {
  if (pr.entries.empty()) return;
  const int nthreads = lease.threads();
  if (pr.q_heads == 0) {  // nothing to attend: only the stores
    auto store = [&](int64_t i, int) {
      const size_t b = static_cast<size_t>(i / pr.kv_heads);
      if (pr.entries[b].new_keys > 0) pr.store(pr.store_ctx, b, i % pr.kv_heads);
    };
    if (pr.store) parallel::parallel_for(static_cast<int64_t>(pr.entries.size()) * pr.kv_heads, nthreads, store);
    return;
  }
  Schedule& s = schedule_for(pr, table);
  auto early_store = [&](int64_t i, int) {
    const int64_t pair = s.early_stores[static_cast<size_t>(i)];
    pr.store(pr.store_ctx, static_cast<size_t>(pair / pr.kv_heads), pair % pr.kv_heads);
  };
  parallel::parallel_for(static_cast<int64_t>(s.early_stores.size()), nthreads, early_store);
  const int64_t items = s.first_item.back();
  if (items == 0) return;
  float* partial = s.partial_floats ? lease.get(detail::Slot::split_partials) : nullptr;
  float* scratch = lease.get(detail::Slot::tile_scratch);
  float* packed = s.slot_floats ? lease.get(detail::Slot::packed_kv) : nullptr;
  s.thread_head.assign(static_cast<size_t>(std::max(nthreads, 1)), -1);
  const int64_t Dv = pr.value_dim;
  const size_t kv_elem = static_cast<size_t>(kernels::kv_type_bytes(pr.kv_type));
  const int64_t q_elem = kernels::kv_type_bytes(pr.q_type), o_elem = kernels::kv_type_bytes(pr.o_type);

  // Merges the split-K partial states of entry b's kv head hkv, in key-range order (the same bits
  // whichever thread runs it).
  auto merge = [&](size_t b, int64_t hkv) {
    const plan::AttentionPlan& p = s.plans[b];
    const BatchEntry& e = pr.entries[b];
    kernels::SplitMergeArgs a;
    a.partial = partial + s.partial_at[b] +
                static_cast<size_t>(hkv * p.key_splits * kernels::split_state_floats(p.group_rows, Dv));
    a.splits = p.key_splits;
    a.rows = p.group_rows;
    a.value_dim = Dv;
    a.group = p.group;
    a.o = static_cast<char*>(e.o) + hkv * p.group * pr.o_head_stride * o_elem;
    a.o_type = pr.o_type;
    a.o_head_stride = pr.o_head_stride;
    a.o_row_stride = pr.o_row_stride;
    kernels::merge_key_splits(a);
  };

  // Items entry by entry in schedule order; within an entry head-major, heaviest row block first
  // (causal rows late in the sequence see more keys), so both threads walk the same head's K/V
  // while it is in cache (f32 prefill; decode's items and bf16 math's run in runs per thread, below
  // and Schedule::runs).
  const int64_t l2_ahead = dispatch::decode_l2_ahead_bytes();
  // The L2 request kind: the rules', or on a class whose faster kind follows the memory's state,
  // chosen per call by the chooser from earlier calls' times (a decode-only call: every item
  // streams its K/V once). Either kind computes the same bits.
  bool page_starts = dispatch::decode_page_starts();
  dispatch::RequestKey kind_key{};
  dispatch::RequestKindChooser::Choice kind{};
  if (s.stream_item < items && l2_ahead > 0 && dispatch::decode_request_kind_adaptive()) {
    size_t at = 0;  // the first entry that streams (Schedule::stream_item's; its plan's rows name the key)
    while (at + 1 < s.order.size() &&
           !(pr.entries[s.order[at]].num_queries > 0 && s.plans[s.order[at]].row_blocks == 1))
      ++at;
    const BatchEntry& first = pr.entries[s.order[at]];
    kind_key = {pr.kv_type, static_cast<int>(s.plans[s.order[at]].group_rows), pr.k_blocked, pr.head_dim,
                pr.softcap != 0.0f || pr.alibi || pr.sinks || first.bias};
    if (s.stream_item == 0) {
      kind = dispatch::request_kind_chooser().choose(kind_key);
      page_starts = kind.kind == dispatch::RequestKind::page_starts;
    } else if (const int k = dispatch::request_kind_chooser().exploiting(kind_key); k >= 0) {
      // A mixed call (a prompt chunk beside decodes): its decodes take the kind the decode-only
      // calls found faster, untimed (the chunk's time would swamp theirs).
      page_starts = k == static_cast<int>(dispatch::RequestKind::page_starts);
    }
  }
  auto run_item = [&](int64_t item, int thread) {
    const size_t at =
        static_cast<size_t>(std::upper_bound(s.first_item.begin(), s.first_item.end(), item) - s.first_item.begin()) -
        1;
    const size_t b = s.order[at];
    const plan::AttentionPlan& p = s.plans[b];
    const BatchEntry& e = pr.entries[b];
    int64_t rest = item - s.first_item[at];
    const int64_t split = rest % p.key_splits;
    rest /= p.key_splits;
    const int64_t block = p.row_blocks - 1 - rest % p.row_blocks;
    const int64_t hkv = rest / p.row_blocks;
    const int64_t h0 = hkv * p.group;

    kernels::FlashWork w{};
    w.q = static_cast<const char*>(e.q) + h0 * pr.q_head_stride * q_elem;
    w.q_type = pr.q_type;
    w.q_head_stride = pr.q_head_stride;
    w.q_row_stride = pr.q_row_stride;
    w.k = static_cast<const char*>(e.k) + static_cast<size_t>(hkv * pr.k_head_stride) * kv_elem;
    w.k_row_stride = pr.k_row_stride;
    w.k_blocked = pr.k_blocked;
    w.v = static_cast<const char*>(e.v) + static_cast<size_t>(hkv * pr.v_head_stride) * kv_elem;
    w.v_row_stride = pr.v_row_stride;
    w.kv_type = pr.kv_type;
    w.pages = e.pages;
    if (e.k_scale) {
      w.k_scale = e.k_scale + hkv * pr.scale_head_stride;
      w.v_scale = e.v_scale + hkv * pr.scale_head_stride;
    }
    w.page_tokens = pr.page_tokens;
    w.page_stride = pr.page_stride;
    if (s.pack_head_at[b] >= 0) {  // this thread's buffer, started over for a new head
      const int64_t pack = s.pack_head_at[b] + hkv;
      float* at = packed + static_cast<size_t>(thread) * s.slot_floats;
      if (s.thread_head[static_cast<size_t>(thread)] != pack) {
        s.thread_head[static_cast<size_t>(thread)] = pack;
        std::memset(at, 0, sizeof(float) * s.state_floats);
      }
      w.packed_state = reinterpret_cast<int32_t*>(at);
      w.packed_k = reinterpret_cast<uint32_t*>(at + s.state_floats);
      w.packed_v = w.packed_k + kernels::packed_k_floats(e.valid_keys, pr.head_dim);
    }
    if (e.bias) {
      w.bias = e.bias + h0 * pr.bias_head_stride;
      w.bias_head_stride = pr.bias_head_stride;
      w.bias_row_stride = pr.bias_row_stride;
      w.bias_key_stride = pr.bias_key_stride;
    }
    w.group = p.group;
    w.row_begin = block * p.block_rows;
    w.row_count = std::min(p.block_rows, p.group * e.num_queries - w.row_begin);
    w.head_dim = pr.head_dim;
    w.value_dim = Dv;
    w.first_position = pr.top_left ? 0 : e.num_keys - e.num_queries;
    w.valid_keys = e.valid_keys;
    w.causal = pr.causal;
    w.window = pr.window;
    w.key_begin = std::min(e.num_keys, split * p.split_keys);
    w.key_end = std::min(e.num_keys, w.key_begin + p.split_keys);
    w.stream_keys = p.row_blocks == 1;
    // Decode's software requests, where they were measured to help: per storage type, GQA group
    // or one row, and machine class (dispatch::decode_l2_requests, decode_k_l1_requests).
    const bool gqa = p.group_rows >= 2;
    w.hardware_stream = p.row_blocks == 1 && dispatch::decode_hardware_stream(pr.kv_type, pr.k_blocked);
    w.l2_ahead_bytes = p.row_blocks == 1 && !w.hardware_stream &&
                               dispatch::decode_l2_requests(pr.kv_type, gqa, pr.k_blocked, page_starts)
                           ? l2_ahead
                           : 0;
    w.l2_pages = w.l2_ahead_bytes > 0 && dispatch::decode_l2_pages(pr.kv_type, page_starts);
    w.no_k_l1_requests =
        p.row_blocks == 1 && (w.hardware_stream || !dispatch::decode_k_l1_requests(pr.kv_type, gqa, pr.k_blocked));
    w.i8_one_row_integer = p.row_blocks == 1 && dispatch::decode_i8_one_row_integer();
    w.one_block_scores = p.row_blocks == 1 && dispatch::decode_one_block_scores(pr.kv_type, gqa, pr.k_blocked);
    w.scale = pr.scale;
    w.softcap = pr.softcap;
    w.alibi = pr.alibi ? pr.alibi + h0 : nullptr;
    w.sinks = pr.sinks ? pr.sinks + h0 : nullptr;
    w.tree = e.tree;
    w.tree_words = e.tree_words;
    w.tree_depth = e.tree_depth;
    w.o = static_cast<char*>(e.o) + h0 * pr.o_head_stride * o_elem;
    w.o_type = pr.o_type;
    w.o_head_stride = pr.o_head_stride;
    w.o_row_stride = pr.o_row_stride;
    if (p.key_splits > 1) {
      // Per entry [hkv][split][row][Dv + 2]: accumulators first, then (max, sum) pairs.
      float* base = partial + s.partial_at[b] +
                    static_cast<size_t>((hkv * p.key_splits + split) * kernels::split_state_floats(p.group_rows, Dv));
      w.partial_acc = base;
      w.partial_ml = base + p.group_rows * Dv;
    }
    if (s.store_split[b] == split) pr.store(pr.store_ctx, b, hkv);
    if (w.row_count > 0) p.flash_for(w.row_count)(w, scratch + static_cast<size_t>(thread) * s.stride);
    // The last of a split head's key ranges to finish merges them, while the other thread streams
    // (no second parallel region). acq_rel: it sees every range's partial state.
    if (p.key_splits > 1 && std::atomic_ref<int32_t>(s.splits_done[static_cast<size_t>(s.pair_at[b] + hkv)])
                                    .fetch_add(1, std::memory_order_acq_rel) == p.key_splits - 1)
      merge(b, hkv);
  };
  // Decode: a thread takes its items in runs, so its next key range (or head) continues the K and
  // V streams its last one read, and the hardware prefetchers keep them going instead of two new
  // streams starting an item (the software requests stay within an item: letting them run on into
  // the next range measured the same). AMX Xeon, 2 threads, evicted, share of the paired read
  // (attend-bench, 3 rounds alternated, one item at a time → runs): cache f32 D2 (32 ranges of
  // 1024 keys) 81.9/83.3/82.4 → 87.0/84.4/84.7%, D3 (64 heads) 85.3/84.2/84.6 → 86.4/85.9/86.3%,
  // bf16 D2 74.7/74.0/75.5 → 77.7/77.8/78.4%, i8 D2 70.4/69.7/68.8 → 72.3/71.6/72.7%, sdpa D3
  // 80.7/81.4/82.0 → 82.6/83.0/82.5%; the one-row shapes (D1, D4) within noise (session 36).
  //
  // A prompt chunk beside decodes (paged_attention's mixed step): the chunk's items and the
  // decodes' start on separate threads, so one thread's compute overlaps the other's stream instead
  // of both threads computing and then both streaming. Zen 5, 2 threads, 31 decodes of 1536 keys
  // + a 256-token chunk after 1024 (Llama-3-8B's attention), in one process alternated per call,
  // median µs: 21067–21469 → 20827–21218; 31 × 4096 + a chunk after 512: 25275 → 24744. (Small:
  // a core reads about half of what two do here.) attend-bench alternated, 4 rounds: a mixed step
  // over the chunk alone plus the decodes alone 1.018–1.028 → 1.000–1.013; serve/paged-f32 against
  // the slot cache back to back 0.950–0.993 → 0.968–1.007.
  const auto t0 = kind.timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  if (s.stream_item > 0 && s.stream_item < items)
    parallel::parallel_for_groups(items, s.stream_item, nthreads, run_item);
  else if (s.runs)
    parallel::parallel_for_runs(items, nthreads, run_item);
  else
    parallel::parallel_for(items, nthreads, run_item);
  if (kind.timed) {
    // Seconds per byte of the K/V the call read (an 8-bit cache's scales aside).
    double bytes = 0;
    for (const BatchEntry& e : pr.entries)
      if (e.num_queries > 0)
        bytes += static_cast<double>(e.num_keys) * static_cast<double>(pr.kv_heads) *
                 static_cast<double>(pr.head_dim + pr.value_dim) * static_cast<double>(kv_elem);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (bytes > 0) dispatch::request_kind_chooser().record(kind_key, kind.kind, seconds / bytes);
  }
}

}  // namespace attend::exec
