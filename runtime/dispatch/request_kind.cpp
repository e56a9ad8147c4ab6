#include "request_kind.hpp"

#include <algorithm>

namespace attend::dispatch {
namespace {

double median(const double* t, int n) {
  double v[RequestKindChooser::kSamples];
  std::copy(t, t + n, v);
  std::sort(v, v + n);
  return v[n / 2];
}

}  // namespace

RequestKindChooser::Choice RequestKindChooser::choose(int key) {
  const std::lock_guard<std::mutex> lock(mutex_);
  Slot& s = slots_[key];
  if (s.best >= 0 && s.left > 0) {
    --s.left;
    return {static_cast<RequestKind>(s.best), false};
  }
  s.best = -1;
  // Alternate: the kind with fewer samples (page starts first).
  return {s.n[1] < s.n[0] ? RequestKind::whole_lines : RequestKind::page_starts, true};
}

void RequestKindChooser::record(int key, RequestKind kind, double seconds_per_byte) {
  const std::lock_guard<std::mutex> lock(mutex_);
  Slot& s = slots_[key];
  const int k = static_cast<int>(kind);
  if (s.best >= 0 || s.n[k] >= kSamples) return;
  s.t[k][s.n[k]++] = seconds_per_byte;
  if (s.n[0] < kSamples || s.n[1] < kSamples) return;
  s.best = median(s.t[1], kSamples) < median(s.t[0], kSamples) ? 1 : 0;
  s.left = kExploit;
  s.n[0] = s.n[1] = 0;
}

int RequestKindChooser::exploiting(int key) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  const Slot& s = slots_[key];
  return s.left > 0 ? s.best : -1;
}

void RequestKindChooser::reset() {
  const std::lock_guard<std::mutex> lock(mutex_);
  for (Slot& s : slots_) s = Slot{};
}

RequestKindChooser& request_kind_chooser() {
  static RequestKindChooser chooser;
  return chooser;
}

}  // namespace attend::dispatch
