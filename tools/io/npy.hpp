// .npy files (NumPy's format): f32, little-endian, C order — what attend-run reads and writes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io_error.hpp"

namespace attend::io {

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

/// Parses an .npy image. Accepts format versions 1–3, dtype '<f4' (or '|f4'), fortran_order False;
/// the data must be exactly shape's element count. `name` appears in error messages.
NpyArray parse_npy(const std::vector<unsigned char>& bytes, const std::string& name);
NpyArray load_npy(const std::string& path);

/// A version 1.0 .npy image of `a` (header padded to 64 bytes, as NumPy writes it).
std::vector<unsigned char> npy_bytes(const NpyArray& a);

/// Writes `bytes` to `path` atomically: to a temporary file beside it, then renamed, so a failed
/// run never leaves a partial file.
void write_file_atomic(const std::string& path, const std::vector<unsigned char>& bytes);

}  // namespace attend::io
