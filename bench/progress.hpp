// attend-bench's progress line on stderr: run i of n (each repetition of each entry), the entry
// that makes, the elapsed time and a rough remaining time. Every entry is registered through
// register_entry and times itself through set_iteration_time, which is how a run is counted: the
// benchmark library calls an entry a few extra times on its first repetition to size the iteration
// count, and those calls (shorter than --benchmark_min_time of timed work) are not runs.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <functional>
#include <string>

namespace attend::bench {

/// Registers `name` (timed manually, reported in milliseconds; `iterations` > 0 fixes the
/// iteration count) and counts it for the progress line.
benchmark::internal::Benchmark* register_entry(const std::string& name, std::function<void(benchmark::State&)> fn,
                                               int64_t iterations = 0);

/// state.SetIterationTime, counted for the progress line.
void set_iteration_time(benchmark::State& state, double seconds);

/// Turns the line on (call after benchmark::Initialize, before RunSpecifiedBenchmarks): entries
/// are those the filter selects, `repetitions` runs each. Shown only when `enabled` and stderr is a
/// terminal.
void start_progress(bool enabled, int repetitions, double min_time_seconds);
/// Clears the line (before the summaries are printed).
void finish_progress();
/// Around other output to the terminal (the console reporter's lines): clear the line, then
/// redraw it below that output.
void hide_progress();
void show_progress();

}  // namespace attend::bench
