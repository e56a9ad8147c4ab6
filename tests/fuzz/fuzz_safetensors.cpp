// libFuzzer target: the safetensors reader on arbitrary bytes. Every input must either parse (and
// then every tensor must read back) or throw IoError — never crash or read out of bounds.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto st = attend::io::SafeTensors::parse(std::vector<unsigned char>(data, data + size), "fuzz");
    for (const auto& [name, info] : st.tensors()) {
      const std::vector<float> v = st.read_f32(name);
      if (static_cast<int64_t>(v.size()) != info.numel()) __builtin_trap();
    }
  } catch (const attend::io::IoError&) {
  }
  return 0;
}
