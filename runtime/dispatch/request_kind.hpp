// Decode's L2 request kind (page starts or whole lines) chosen at run time from the calls' own
// times, on the class whose faster kind follows the memory's state (the model-167 AMX Xeon:
// page starts 3–10 points of a read ahead in session 55's state, whole lines 5–12 ahead in
// sessions 58–59's; docs/performance.md, "Session 59"). Either kind computes the same bits: they
// differ only in prefetches.
#pragma once

#include <cstdint>
#include <mutex>

#include "../kernels/kernel_table.hpp"

namespace attend::dispatch {

/// The two request kinds a RequestKindChooser picks between.
enum class RequestKind : int { page_starts = 0, whole_lines = 1 };

/// Picks, per key (storage type, GQA group or one row, blocked K), the request kind whose decode
/// calls took the least time per byte: it alternates the two kinds over kSamples timed calls each
/// (an exploration), then runs the faster one (the lower median) for kExploit calls, then explores
/// again, so a change of the machine's state is followed within a few thousand calls. Calls that
/// arrive while a key exploits are not timed. Thread-safe (one mutex; concurrent calls on
/// different caches each take a kind and report their own time).
class RequestKindChooser {
 public:
  static constexpr int kKeys = 16;
  static constexpr int kSamples = 5;
  static constexpr int64_t kExploit = 2000;

  /// The kind the next call over `key` takes, and whether it is timed (it explores).
  struct Choice {
    RequestKind kind;
    bool timed;
  };
  Choice choose(int key);
  /// A timed call's seconds per byte of K/V (ignored unless the key still explores).
  void record(int key, RequestKind kind, double seconds_per_byte);
  /// The kind the key's next call takes untimed, or -1 if it explores.
  int exploiting(int key) const;
  /// Every key back to its first exploration.
  void reset();

 private:
  struct Slot {
    double t[2][kSamples] = {};
    int n[2] = {0, 0};
    int best = -1;
    int64_t left = 0;
  };
  mutable std::mutex mutex_;
  Slot slots_[kKeys];
};

/// The key of decode items over K/V of `type` (RequestKindChooser).
constexpr int request_key(kernels::KvType type, bool gqa, bool k_blocked) {
  return static_cast<int>(type) * 4 + (gqa ? 2 : 0) + (k_blocked ? 1 : 0);
}

/// The process's chooser (decode calls consult it where decode_request_kind_adaptive says so).
RequestKindChooser& request_kind_chooser();

}  // namespace attend::dispatch
