// A standalone SVG heat map of an attention matrix (queries × keys) with axis ticks and a colour
// scale.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attend::io {

/// `weights` is rows × cols (row-major). Matrices larger than `max_cells` per side are averaged
/// down block-wise (never refused). Returns the SVG text.
std::string attention_svg(const std::vector<float>& weights, int64_t rows, int64_t cols, const std::string& title,
                          int64_t max_cells = 256);

}  // namespace attend::io
