// Reader for the .safetensors format (PyTorch / Hugging Face): an 8-byte little-endian header
// length, a JSON header {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": …},
// then the raw tensor bytes (offsets relative to the end of the header).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io_error.hpp"

namespace attend::io {

enum class StDtype { f32, bf16, f16 };

struct StTensor {
  StDtype dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data section
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

/// A parsed file held in memory. Every structural rule is checked at parse time: header length
/// within the file, valid JSON object, known dtypes (F32, BF16, F16; others are rejected by name),
/// shapes of non-negative integers, offsets as non-negative integers within the data section whose
/// length matches dtype × shape, and no two tensors overlapping.
class SafeTensors {
 public:
  /// Parses `bytes`; `name` (the file name) is used in error messages.
  static SafeTensors parse(std::vector<unsigned char> bytes, const std::string& name);
  /// Reads and parses a file.
  static SafeTensors load(const std::string& path);

  bool contains(const std::string& tensor) const { return tensors_.count(tensor) != 0; }
  const StTensor& info(const std::string& tensor) const;
  /// The tensor converted to f32 (row-major). Throws IoError naming file and tensor if missing.
  std::vector<float> read_f32(const std::string& tensor) const;
  const std::map<std::string, StTensor>& tensors() const { return tensors_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::vector<unsigned char> bytes_;
  uint64_t data_start_ = 0;
  std::map<std::string, StTensor> tensors_;
};

/// Serialises f32 tensors (for tests and tools): name → (shape, data).
std::vector<unsigned char> write_safetensors_f32(
    const std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>>& tensors);

}  // namespace attend::io
