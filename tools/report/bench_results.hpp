// attend-bench results as attend-report reads them: the JSON of `attend-bench
// --benchmark_format=json` (or --benchmark_out=F --benchmark_out_format=json), one file per machine
// or build.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace attend::report {

class ReportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One benchmark entry: "group/impl/shape" (serve entries have no shape: "-"), at its median over
/// the repetitions (the single run when the file has no aggregates).
struct BenchEntry {
  std::string name, group, impl, shape;
  double ms = 0;                           // real (manual) time per iteration, milliseconds
  double gflops = 0, gbps = 0;             // from the FLOPS and bytes_per_second counters (0: absent)
  std::map<std::string, double> counters;  // every counter
  /// FLOP per byte moved (0 when either counter is absent).
  double intensity() const { return gflops > 0 && gbps > 0 ? gflops / gbps : 0.0; }
};

/// One file: a machine (or build) and its entries, in file order.
struct BenchRun {
  std::string label;                           // the file name without directories and ".json"
  std::map<std::string, std::string> context;  // the bench context, values as strings
  std::vector<BenchEntry> entries;
  int threads = 0;              // the bench's thread count (context "threads", else num_cpus)
  double fma_peak_gflops = 0;   // the FMA probe (context), 0 if absent
  double bf16_peak_gflops = 0;  // the vdpbf16ps probe (context), 0 if absent
  double amx_peak_gflops = 0;   // the tdpbf16ps (AMX) probe (context, where fpmath=bf16 runs on AMX), 0 if absent
  double read_gbps = 0;         // plain-read bandwidth: the best stream/read/* entry, 0 if none

  const BenchEntry* find(const std::string& group, const std::string& impl, const std::string& shape) const;
  std::string context_value(const std::string& key) const;  // "" when absent
};

/// Parses the JSON text of one attend-bench run. Throws ReportError naming `label` for text that is
/// not benchmark JSON.
BenchRun parse_bench_json(const std::string& text, const std::string& label);
/// Reads and parses a file (label: its base name without ".json").
BenchRun load_bench_json(const std::string& path);

/// The oneDNN entry an attend entry is compared with: the same group and shape, impl "onednn-bf16"
/// for impls with bf16 arithmetic or tensors when the run has it, else "onednn" ("onednn-decode"
/// for a serving run's decode-only timings). Null when there is none (and for oneDNN entries
/// themselves). Entries are sorted by group (sdpa, cache, layer, serve, stream), shape, impl.
const BenchEntry* baseline_of(const BenchRun& run, const BenchEntry& e);

}  // namespace attend::report
