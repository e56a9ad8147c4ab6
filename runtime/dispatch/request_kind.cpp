#include "request_kind.hpp"

#include <algorithm>

namespace attend::dispatch {

RequestKindChooser::Slot& RequestKindChooser::slot(const RequestKey& key) {
  for (Slot& s : slots_) {
    if (!s.used) {
      s.used = true;
      s.key = key;
      return s;
    }
    if (s.key == key) return s;
  }
  return slots_[kKeys - 1];  // (more kinds of call than slots: the rest share the last)
}

const RequestKindChooser::Slot* RequestKindChooser::find(const RequestKey& key) const {
  for (const Slot& s : slots_) {
    if (!s.used) return nullptr;
    if (s.key == key) return &s;
  }
  return &slots_[kKeys - 1];
}

RequestKindChooser::Choice RequestKindChooser::choose(const RequestKey& key) {
  const std::lock_guard<std::mutex> lock(mutex_);
  Slot& s = slot(key);
  if (s.best >= 0 && s.left > 0) {
    --s.left;
    return {static_cast<RequestKind>(s.best), false};
  }
  s.best = -1;
  // A pair: page starts, then whole lines.
  return {s.have_pages ? RequestKind::whole_lines : RequestKind::page_starts, true};
}

void RequestKindChooser::record(const RequestKey& key, RequestKind kind, double seconds_per_byte) {
  const std::lock_guard<std::mutex> lock(mutex_);
  Slot& s = slot(key);
  if (s.best >= 0) return;
  if (kind == RequestKind::page_starts) {
    s.pages = seconds_per_byte;
    s.have_pages = true;
    return;
  }
  if (!s.have_pages) return;
  s.have_pages = false;
  s.ratio[s.n++] = s.pages > 0.0 ? seconds_per_byte / s.pages : 1.0;
  if (s.n < kSamples) return;
  double r[kSamples];
  std::copy(s.ratio, s.ratio + kSamples, r);
  std::nth_element(r, r + kSamples / 2, r + kSamples);
  s.best = r[kSamples / 2] < 1.0 ? 1 : 0;
  s.left = kExploit;
  s.n = 0;
}

int RequestKindChooser::exploiting(const RequestKey& key) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  const Slot* s = find(key);
  return s && s->left > 0 ? s->best : -1;
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
