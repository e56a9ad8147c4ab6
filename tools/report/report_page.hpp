// attend-report's page: one self-contained HTML file (inline CSS and SVG, no scripts, no network)
// from one or more attend-bench JSON runs.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "bench_results.hpp"
#include "svg_chart.hpp"

namespace attend::report {

/// The charts of the page, by file name ("headline-<label>.svg", "speedup-<label>.svg", "roofline-<label>.svg",
/// "decode-bandwidth-<label>.svg", "decode-share-<label>.svg", and with several runs "across-machines.svg" and
/// "across-machines-share.svg"), for --svg-dir.
std::map<std::string, std::string> report_charts(const std::vector<BenchRun>& runs);

/// The speed-up chart of one run: attend's entries against their oneDNN baselines, per shape (the
/// score-term, MLA and split-timing variants stay in the tables); headline_only: the main path of
/// each group (sdpa/attend, sdpa/attend-bf16math, cache/attend-f32|bf16|i8, layer/attend,
/// serve/paged-f32).
BarChart speedup_chart(const BenchRun& run, bool headline_only);
/// The roofline of one run: every entry with FLOP and byte counters, under the FMA (and bf16) peak
/// and the plain-read bandwidth.
Roofline roofline_of(const BenchRun& run);
/// Decode bandwidth per core (GB/s per thread) of the decode-shaped entries, with the plain read's.
BarChart decode_bandwidth_chart(const BenchRun& run);
/// The paired decode shares of one run: each entry with a stream_pct counter (its time against a
/// plain read of the same bytes, timed right after each call), in % with the read at 100.
BarChart decode_share_chart(const BenchRun& run);
/// Several runs: the speed-up over oneDNN of each main entry, one bar per run.
BarChart across_machines_chart(const std::vector<BenchRun>& runs);
/// Several runs: the paired decode share of each entry two or more runs have, one bar per run.
BarChart across_machines_share_chart(const std::vector<BenchRun>& runs);

std::string report_html(const std::vector<BenchRun>& runs, const std::string& title);

}  // namespace attend::report
