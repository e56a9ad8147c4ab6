// Pure functions that split attention work. They depend on the problem shape only — never on the
// thread count — which is what makes results bitwise identical for any number of threads.
#pragma once

#include <cstdint>

namespace attend::parallel {

struct KeySplit {
  int64_t count;  // number of key ranges
  int64_t keys;   // keys per range (the last may be shorter)
};

/// Split-K for decode-shaped work (all rows of a kv head fit in one block), given `pairs` =
/// batch × kv heads work items before splitting: just enough ranges for about `target_items`
/// items in all, each of at least `min_keys` keys, at most `max_splits` ranges, each a multiple
/// of `align` keys. Fewer, longer ranges stream better (each range restarts its K and V streams
/// and adds a merge); see kDecodeTargetItems. Prefill-shaped work (several row blocks) already
/// has parallelism and is not split.
constexpr KeySplit split_keys(int64_t num_keys, int64_t row_blocks, int64_t pairs, int64_t target_items,
                              int64_t min_keys = 512, int64_t max_splits = 16, int64_t align = 256) {
  if (row_blocks != 1 || num_keys < 2 * min_keys) return {1, num_keys};
  const int64_t have = pairs > 0 ? pairs : 1;
  int64_t n = (target_items + have - 1) / have;  // ranges per pair for about target_items in all
  if (n > num_keys / min_keys) n = num_keys / min_keys;
  if (n > max_splits) n = max_splits;
  if (n <= 1) return {1, num_keys};
  int64_t keys = (num_keys + n - 1) / n;
  keys = (keys + align - 1) / align * align;
  return {(num_keys + keys - 1) / keys, keys};
}

/// Number of row blocks for `rows` stacked query rows in blocks of `block_rows`.
constexpr int64_t row_blocks(int64_t rows, int64_t block_rows) { return (rows + block_rows - 1) / block_rows; }

}  // namespace attend::parallel
