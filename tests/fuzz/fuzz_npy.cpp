// libFuzzer target: the .npy reader on arbitrary bytes, and the writer on what it accepted (a
// parsed array must round-trip exactly).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "io/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto a = attend::io::parse_npy(std::vector<unsigned char>(data, data + size), "fuzz");
    const auto again = attend::io::parse_npy(attend::io::npy_bytes(a), "fuzz-roundtrip");
    if (again.shape != a.shape || again.data.size() != a.data.size() ||
        (!a.data.empty() && std::memcmp(again.data.data(), a.data.data(), a.data.size() * 4) != 0))
      __builtin_trap();
  } catch (const attend::io::IoError&) {
  }
  return 0;
}
