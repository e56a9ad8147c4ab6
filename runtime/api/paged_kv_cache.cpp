#include <algorithm>
#include <atomic>
#include <attend/error.hpp>
#include <attend/paged_kv_cache.hpp>
#include <bit>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../cache/kv_store.hpp"
#include "../parallel/scheduler.hpp"
#include "attention_call.hpp"
#include "paged_kv_cache_access.hpp"
#include "paged_step.hpp"

namespace attend {

namespace {
// Masks compare key positions as f32 inside the kernels; they are exact below 2^24.
constexpr int64_t kMaxTokens = int64_t{1} << 24;
std::string str(int64_t v) { return std::to_string(v); }
}  // namespace

namespace {

// The pool's free blocks: a bitmap (bit b % 64 of word b / 64 set = block b free) and their count.
// Taking and freeing a block are O(1), placing a stretch a pass over the words (FreeBlocks::place),
// and nothing allocates after reset. (A sorted list of ids took O(free blocks) per stretch to erase
// and per release to merge: 23–88 µs per 256-token chunk in a fragmented 65,536-block pool.)
class FreeBlocks {
 public:
  void reset(int64_t blocks) {
    words_.assign(static_cast<size_t>((blocks + 63) / 64), 0);
    count_ = 0;
    for (int64_t b = 0; b < blocks; ++b) give(b);
  }
  int64_t size() const { return count_; }
  bool has(int64_t b) const {
    return b >= 0 && b < static_cast<int64_t>(words_.size()) * 64 && ((word(b) >> (b % 64)) & 1u);
  }
  void take(int64_t b) {
    words_[static_cast<size_t>(b / 64)] &= ~(uint64_t{1} << (b % 64));
    --count_;
  }
  void give(int64_t b) {
    words_[static_cast<size_t>(b / 64)] |= uint64_t{1} << (b % 64);
    ++count_;
  }
  // Where a new stretch of n blocks goes (there is a free block): in the largest free run [a, b)
  // (the lowest of equal ones). After a block that ends a sequence (tails[a − 1] > 0), which may
  // grow into the run, the stretch starts halfway, at a + min((b − a) / 2, b − a − n), so both
  // keep room; else at a. A run shorter than n is taken whole from a (the caller places the rest).
  int64_t place(int64_t n, const std::vector<int32_t>& tails) const {
    const auto [a, len] = largest_run();
    if (len <= n || a == 0 || tails[static_cast<size_t>(a - 1)] == 0) return a;
    return a + std::min(len / 2, len - n);
  }

 private:
  // The largest run of free blocks as (first block, length), the lowest of equal ones; (-1, 0)
  // when none is free. One pass over the words, O(1) bit operations per word but for a word's
  // longest inner run (as many steps as that run is long): runs are never visited one by one, so a
  // pool fragmented into isolated blocks costs what an empty one does.
  std::pair<int64_t, int64_t> largest_run() const {
    int64_t best = -1, best_len = 0;
    auto consider = [&](int64_t from, int64_t len) {
      if (len > best_len) best = from, best_len = len;
    };
    int64_t open = -1;  // the first block of a free run reaching the current word's bit 0
    const int64_t words = static_cast<int64_t>(words_.size());
    for (int64_t w = 0; w < words; ++w) {
      const uint64_t x = words_[static_cast<size_t>(w)];
      const int64_t base = w * 64;
      if (x == ~uint64_t{0}) {
        if (open < 0) open = base;
        continue;
      }
      const int lo = std::countr_one(x), hi = std::countl_one(x);  // the runs at the word's ends (< 64)
      const int64_t from = open >= 0 ? open : base;
      if (open >= 0 || lo > 0) consider(from, base + lo - from);
      open = hi > 0 ? base + 64 - hi : -1;
      // The runs strictly inside: bits lo and 63 − hi are used, so they end inside the word.
      uint64_t y = x & ~((uint64_t{1} << lo) - 1) & (hi > 0 ? ~(~uint64_t{0} << (64 - hi)) : ~uint64_t{0});
      int64_t k = 0;
      for (uint64_t next = y; next != 0; next &= next >> 1) y = next, ++k;  // then y: where the runs of k start
      if (k > 0) consider(base + std::countr_zero(y), k);
    }
    if (open >= 0) consider(open, words * 64 - open);
    return {best, best_len};
  }
  uint64_t word(int64_t b) const { return words_[static_cast<size_t>(b / 64)]; }
  std::vector<uint64_t> words_;
  int64_t count_ = 0;  // free blocks
};

}  // namespace

struct PagedKVCache::Impl {
  struct Seq {
    std::vector<int32_t> blocks;  // pool blocks, in token order (changed only under pool_mutex)
    // Tokens held. Written by the call that claims the sequence; atomic so that length(), blocks()
    // and blocks_needed() may read it while another thread appends (they see either value).
    std::atomic<int64_t> length{0};
    std::atomic<int64_t> held{0};   // blocks.size(), for blocks() without the pool mutex
    std::atomic<bool> busy{false};  // claimed by a call (detail::PagedStep and the methods below)
  };

  PagedKVCacheConfig config;
  detail::KvStore store;

  mutable std::mutex pool_mutex;  // free blocks and reference counts
  // Where a sequence's new blocks go (take): after its last one, or as one ascending run, whenever
  // the pool has them free; adjacent blocks are read as one run by the kernels (KvSource::run).
  FreeBlocks free;
  std::vector<int32_t> refs;   // sequences holding each block
  std::vector<int32_t> tails;  // sequences whose last block it is (they may grow past it)

  mutable std::mutex seq_mutex;  // the sequence table
  std::unordered_map<int64_t, std::unique_ptr<Seq>> seqs;
  int64_t next_id = 0;

  int64_t bt() const { return config.block_tokens; }
  int64_t blocks_for(int64_t tokens) const { return (tokens + bt() - 1) / bt(); }

  [[noreturn]] static void fail(const char* who, const std::string& m, ErrorCode code = ErrorCode::invalid_argument,
                                int64_t missing = 0) {
    throw Error(code, std::string(who) + ": " + m, missing);
  }

  // The sequence `id`, claimed (busy) for the caller; throws for an unknown or busy id.
  Seq& claim(const char* who, int64_t id) {
    std::lock_guard<std::mutex> lock(seq_mutex);
    const auto it = seqs.find(id);
    if (it == seqs.end()) fail(who, "unknown sequence id " + str(id));
    bool expected = false;
    if (!it->second->busy.compare_exchange_strong(expected, true))
      fail(who, "sequence " + str(id) + " is in use by another call", ErrorCode::concurrent_use);
    return *it->second;
  }
  // Reads `id` under the table's lock (so a concurrent release cannot free it meanwhile).
  template <class Read>
  auto read(const char* who, int64_t id, Read read) const {
    std::lock_guard<std::mutex> lock(seq_mutex);
    const auto it = seqs.find(id);
    if (it == seqs.end()) fail(who, "unknown sequence id " + str(id));
    return read(*it->second);
  }

  // Blocks appending `tokens` to `s` takes from the pool now (new blocks + a copy of a shared,
  // partially filled last block). Needs pool_mutex.
  int64_t needed(const Seq& s, int64_t tokens) const {
    if (tokens <= 0) return 0;
    const int64_t grow = blocks_for(s.length + tokens) - static_cast<int64_t>(s.blocks.size());
    const bool cow = s.length % bt() != 0 && refs[static_cast<size_t>(s.blocks.back())] > 1;
    return grow + (cow ? 1 : 0);
  }

  // `s`'s last block stops / starts counting in `tails` (around every change to s.blocks).
  void untail(const Seq& s) {
    if (!s.blocks.empty()) --tails[static_cast<size_t>(s.blocks.back())];
  }
  void retail(const Seq& s) {
    if (!s.blocks.empty()) ++tails[static_cast<size_t>(s.blocks.back())];
  }

  // Makes `s` own writable blocks for `tokens` more tokens. Needs pool_mutex and enough free blocks.
  void grow(Seq& s, int64_t tokens) {
    if (tokens <= 0) return;
    untail(s);
    grow_blocks(s, tokens);
    retail(s);
  }
  void grow_blocks(Seq& s, int64_t tokens) {
    const int64_t more = blocks_for(s.length + tokens) - static_cast<int64_t>(s.blocks.size());
    if (s.length % bt() != 0) {
      int32_t& last = s.blocks.back();
      if (refs[static_cast<size_t>(last)] > 1) {  // copy-on-write of the shared partial block
        // (placed as the first of the blocks the sequence takes now, which follow it)
        const int32_t copy = take_placed(1 + more);
        store.copy_page(last, copy, s.length % bt());
        --refs[static_cast<size_t>(last)];
        refs[static_cast<size_t>(copy)] = 1;
        last = copy;
      }
    }
    take(s, more);
    s.held = static_cast<int64_t>(s.blocks.size());
  }

  // Appends n free blocks to s's table, each new stretch as long an ascending run of adjacent
  // blocks as the pool has: the block after s's last one if it is free, else a stretch placed by
  // FreeBlocks::place (the largest free run, halfway along it after another sequence's last
  // block). A decode step reads each run of a sequence's adjacent blocks as one stream per head:
  // - Sequences growing side by side took the lowest free block in turn at first, so each one's
  //   blocks lay a block apart: decode read 16 KB runs per head, at 0.67–0.76× the slot cache's
  //   bandwidth on a Zen 5 (session 41).
  // - Then the lowest run holding the stretch past 512 tokens left after another sequence's last
  //   block: histories grown as a server grows them (prompt chunks, then a token at a time) lay in
  //   159 runs for the serving trace's 32 sequences, 0.92–0.94× the slot cache's bandwidth.
  // - Halving the largest run: 82 runs, 0.95–0.97× (session 63, docs/performance.md).
  // (A pool fragmented by sequences growing token by token also handed a prompt chunk scattered
  // blocks under a LIFO free list: 8 runs of one block per 256-token chunk, 12% slower.)
  // Needs pool_mutex and n free blocks.
  void take(Seq& s, int64_t n) {
    while (n > 0) {
      int64_t at = s.blocks.empty() ? -1 : s.blocks.back() + 1;
      if (!free.has(at)) at = free.place(n, tails);
      for (; n > 0 && free.has(at); --n, ++at) {
        free.take(at);
        refs[static_cast<size_t>(at)] = 1;
        s.blocks.push_back(static_cast<int32_t>(at));
      }
    }
  }

  // The first block of a stretch of n placed by FreeBlocks::place, taken (a copy-on-write's copy,
  // which the sequence's next blocks follow). Needs pool_mutex and a free block.
  int32_t take_placed(int64_t n) {
    const int64_t b = free.place(n, tails);
    free.take(b);
    return static_cast<int32_t>(b);
  }

  // Drops `s`'s blocks past the first `keep` (those no other sequence holds become free). Needs
  // pool_mutex.
  void drop(Seq& s, size_t keep) {
    untail(s);
    for (size_t i = s.blocks.size(); i > keep; --i) {
      const int32_t b = s.blocks[i - 1];
      if (--refs[static_cast<size_t>(b)] == 0) free.give(b);
    }
    s.blocks.resize(std::min(keep, s.blocks.size()));
    s.held = static_cast<int64_t>(s.blocks.size());
    retail(s);
  }
};

namespace {
using Seq = PagedKVCache::Impl::Seq;

// Releases a claim on scope exit.
struct Unclaim {
  Seq& s;
  ~Unclaim() { s.busy.store(false); }
};
}  // namespace
using Impl = PagedKVCache::Impl;

PagedKVCache::PagedKVCache(const PagedKVCacheConfig& c) : impl_(std::make_unique<Impl>()) {
  const char* who = "PagedKVCache";
  if (c.kv_heads <= 0 || c.head_dim <= 0 || c.num_blocks <= 0 || c.block_tokens <= 0)
    Impl::fail(who, "kv_heads, head_dim, num_blocks and block_tokens must be > 0 (got " + str(c.kv_heads) + ", " +
                        str(c.head_dim) + ", " + str(c.num_blocks) + ", " + str(c.block_tokens) + ")");
  if (c.block_tokens % kernels::kKeyBlock != 0)
    Impl::fail(who, "block_tokens must be a multiple of 16, got " + str(c.block_tokens));
  if (c.num_blocks >= (int64_t{1} << 31)) Impl::fail(who, "num_blocks must be below 2^31");
  if (dtype_size(c.dtype) == 0) Impl::fail(who, "unknown dtype " + str(static_cast<int64_t>(c.dtype)));
  if (c.value_dim < 0) Impl::fail(who, "value_dim must be >= 0 (0: head_dim), got " + str(c.value_dim));
  Impl& s = *impl_;
  s.config = c;
  if (s.config.value_dim == 0) s.config.value_dim = c.head_dim;
  // Head-major: a kv head's blocks are adjacent, so blocks a sequence takes together (a prompt
  // chunk's) are read by decode as one run per head (see docs/design.md, paged attention).
  s.store = detail::KvStore(c.dtype, c.kv_heads, c.head_dim, s.config.value_dim, c.block_tokens, c.num_blocks,
                            /*head_major=*/true);
  s.refs.assign(static_cast<size_t>(c.num_blocks), 0);
  s.tails.assign(static_cast<size_t>(c.num_blocks), 0);
  s.free.reset(c.num_blocks);
}

PagedKVCache::~PagedKVCache() = default;

std::vector<int32_t> detail::PagedKVCacheAccess::block_table(const PagedKVCache& c, int64_t seq) {
  return c.impl_->read("PagedKVCacheAccess::block_table", seq, [&](const PagedKVCache::Impl::Seq& q) {
    std::lock_guard<std::mutex> lock(c.impl_->pool_mutex);
    return q.blocks;
  });
}
void detail::PagedKVCacheAccess::storage_ranges(const PagedKVCache& c, int64_t seq,
                                                std::vector<std::pair<const void*, size_t>>& out) {
  const PagedKVCache::Impl& s = *c.impl_;
  s.read("PagedKVCacheAccess::storage_ranges", seq, [&](const PagedKVCache::Impl::Seq& q) {
    std::lock_guard<std::mutex> lock(s.pool_mutex);
    const int64_t length = q.length.load();
    for (size_t i = 0; i < q.blocks.size(); ++i)
      s.store.page_ranges(q.blocks[i], std::min(s.bt(), length - static_cast<int64_t>(i) * s.bt()), out);
    return 0;
  });
}
PagedKVCache::PagedKVCache(PagedKVCache&&) noexcept = default;
PagedKVCache& PagedKVCache::operator=(PagedKVCache&&) noexcept = default;

const PagedKVCacheConfig& PagedKVCache::config() const { return impl_->config; }

int64_t PagedKVCache::create_sequence() {
  auto seq = std::make_unique<Seq>();
  seq->blocks.reserve(64);
  std::lock_guard<std::mutex> lock(impl_->seq_mutex);
  const int64_t id = impl_->next_id++;
  impl_->seqs.emplace(id, std::move(seq));
  return id;
}

int64_t PagedKVCache::fork(int64_t seq) {
  Impl& s = *impl_;
  Seq& src = s.claim("PagedKVCache::fork", seq);
  const Unclaim unclaim{src};
  auto copy = std::make_unique<Seq>();
  copy->blocks.reserve(std::max<size_t>(64, src.blocks.capacity()));
  copy->blocks = src.blocks;
  copy->length = src.length.load();
  copy->held = src.held.load();
  {
    std::lock_guard<std::mutex> lock(s.pool_mutex);
    for (int32_t b : copy->blocks) ++s.refs[static_cast<size_t>(b)];
    s.retail(*copy);
  }
  std::lock_guard<std::mutex> lock(s.seq_mutex);
  const int64_t id = s.next_id++;
  s.seqs.emplace(id, std::move(copy));
  return id;
}

void PagedKVCache::release(int64_t seq) {
  Impl& s = *impl_;
  Seq& victim = s.claim("PagedKVCache::release", seq);
  {
    std::lock_guard<std::mutex> lock(s.pool_mutex);
    s.drop(victim, 0);
  }
  std::lock_guard<std::mutex> lock(s.seq_mutex);
  s.seqs.erase(seq);  // destroys `victim` (claimed, so no other call holds it)
}

int64_t PagedKVCache::length(int64_t seq) const {
  return impl_->read("PagedKVCache::length", seq, [](const Seq& s) { return s.length.load(); });
}

int64_t PagedKVCache::blocks(int64_t seq) const {
  return impl_->read("PagedKVCache::blocks", seq, [](const Seq& s) { return s.held.load(); });
}

void PagedKVCache::truncate(int64_t seq, int64_t tokens) {
  Impl& s = *impl_;
  Seq& q = s.claim("PagedKVCache::truncate", seq);
  const Unclaim unclaim{q};
  if (tokens < 0 || tokens > q.length)
    Impl::fail("PagedKVCache::truncate",
               "sequence " + str(seq) + " holds " + str(q.length) + " tokens; cannot keep " + str(tokens));
  std::lock_guard<std::mutex> lock(s.pool_mutex);
  s.drop(q, static_cast<size_t>(s.blocks_for(tokens)));
  q.length = tokens;
}

void PagedKVCache::keep(int64_t seq, int64_t first, std::span<const int64_t> positions) {
  const char* who = "PagedKVCache::keep";
  Impl& s = *impl_;
  Seq& q = s.claim(who, seq);
  const Unclaim unclaim{q};
  const int64_t len = q.length;
  if (first < 0 || first > len)
    Impl::fail(who, "first = " + str(first) + " is outside [0, " + str(len) + "] (sequence " + str(seq) + " holds " +
                        str(len) + " tokens)");
  for (size_t k = 0; k < positions.size(); ++k) {
    const int64_t p = positions[k];
    if (p < first || p >= len)
      Impl::fail(who, "positions[" + str(static_cast<int64_t>(k)) + "] = " + str(p) +
                          " is outside [first = " + str(first) + ", length = " + str(len) + ")");
    if (k > 0 && p <= positions[k - 1])
      Impl::fail(who, "positions must be strictly ascending: positions[" + str(static_cast<int64_t>(k)) +
                          "] = " + str(p) + " follows " + str(positions[k - 1]));
  }
  const int64_t bt = s.bt(), kept = first + static_cast<int64_t>(positions.size());
  std::lock_guard<std::mutex> lock(s.pool_mutex);
  // Blocks a moved token lands in must be this sequence's alone: count the shared ones first (all
  // or nothing), then copy them, then move the tokens (ascending: a destination never holds a
  // token still to be read), then drop the tail.
  int64_t shared = 0, counted = -1;  // destination blocks are ascending
  for (size_t k = 0; k < positions.size(); ++k) {
    const int64_t dst = first + static_cast<int64_t>(k);
    if (positions[k] == dst || dst / bt == counted) continue;
    counted = dst / bt;
    if (s.refs[static_cast<size_t>(q.blocks[static_cast<size_t>(counted)])] > 1) ++shared;
  }
  const int64_t have = static_cast<int64_t>(s.free.size());
  if (shared > have)
    Impl::fail(who,
               "the pool has " + str(have) + " free blocks; moving the kept tokens needs " + str(shared) +
                   " copies of shared blocks (" + str(shared - have) + " missing)",
               ErrorCode::capacity, shared - have);
  s.untail(q);  // (a copy-on-write below may replace the last block)
  for (size_t k = 0; k < positions.size(); ++k) {
    const int64_t dst = first + static_cast<int64_t>(k), src = positions[k];
    if (dst == src) continue;
    int32_t& block = q.blocks[static_cast<size_t>(dst / bt)];
    if (s.refs[static_cast<size_t>(block)] > 1) {  // copy-on-write of the block the token lands in
      const int32_t copy = s.take_placed(1);
      s.store.copy_page(block, copy, std::min(bt, len - dst / bt * bt));
      --s.refs[static_cast<size_t>(block)];
      s.refs[static_cast<size_t>(copy)] = 1;
      block = copy;
    }
    s.store.copy_token(q.blocks[static_cast<size_t>(src / bt)], src % bt, block, dst % bt);
  }
  s.retail(q);
  s.drop(q, static_cast<size_t>(s.blocks_for(kept)));
  q.length = kept;
}

int64_t PagedKVCache::free_blocks() const {
  std::lock_guard<std::mutex> lock(impl_->pool_mutex);
  return static_cast<int64_t>(impl_->free.size());
}

int64_t PagedKVCache::blocks_needed(std::span<const SequenceChunk> chunks) const {
  const Impl& s = *impl_;
  int64_t n = 0;
  for (const SequenceChunk& c : chunks)
    n += s.read("PagedKVCache::blocks_needed", c.seq, [&](const Seq& q) {
      std::lock_guard<std::mutex> lock(s.pool_mutex);  // (block tables change only under it)
      return s.needed(q, c.tokens);
    });
  return n;
}

int64_t PagedKVCache::sequences() const {
  std::lock_guard<std::mutex> lock(impl_->seq_mutex);
  return static_cast<int64_t>(impl_->seqs.size());
}

size_t PagedKVCache::memory_bytes() const { return impl_->store.bytes(); }

size_t PagedKVCache::used_bytes() const {
  const Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.pool_mutex);
  const size_t used = static_cast<size_t>(s.config.num_blocks) - s.free.size();
  return s.store.bytes() / static_cast<size_t>(s.config.num_blocks) * used;
}

void PagedKVCache::append(int64_t seq, const TensorView& k, const TensorView& v) {
  const char* who = "PagedKVCache::append";
  const PagedKVCacheConfig& c = impl_->config;
  for (const TensorView* t : {&k, &v}) {
    detail::check_view(who, t == &k ? "k" : "v", *t);
    if (t->dim(0) != 1 || t->dim(1) != c.kv_heads || t->dim(3) != (t == &k ? c.head_dim : c.value_dim))
      Impl::fail(who, "k must be [1, " + str(c.kv_heads) + ", n, " + str(c.head_dim) + "] and v [1, " +
                          str(c.kv_heads) + ", n, " + str(c.value_dim) + "], got k " + detail::dims(k.shape()) +
                          ", v " + detail::dims(v.shape()));
  }
  if (k.dim(2) != v.dim(2)) Impl::fail(who, "k has " + detail::dims(k.shape()) + " but v " + detail::dims(v.shape()));
  detail::check_dtype(who, "v", v, &k, "k");
  const SequenceChunk chunk{seq, k.dim(2)};
  detail::PagedStep step(who, *this, std::span<const SequenceChunk>(&chunk, 1), k.dim(2));
  step.append(k, v, 1);
}

// ---------------------------------------------------------------------------------------------

namespace detail {

struct PagedStep::Scratch {
  std::vector<Seq*> seqs;        // claimed, per chunk
  std::vector<int64_t> lengths;  // before the call, per chunk
  std::vector<int64_t> sorted;   // ids, for the distinctness check
  std::vector<int64_t> offsets;  // first token of each chunk
  // Tree chunks: each packed token's depth (0 for chain chunks' tokens: unused there), and the
  // visibility bits of each tree chunk (built by attend), from tree_at[i].
  std::vector<int32_t> depth;
  std::vector<uint64_t> tree;
  std::vector<size_t> tree_at;
  exec::Problem problem;
};

namespace {
PagedStep::Scratch& step_scratch() {
  thread_local PagedStep::Scratch s;
  return s;
}
}  // namespace

PagedStep::PagedStep(const char* who, PagedKVCache& cache, std::span<const SequenceChunk> chunks, int64_t tokens)
    : who_(who), cache_(cache), chunks_(chunks), scratch_(step_scratch()) {
  PagedKVCache::Impl& c = *cache.impl_;
  Scratch& s = scratch_;
  s.seqs.clear();
  s.lengths.clear();
  s.offsets.clear();
  s.sorted.clear();
  s.depth.clear();
  int64_t total = 0;
  for (const SequenceChunk& ch : chunks) {
    if (ch.tokens < 0) Impl::fail(who, "chunk of sequence " + str(ch.seq) + " has " + str(ch.tokens) + " tokens");
    if (!ch.parents.empty()) {
      if (static_cast<int64_t>(ch.parents.size()) != ch.tokens)
        Impl::fail(who, "chunk of sequence " + str(ch.seq) + " has " + str(ch.tokens) + " tokens but " +
                            str(static_cast<int64_t>(ch.parents.size())) + " parents");
      for (int64_t t = 0; t < ch.tokens; ++t) {
        const int32_t p = ch.parents[static_cast<size_t>(t)];
        if (p < -1 || p >= t)
          Impl::fail(who, "chunk of sequence " + str(ch.seq) + ": parents[" + str(t) + "] = " + str(p) +
                              " is not an earlier index of the chunk or -1 (the parents must form a forest in " +
                              "token order)");
      }
    }
    s.offsets.push_back(total);
    total += ch.tokens;
    s.sorted.push_back(ch.seq);
  }
  s.depth.resize(static_cast<size_t>(total));
  for (size_t i = 0; i < chunks.size(); ++i)
    for (int64_t t = 0; t < chunks[i].tokens; ++t) {
      const int32_t p = chunks[i].parents.empty() ? -2 : chunks[i].parents[static_cast<size_t>(t)];
      s.depth[static_cast<size_t>(s.offsets[i] + t)] = p == -2 ? static_cast<int32_t>(t)
                                                       : p < 0 ? 0
                                                               : s.depth[static_cast<size_t>(s.offsets[i] + p)] + 1;
    }
  if (total != tokens)
    Impl::fail(who, "the chunks hold " + str(total) + " tokens but the tensors " + str(tokens) + " (T must be " +
                        "the sum of the chunks' tokens)");
  std::sort(s.sorted.begin(), s.sorted.end());
  for (size_t i = 1; i < s.sorted.size(); ++i)
    if (s.sorted[i] == s.sorted[i - 1]) Impl::fail(who, "sequence id " + str(s.sorted[i]) + " appears twice");
  try {
    for (const SequenceChunk& ch : chunks) {
      Seq& q = c.claim(who, ch.seq);
      s.seqs.push_back(&q);
      ++claimed_;
      s.lengths.push_back(q.length);
      if (q.length + ch.tokens >= kMaxTokens)
        Impl::fail(who, "sequence " + str(ch.seq) + " would hold " + str(q.length + ch.tokens) +
                            " tokens; the limit is 2^24 - 1");
    }
  } catch (...) {
    for (size_t i = 0; i < claimed_; ++i) s.seqs[i]->busy.store(false);
    throw;
  }
}

PagedStep::~PagedStep() {
  for (size_t i = 0; i < claimed_; ++i) scratch_.seqs[i]->busy.store(false);
}

int64_t PagedStep::length_before(size_t i) const { return scratch_.lengths[i]; }

int64_t PagedStep::position(size_t i, int64_t t) const {
  return scratch_.lengths[i] + scratch_.depth[static_cast<size_t>(scratch_.offsets[i] + t)];
}

void PagedStep::add_needs(const kernels::KernelTable& table, int64_t q_heads, int threads, Needs& needs) {
  const PagedKVCacheConfig& cfg = cache_.config();
  exec::Problem& p = scratch_.problem;
  p.q_heads = q_heads;
  p.kv_heads = cfg.kv_heads;
  p.head_dim = cfg.head_dim;
  p.value_dim = cache_.impl_->config.value_dim;
  p.kv_type = cache_.impl_->store.kv_type();  // (the plans depend on it: an i8 cache's ranges are longer)
  p.plan_each_entry = true;
  p.entries.resize(chunks_.size());
  for (size_t i = 0; i < chunks_.size(); ++i) {
    exec::BatchEntry& e = p.entries[i];
    e = exec::BatchEntry{};
    e.num_queries = chunks_[i].tokens;
    e.num_keys = e.valid_keys = scratch_.lengths[i] + chunks_[i].tokens;
  }
  exec::add_attention_needs(table, p, threads, needs);
}

void PagedStep::take_blocks() {
  PagedKVCache::Impl& c = *cache_.impl_;
  Scratch& s = scratch_;
  const size_t n = chunks_.size();
  {
    std::lock_guard<std::mutex> lock(c.pool_mutex);
    // Block tables grow first (this may allocate, and changes nothing visible).
    for (size_t i = 0; i < n; ++i)
      s.seqs[i]->blocks.reserve(static_cast<size_t>(c.blocks_for(s.lengths[i] + chunks_[i].tokens)));
    int64_t need = 0;
    for (size_t i = 0; i < n; ++i) need += c.needed(*s.seqs[i], chunks_[i].tokens);
    const int64_t have = static_cast<int64_t>(c.free.size());
    if (need > have)
      Impl::fail(who_,
                 "the pool has " + str(have) + " free blocks of " + str(c.config.num_blocks) + "; this call needs " +
                     str(need) + " (" + str(need - have) + " missing)",
                 ErrorCode::capacity, need - have);
    for (size_t i = 0; i < n; ++i) c.grow(*s.seqs[i], chunks_[i].tokens);
  }
}

void PagedStep::store_head(size_t i, int64_t h, const TensorView& k, const TensorView& v) {
  // Every block written here is owned by its sequence alone (take_blocks).
  PagedKVCache::Impl& c = *cache_.impl_;
  const Scratch& s = scratch_;
  const int64_t bt = c.bt();
  const Seq& q = *s.seqs[i];
  const int64_t first = s.offsets[i];
  for (int64_t t = 0; t < chunks_[i].tokens;) {
    const int64_t pos = s.lengths[i] + t;
    const int64_t count = std::min(chunks_[i].tokens - t, bt - pos % bt);
    const int64_t tok = first + t;
    c.store.store(q.blocks[static_cast<size_t>(pos / bt)], h, pos % bt, count, element_at(k, 0, h, tok), k.stride(2),
                  element_at(v, 0, h, tok), v.stride(2), elem_type(k.dtype()));
    t += count;
  }
}

void PagedStep::set_lengths() {
  for (size_t i = 0; i < chunks_.size(); ++i) scratch_.seqs[i]->length = scratch_.lengths[i] + chunks_[i].tokens;
}

void PagedStep::store(const TensorView& k, const TensorView& v, int threads) {
  const int64_t heads = cache_.config().kv_heads;
  auto store_item = [&](int64_t item, int) { store_head(static_cast<size_t>(item / heads), item % heads, k, v); };
  parallel::parallel_for(static_cast<int64_t>(chunks_.size()) * heads, threads, store_item);
  set_lengths();
}

namespace {
struct PendingStore {  // exec::Problem::store's context for PagedStep::attend
  PagedStep* step;
  const TensorView *k, *v;
};
}  // namespace

void PagedStep::store_entry(const void* ctx, size_t i, int64_t h) {
  const PendingStore& p = *static_cast<const PendingStore*>(ctx);
  p.step->store_head(i, h, *p.k, *p.v);
}

void PagedStep::attend(const TensorView& q, const TensorView& o, float scale, const AttentionCall& call,
                       const kernels::KernelTable& table, const Lease& lease, const TensorView* k_new,
                       const TensorView* v_new) {
  PagedKVCache::Impl& c = *cache_.impl_;
  Scratch& s = scratch_;
  exec::Problem& p = s.problem;  // shapes from add_needs
  p.q_head_stride = q.stride(1);
  p.q_row_stride = q.stride(2);
  p.o_head_stride = o.stride(1);
  p.o_row_stride = o.stride(2);
  p.kv_type = c.store.kv_type();
  p.q_type = elem_type(q.dtype());
  p.o_type = elem_type(o.dtype());
  p.k_blocked = true;
  const int64_t rows = c.store.head_tokens();
  p.k_head_stride = rows * c.config.head_dim;
  p.v_head_stride = rows * c.config.value_dim;
  p.k_row_stride = c.config.head_dim;
  p.v_row_stride = c.config.value_dim;
  p.page_tokens = c.bt();
  p.page_stride = c.store.page_step_tokens();
  p.scale_head_stride = rows;
  p.causal = true;
  p.window = call.window;
  p.scale = scale;
  set_score_terms(call, p);
  // Tree chunks: row t's bits are its parent's plus itself, less the ancestors outside the window
  // (depth distance ≥ window).
  s.tree_at.assign(chunks_.size(), 0);
  size_t words_total = 0;
  for (size_t i = 0; i < chunks_.size(); ++i)
    if (!chunks_[i].parents.empty()) {
      s.tree_at[i] = words_total;
      words_total += static_cast<size_t>(chunks_[i].tokens * ((chunks_[i].tokens + 63) / 64));
    }
  s.tree.assign(words_total, 0);
  for (size_t i = 0; i < chunks_.size(); ++i) {
    const SequenceChunk& ch = chunks_[i];
    if (ch.parents.empty()) continue;
    const int64_t words = (ch.tokens + 63) / 64;
    uint64_t* bits = s.tree.data() + s.tree_at[i];
    const int32_t* depth = s.depth.data() + s.offsets[i];
    for (int64_t t = 0; t < ch.tokens; ++t) {
      uint64_t* row = bits + t * words;
      const int32_t parent = ch.parents[static_cast<size_t>(t)];
      if (parent >= 0) std::copy(bits + parent * words, bits + (parent + 1) * words, row);
      row[t / 64] |= uint64_t{1} << (t % 64);
    }
    if (call.window > 0)
      for (int64_t t = 0; t < ch.tokens; ++t)
        for (int64_t c = 0; c < t; ++c)
          if (depth[t] - depth[c] >= call.window) bits[t * words + c / 64] &= ~(uint64_t{1} << (c % 64));
  }
  for (size_t i = 0; i < chunks_.size(); ++i) {
    exec::BatchEntry& e = p.entries[i];
    if (!chunks_[i].parents.empty()) {
      e.tree = s.tree.data() + s.tree_at[i];
      e.tree_words = (chunks_[i].tokens + 63) / 64;
      e.tree_depth = s.depth.data() + s.offsets[i];
    } else {
      e.tree = nullptr;
      e.tree_words = 0;
      e.tree_depth = nullptr;
    }
    e.q = element_at(q, 0, 0, s.offsets[i]);
    e.o = mutable_element_at(o, 0, 0, s.offsets[i]);
    e.k = c.store.keys(0);
    e.v = c.store.values(0);
    e.k_scale = c.store.key_scales(0);
    e.v_scale = c.store.value_scales(0);
    e.pages = s.seqs[i]->blocks.data();
    e.new_keys = k_new ? chunks_[i].tokens : 0;
  }
  const PendingStore pending{this, k_new, v_new};
  p.store = k_new ? store_entry : nullptr;
  p.store_ctx = &pending;
  if (k_new) set_lengths();  // (nothing reads them during the call; nothing throws after take_blocks)
  exec::run_attention(p, table, lease);
}

}  // namespace detail

void paged_attention(const TensorView& q, const TensorView& k_new, const TensorView& v_new, PagedKVCache& cache,
                     std::span<const SequenceChunk> chunks, const TensorView& o, const SdpaOptions& opt) {
  detail::AttentionCall call = detail::call_from_options("paged_attention", q, k_new, v_new, o, opt);
  call.causal = true;  // implied; kv_lens and bias are rejected by the validator
  call.paged = &cache;
  call.chunks = chunks;
  const detail::Checked checked = detail::validate(call);
  detail::PagedStep step(call.who, cache, chunks, checked.Nq);
  const kernels::KernelTable& table = detail::kernel_table(opt.isa, opt.fpmath);
  detail::Lease lease(opt.context, opt.num_threads);
  detail::Needs needs;
  step.add_needs(table, checked.Hq, lease.threads(), needs);
  lease.reserve(needs, call.who);
  step.take_blocks();
  step.attend(q, o, checked.scale, call, table, lease, &k_new, &v_new);
}

}  // namespace attend
