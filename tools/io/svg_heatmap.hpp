// A standalone SVG heat map of an attention matrix (queries × keys) with axis ticks and a colour
// scale.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attend::io {

/// How weights map to colours.
enum class MapScale {
  linear,   ///< 0 … the largest weight
  clipped,  ///< 0 … the 99th percentile of the non-zero weights; larger ones saturate
  log,      ///< log10 over four decades below the largest weight; zeros (masked keys) drawn grey
};

/// `weights` is rows × cols (row-major). Matrices larger than `max_cells` per side are averaged
/// down block-wise (never refused). Axis ticks fall on round token indices (1, 2 or 5 × 10^k
/// apart). Returns the SVG text.
std::string attention_svg(const std::vector<float>& weights, int64_t rows, int64_t cols, const std::string& title,
                          int64_t max_cells = 256, MapScale scale = MapScale::linear);

/// The round step (1, 2 or 5 × 10^k) that puts about `target` ticks on an axis of `n` positions.
int64_t round_tick_step(int64_t n, int target = 6);

}  // namespace attend::io
