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

/// What a decode call's kind is chosen for: calls that differ in any of these do different work
/// per byte (a group of 8 rows computes twice a group of 4's per key, a head_dim of 96 puts rows
/// across lines, score terms add work per key), so each has its own choice. Keys compare equal
/// member by member.
struct RequestKey {
  kernels::KvType type = kernels::KvType::f32;
  int group_rows = 1;  // query rows per kv head a work item scores (1: one row, MHA decode)
  bool k_blocked = false;
  int64_t head_dim = 0;
  bool score_terms = false;  // softcap, ALiBi, sinks or a bias
  bool operator==(const RequestKey&) const = default;
};

/// Picks, per key (RequestKey), the request kind whose decode calls took the least time per byte:
/// it alternates the two kinds over kSamples pairs of timed calls (an exploration; page starts
/// first, then whole lines), then runs the faster one for kExploit calls untimed, then explores
/// again, so a change of the machine's state is followed within a few hundred calls. The faster
/// kind is the one the median of the pairs' ratios (whole lines' time per byte over the page
/// starts' of the call before) favours: the two calls of a pair are nearly always the same work,
/// so calls over other context lengths of the key do not weigh on the choice. Calls that arrive
/// while a key exploits are not timed. Up to kKeys keys (later ones share the last slot).
/// Thread-safe (one mutex; concurrent calls on different caches each take a kind and report their
/// own time).
class RequestKindChooser {
 public:
  static constexpr int kKeys = 64;
  static constexpr int kSamples = 5;
  static constexpr int64_t kExploit = 500;

  /// The kind the next call over `key` takes, and whether it is timed (it explores).
  struct Choice {
    RequestKind kind;
    bool timed;
  };
  Choice choose(const RequestKey& key);
  /// A timed call's seconds per byte of K/V (ignored unless the key still explores, and a whole
  /// lines time with no page starts time before it).
  void record(const RequestKey& key, RequestKind kind, double seconds_per_byte);
  /// The kind the key's next call takes untimed, or -1 if it explores.
  int exploiting(const RequestKey& key) const;
  /// Every key back to its first exploration, and forgotten.
  void reset();

 private:
  struct Slot {
    RequestKey key;
    bool used = false;
    double pages = 0.0;  // a pair's page starts time, waiting for its whole lines time
    bool have_pages = false;
    double ratio[kSamples] = {};
    int n = 0;
    int best = -1;
    int64_t left = 0;
  };
  Slot& slot(const RequestKey& key);
  const Slot* find(const RequestKey& key) const;
  mutable std::mutex mutex_;
  Slot slots_[kKeys];
};

/// The process's chooser (decode calls consult it where decode_request_kind_adaptive says so).
RequestKindChooser& request_kind_chooser();

}  // namespace attend::dispatch
