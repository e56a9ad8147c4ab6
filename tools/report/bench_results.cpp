#include "bench_results.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

namespace attend::report {

const BenchEntry* BenchRun::find(const std::string& group, const std::string& impl, const std::string& shape) const {
  for (const BenchEntry& e : entries)
    if (e.group == group && e.impl == impl && e.shape == shape) return &e;
  return nullptr;
}

std::string BenchRun::context_value(const std::string& key) const {
  auto it = context.find(key);
  return it == context.end() ? std::string() : it->second;
}

namespace {

double to_ms(double t, const std::string& unit) {
  if (unit == "ns") return t * 1e-6;
  if (unit == "us") return t * 1e-3;
  if (unit == "s") return t * 1e3;
  return t;  // ms
}

double number(const std::string& s) {
  try {
    size_t used = 0;
    const double v = std::stod(s, &used);
    return used ? v : 0.0;
  } catch (...) {
    return 0.0;
  }
}

// "sdpa/attend/P1/manual_time" → sdpa, attend, P1; "serve/paged-f32/iterations:3/manual_time" →
// serve, paged-f32, "-". Parts after the shape that Google Benchmark appends are dropped.
void split_name(const std::string& run_name, BenchEntry& e) {
  std::vector<std::string> parts;
  std::stringstream ss(run_name);
  for (std::string p; std::getline(ss, p, '/');) {
    if (p == "manual_time" || p == "real_time" || p.find(':') != std::string::npos) continue;
    parts.push_back(p);
  }
  e.group = parts.size() > 0 ? parts[0] : run_name;
  e.impl = parts.size() > 1 ? parts[1] : "-";
  e.shape = parts.size() > 2 ? parts[2] : "-";
  e.name = e.group + "/" + e.impl + (e.shape == "-" ? "" : "/" + e.shape);
}

// Google Benchmark writes non-finite counters as bare NaN / inf / -nan (not JSON): outside
// strings they become null.
std::string sanitize_non_finite(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size())
        out += text[++i];
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
      continue;
    }
    size_t j = i + (c == '-' || c == '+' ? 1 : 0);
    auto word = [&](const char* w) {
      const size_t n = std::char_traits<char>::length(w);
      if (text.compare(j, n, w) != 0) return size_t{0};
      return n;
    };
    size_t n = 0;
    for (const char* w : {"NaN", "nan", "-nan", "Infinity", "inf"})
      if ((n = word(w)) != 0) break;
    if (n) {
      out += "null";
      i = j + n - 1;
      continue;
    }
    out += c;
  }
  return out;
}

int group_rank(const std::string& g) {
  const char* order[] = {"sdpa", "cache", "layer", "serve", "stream"};
  for (int i = 0; i < 5; ++i)
    if (g == order[i]) return i;
  return 5;
}
// "P10" after "P9": the letters, then the number.
std::pair<std::string, long> shape_key(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && !std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  long n = 0;
  for (size_t j = i; j < s.size() && std::isdigit(static_cast<unsigned char>(s[j])); ++j) n = n * 10 + (s[j] - '0');
  return {s.substr(0, i), n};
}
int impl_rank(const std::string& impl) {
  if (impl == "attend") return 0;
  if (impl.rfind("attend", 0) == 0) return 1;
  if (impl.rfind("onednn", 0) == 0) return 3;
  return 2;
}

}  // namespace

BenchRun parse_bench_json(const std::string& text, const std::string& label) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(sanitize_non_finite(text));
  } catch (const nlohmann::json::exception& ex) {
    throw ReportError(label + ": not JSON (" + ex.what() + ")");
  }
  if (!j.is_object() || !j.contains("benchmarks") || !j["benchmarks"].is_array())
    throw ReportError(label + ": not attend-bench JSON (no \"benchmarks\" array)");
  BenchRun run;
  run.label = label;
  if (j.contains("context") && j["context"].is_object())
    for (auto& [k, v] : j["context"].items()) run.context[k] = v.is_string() ? v.get<std::string>() : v.dump();
  const bool has_medians = std::any_of(j["benchmarks"].begin(), j["benchmarks"].end(), [](const nlohmann::json& b) {
    return b.is_object() && b.value("aggregate_name", "") == "median";
  });
  std::map<std::string, size_t> seen;
  for (const nlohmann::json& b : j["benchmarks"]) {
    if (!b.is_object() || !b.contains("run_name") || !b["run_name"].is_string()) continue;
    if (b.value("error_occurred", false)) continue;
    if (has_medians ? b.value("aggregate_name", "") != "median" : b.value("run_type", "") == "aggregate") continue;
    BenchEntry e;
    split_name(b["run_name"].get<std::string>(), e);
    if (!b.contains("real_time") || !b["real_time"].is_number()) continue;
    e.ms = to_ms(b["real_time"].get<double>(), b.value("time_unit", "ns"));
    for (auto& [k, v] : b.items())
      if (v.is_number() && k != "real_time" && k != "cpu_time" && k != "iterations" && k != "repetitions" &&
          k != "repetition_index" && k != "threads" && k != "family_index" && k != "per_family_instance_index")
        e.counters[k] = v.get<double>();
    if (auto it = e.counters.find("FLOPS"); it != e.counters.end()) e.gflops = it->second * 1e-9;
    if (auto it = e.counters.find("bytes_per_second"); it != e.counters.end()) e.gbps = it->second * 1e-9;
    // Without aggregates, repeated runs of one entry: the first is kept.
    if (seen.count(e.name)) continue;
    seen[e.name] = run.entries.size();
    run.entries.push_back(std::move(e));
  }
  if (run.entries.empty()) throw ReportError(label + ": no benchmark entries");
  // Random interleaving writes entries in a shuffled order: sort them by group, shape, impl.
  std::stable_sort(run.entries.begin(), run.entries.end(), [](const BenchEntry& a, const BenchEntry& b) {
    return std::make_tuple(group_rank(a.group), a.group, shape_key(a.shape), impl_rank(a.impl), a.impl) <
           std::make_tuple(group_rank(b.group), b.group, shape_key(b.shape), impl_rank(b.impl), b.impl);
  });
  run.threads = static_cast<int>(number(run.context_value("threads")));
  if (run.threads <= 0) run.threads = static_cast<int>(number(run.context_value("num_cpus")));
  if (run.threads <= 0) run.threads = 1;
  run.fma_peak_gflops = number(run.context_value("fma_peak_gflops"));
  run.bf16_peak_gflops = number(run.context_value("bf16_dot_peak_gflops"));
  run.amx_peak_gflops = number(run.context_value("amx_bf16_peak_gflops"));
  for (const BenchEntry& e : run.entries)
    if (e.group == "stream" && e.impl == "read") run.read_gbps = std::max(run.read_gbps, e.gbps);
  return run;
}

BenchRun load_bench_json(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ReportError(path + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  std::string label = path.substr(path.find_last_of('/') + 1);
  if (label.size() > 5 && label.substr(label.size() - 5) == ".json") label.resize(label.size() - 5);
  return parse_bench_json(ss.str(), label);
}

const BenchEntry* baseline_of(const BenchRun& run, const BenchEntry& e) {
  if (e.impl.rfind("onednn", 0) == 0 || e.group == "stream") return nullptr;
  // Decode-only timings of a serving run (serve/*-decode*) have no oneDNN counterpart.
  if (e.impl.find("-decode") != std::string::npos) return run.find(e.group, "onednn-decode", e.shape);
  if (e.impl.find("bf16") != std::string::npos)
    if (const BenchEntry* b = run.find(e.group, "onednn-bf16", e.shape)) return b;
  return run.find(e.group, "onednn", e.shape);
}

}  // namespace attend::report
