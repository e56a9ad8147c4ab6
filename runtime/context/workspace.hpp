// How a call takes its memory and threads from an attend::Context (runtime-internal).
//
// A call constructs one Lease (which counts it as in flight and fixes its thread count), computes
// everything it will need, reserves it in one step (the byte limit is checked there, before the
// call reads or writes anything), and gets its buffers; the destructor hands the workspace back for
// the next call. One lease per public call: a layer call that also runs attention shares its lease.
#pragma once

#include <attend/context.hpp>
#include <cstddef>

#include "internal_api.hpp"

namespace attend::detail {

/// The workspace's buffers, each 64-byte aligned and grown (never shrunk) as calls need.
enum class Slot : int {
  tile_scratch,    // kernel scratch, one stride per thread
  split_partials,  // split-K partial states
  projection,      // the layer's Q/K/V projection rows
  attention_out,   // the layer's attention output rows (input of W_O)
  gemm_scratch,    // oneDNN scratchpad (+ bf16 copy of the GEMM input)
  packed_kv,       // bf16 math: per thread, a kv head's K/V packed for the wide driver's row blocks
};
constexpr int kSlots = 6;

/// Floats a call needs in each slot.
struct Needs {
  size_t floats[kSlots] = {};
  size_t& operator[](Slot s) { return floats[static_cast<int>(s)]; }
};

class ATTEND_INTERNAL Lease {
 public:
  /// `context` null = Context::default_context(); `requested_threads` > 0 overrides the context's
  /// thread count (0 = the context's).
  Lease(Context* context, int requested_threads);
  ~Lease();
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;

  /// Threads this call uses (≥ 1).
  int threads() const { return threads_; }
  /// Makes every slot hold at least `needs`. Throws attend::Error (ErrorCode::capacity, message
  /// prefixed with `who`) if the context's byte limit does not allow it; then nothing is allocated.
  void reserve(const Needs& needs, const char* who);
  /// A slot's buffer (valid after reserve; null if it needed nothing).
  float* get(Slot slot) const;

  struct Workspace;  // a set of slot buffers (context.cpp)

 private:
  Context& context_;
  int threads_ = 1;
  Workspace* workspace_ = nullptr;
  unsigned long generation_ = 0;
};

/// Bytes `needs` takes once allocated (each slot rounded up to whole pages).
ATTEND_INTERNAL size_t bytes_of(const Needs& needs);

}  // namespace attend::detail
