#include "progress.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <regex>
#include <unordered_map>
#include <vector>

namespace attend::bench {

namespace {

struct Registered {
  std::string full_name;  // as the filter sees it: name[/iterations:N]/manual_time
  bool explicit_iterations;
};

struct State {
  std::vector<Registered> entries;
  bool on = false;
  size_t total = 0, done = 0;
  int repetitions = 1;
  double min_time = 0.5;
  std::vector<bool> sized;  // an entry's first run happened (its iteration count is known)
  std::chrono::steady_clock::time_point start, last_print;
  double call_seconds = 0;  // timed work of the call in progress
};
State& st() {
  static State s;
  return s;
}

std::string clock_text(double s) {
  const long t = static_cast<long>(s + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

void print_line(bool force) {
  State& s = st();
  const auto now = std::chrono::steady_clock::now();
  if (!force && now - s.last_print < std::chrono::milliseconds(250)) return;
  s.last_print = now;
  const double elapsed = std::chrono::duration<double>(now - s.start).count();
  const size_t entries = s.total / static_cast<size_t>(s.repetitions);
  const size_t entry = std::min(entries, s.done / static_cast<size_t>(s.repetitions) + 1);
  std::string left = "estimating";
  if (s.done > 0) left = "~" + clock_text(elapsed * static_cast<double>(s.total - std::min(s.done, s.total)) / s.done);
  std::fprintf(stderr, "\r\033[Kattend-bench: run %zu/%zu (entry %zu of %zu), %s elapsed, %s left", s.done, s.total,
               entry, entries, clock_text(elapsed).c_str(), left.c_str());
  std::fflush(stderr);
}

void call_finished(size_t id, const benchmark::State& state) {
  State& s = st();
  if (!s.on) return;
  // A run: every call after an entry's first run, a call with timed work of at least min_time (what
  // ends the library's sizing), a fixed iteration count, or an error.
  const bool run = s.sized[id] || s.entries[id].explicit_iterations || s.call_seconds >= s.min_time ||
                   state.error_occurred() || state.iterations() >= 1000000000;
  if (!run) return;
  s.sized[id] = true;
  if (s.done < s.total) ++s.done;
  print_line(false);
}

}  // namespace

benchmark::internal::Benchmark* register_entry(const std::string& name, std::function<void(benchmark::State&)> fn,
                                               int64_t iterations) {
  State& s = st();
  const size_t id = s.entries.size();
  s.entries.push_back(
      {name + (iterations > 0 ? "/iterations:" + std::to_string(iterations) : "") + "/manual_time", iterations > 0});
  auto* b = benchmark::RegisterBenchmark(name.c_str(), [fn = std::move(fn), id](benchmark::State& state) {
    st().call_seconds = 0;
    fn(state);
    call_finished(id, state);
  });
  b->UseManualTime()->Unit(benchmark::kMillisecond);
  if (iterations > 0) b->Iterations(iterations);
  return b;
}

void set_iteration_time(benchmark::State& state, double seconds) {
  st().call_seconds += seconds;
  state.SetIterationTime(seconds);
}

void start_progress(bool enabled, int repetitions, double min_time_seconds) {
  State& s = st();
  s.on = enabled && isatty(STDERR_FILENO);
  if (!s.on) return;
  s.repetitions = std::max(1, repetitions);
  s.min_time = min_time_seconds;
  // The library's filter semantics: empty or "all" selects everything, a leading '-' negates.
  std::string spec = benchmark::GetBenchmarkFilter();
  bool negate = false;
  if (spec.empty() || spec == "all") spec = ".";
  if (spec[0] == '-') {
    negate = true;
    spec = spec.substr(1);
  }
  size_t selected = 0;
  try {
    const std::regex re(spec, std::regex::extended);
    for (const Registered& e : s.entries) selected += std::regex_search(e.full_name, re) != negate;
  } catch (const std::regex_error&) {
    selected = s.entries.size();  // a filter std::regex does not take: count everything (a rough line)
  }
  s.total = selected * static_cast<size_t>(s.repetitions);
  s.sized.assign(s.entries.size(), false);
  s.start = s.last_print = std::chrono::steady_clock::now();
  print_line(true);
}

void hide_progress() {
  if (!st().on) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
}

void show_progress() {
  if (st().on) print_line(true);
}

void finish_progress() {
  State& s = st();
  if (!s.on) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  s.on = false;
}

}  // namespace attend::bench
