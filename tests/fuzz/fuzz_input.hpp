// The fuzz targets' reader of bounded values from libFuzzer's bytes (zeros once they run out).
#pragma once

#include <cstddef>
#include <cstdint>

namespace attend::fuzz {

struct Input {
  const uint8_t* p;
  size_t n;
  uint8_t byte() {
    if (!n) return 0;
    --n;
    return *p++;
  }
  int64_t range(int64_t lo, int64_t hi) { return lo + byte() % (hi - lo + 1); }
  bool flag() { return byte() & 1; }
};

}  // namespace attend::fuzz
