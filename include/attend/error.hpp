// attend::Error — the one exception type the library throws for invalid arguments and
// unsupported requests. Every entry point validates before it writes anything, so when an
// Error is thrown the caller's output buffers are exactly as they were.
#pragma once

#include <attend/export.hpp>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace attend {

/// Why a call was rejected.
enum class ErrorCode {
  invalid_argument,  ///< a shape, stride, pointer or option is inconsistent or out of range
  unsupported,       ///< the request is valid but this build or CPU cannot serve it (e.g. a forced ISA)
  capacity,          ///< a bound was reached: a KV cache sequence's capacity, a paged cache's pool
                     ///< (Error::blocks_missing), a context's workspace limit
  concurrent_use,    ///< an object another thread is modifying was used at the same time (e.g. a KVCache)
};

/// Thrown by every attend entry point on invalid input. `what()` names the argument and the
/// shapes involved, e.g. "sdpa: k shape [1,8,64,32] does not match q head dim 64".
class ATTEND_API Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message, int64_t blocks_missing = 0)
      : std::runtime_error(message), code_(code), blocks_missing_(blocks_missing) {}
  ErrorCode code() const noexcept { return code_; }
  /// With ErrorCode::capacity from a PagedKVCache whose pool ran out: how many more free blocks the
  /// call needed (a scheduler frees or defers that much and retries). 0 for every other error.
  int64_t blocks_missing() const noexcept { return blocks_missing_; }

 private:
  ErrorCode code_;
  int64_t blocks_missing_ = 0;
};

}  // namespace attend
