#include "report_page.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

namespace attend::report {

namespace {

// Entries charted against oneDNN: attend's own paths, not the score-term and MLA variants or the
// layer's split timings (those stay in the tables).
bool charted(const BenchEntry& e) {
  for (const char* v : {"softcap", "sinks", "alibi", "mla", "-attn", "-gemm", "-copy"})
    if (e.impl.find(v) != std::string::npos) return false;
  return true;
}

std::string fmt(double v, const char* f = "%.3g") {
  if (!(v > 0) && v != 0) return "–";
  char buf[48];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string group_title(const std::string& g) {
  if (g == "sdpa") return "sdpa: fused attention on tensors (P = prefill, D = decode shapes)";
  if (g == "cache") return "cache: decode through a KV cache";
  if (g == "layer") return "layer: projections + attention";
  if (g == "serve") return "serve: continuous batching";
  return g;
}

std::vector<std::string> groups_of(const BenchRun& run) {
  std::vector<std::string> g;
  for (const BenchEntry& e : run.entries)
    if (e.group != "stream" && std::find(g.begin(), g.end(), e.group) == g.end()) g.push_back(e.group);
  return g;
}

std::string safe_label(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ? c : '_';
  return out;
}

// A finite counter's value, or −1.
double counter_of(const BenchEntry& e, const char* name) {
  const auto it = e.counters.find(name);
  return it != e.counters.end() && std::isfinite(it->second) ? it->second : -1.0;
}

// The bench's paired share, the figure the issues quote: a decode entry's share of a plain read of
// the same bytes (stream_pct), a prefill entry's of the FMA probe (peak_pct; of the vdpbf16ps probe
// for bf16 arithmetic, so AMX goes past 100), each timed right after every call and summarised by the
// median of the per-call ratios. Empty where the entry has neither.
std::string paired_share_cell(const BenchEntry& e) {
  const double read = counter_of(e, "stream_pct"), peak = counter_of(e, "peak_pct"),
               requested = counter_of(e, "read_req_pct"), wide = counter_of(e, "read_wide_pct");
  if (read >= 0) {
    std::string cell = "<td";
    if (requested >= 0 && wide >= 0)
      cell += " title=\"the read with software requests was the fastest in " + fmt(requested, "%.0f") +
              "% of calls, the 512-bit read without them in " + fmt(wide, "%.0f") + "%\"";
    else if (requested >= 0)
      cell += " title=\"the read with software requests was the faster in " + fmt(requested, "%.0f") + "% of calls\"";
    return cell + ">" + fmt(read, "%.1f") + "% of read</td>";
  }
  if (peak >= 0) return "<td>" + fmt(peak, "%.1f") + "% of peak</td>";
  return "<td></td>";
}

// Which plain read a run's decode shares are of: attend-bench records it in the context since the
// reference became the faster of two reads (a XOR loop and a loop with software requests; session
// 44), the fastest of three since a 512-bit loop without requests joined them (session 52); earlier
// runs timed one plain read.
std::string read_reference_cell(const BenchRun& run) {
  const std::string ref = run.context_value("reference_read");
  if (ref.empty()) return "<td class=\"l\">one plain read</td>";
  const bool three = ref.rfind("the fastest of three", 0) == 0;
  return "<td class=\"l\" title=\"" + xml_escape(ref) + "\">" +
         (three ? "the fastest of three reads" : "the faster of two reads") + "</td>";
}

}  // namespace

bool headline(const BenchEntry& e) {
  static const std::set<std::string> main = {"sdpa/attend",       "sdpa/attend-bf16math", "cache/attend-f32",
                                             "cache/attend-bf16", "cache/attend-i8",      "layer/attend",
                                             "serve/paged-f32"};
  return main.count(e.group + "/" + e.impl) != 0;
}

// The CPU as a reader tells runs apart: its brand string and, from runs that record it
// (attend-bench's context since session 23), its microarchitecture class ("AMD EPYC, Zen 4").
std::string machine_name(const BenchRun& run) {
  const std::string cls = run.context_value("cpu_class");
  return run.context_value("cpu_model") + (cls.empty() ? "" : ", " + cls);
}

BarChart speedup_chart(const BenchRun& run, bool headline_only) {
  BarChart c;
  c.title = std::string(headline_only ? "attend against oneDNN (main paths), " : "attend against oneDNN, ") +
            run.label + " (" + machine_name(run) + " " + run.context_value("attend_isa") + ", " +
            std::to_string(run.threads) + " threads)";
  c.value_label = "speed-up: oneDNN time / attend time (median)";
  c.reference = 1.0;
  c.reference_label = "oneDNN";
  for (const BenchEntry& e : run.entries) {
    if (!charted(e) || !baseline_of(run, e) || (headline_only && !headline(e))) continue;
    const std::string cat = e.group + "/" + e.shape;
    const std::string series = e.impl;
    if (std::find(c.categories.begin(), c.categories.end(), cat) == c.categories.end()) c.categories.push_back(cat);
    if (std::find(c.series.begin(), c.series.end(), series) == c.series.end()) c.series.push_back(series);
  }
  c.values.assign(c.series.size(), std::vector<double>(c.categories.size(), NAN));
  for (const BenchEntry& e : run.entries) {
    const BenchEntry* b = charted(e) && (!headline_only || headline(e)) ? baseline_of(run, e) : nullptr;
    if (!b || !(e.ms > 0)) continue;
    const size_t si = static_cast<size_t>(std::find(c.series.begin(), c.series.end(), e.impl) - c.series.begin());
    const size_t ci = static_cast<size_t>(std::find(c.categories.begin(), c.categories.end(), e.group + "/" + e.shape) -
                                          c.categories.begin());
    c.values[si][ci] = b->ms / e.ms;
  }
  return c;
}

Roofline roofline_of(const BenchRun& run) {
  Roofline r;
  r.title = "Roofline, " + run.label + " (" + machine_name(run) + ", " + std::to_string(run.threads) + " threads)";
  if (run.fma_peak_gflops > 0) r.roofs.push_back({"FMA peak", run.fma_peak_gflops});
  if (run.bf16_peak_gflops > 0) r.roofs.push_back({"bf16 dot peak", run.bf16_peak_gflops});
  if (run.amx_peak_gflops > 0) r.roofs.push_back({"AMX bf16 peak", run.amx_peak_gflops});
  r.bandwidth_gbps = run.read_gbps;
  r.bandwidth_label = "plain read " + fmt(run.read_gbps, "%.1f") + " GB/s";
  for (const BenchEntry& e : run.entries)
    if (e.intensity() > 0 && e.group != "stream") r.points.push_back({e.name, e.group, e.intensity(), e.gflops});
  return r;
}

namespace {

// One bar per entry of a run where value(e) > 0: categories group/shape, series the implementation,
// both in the order they first appear.
template <class Value>
void fill_entry_bars(BarChart& c, const BenchRun& run, Value value) {
  for (const BenchEntry& e : run.entries) {
    if (!(value(e) > 0)) continue;
    const std::string cat = e.group + "/" + e.shape;
    if (std::find(c.categories.begin(), c.categories.end(), cat) == c.categories.end()) c.categories.push_back(cat);
    if (std::find(c.series.begin(), c.series.end(), e.impl) == c.series.end()) c.series.push_back(e.impl);
  }
  c.values.assign(c.series.size(), std::vector<double>(c.categories.size(), NAN));
  for (const BenchEntry& e : run.entries) {
    const double v = value(e);
    if (!(v > 0)) continue;
    const auto ci = std::find(c.categories.begin(), c.categories.end(), e.group + "/" + e.shape);
    const auto si = std::find(c.series.begin(), c.series.end(), e.impl);
    c.values[static_cast<size_t>(si - c.series.begin())][static_cast<size_t>(ci - c.categories.begin())] = v;
  }
}

// One bar per run for each entry that has(run, entry) holds for in two runs or more (the entries in
// the order they first appear), at value(run, entry).
template <class Has, class Value>
void fill_across_bars(BarChart& c, const std::vector<BenchRun>& runs, Has has, Value value) {
  for (const BenchRun& r : runs) c.series.push_back(r.label);
  std::vector<std::string> names;
  for (const BenchRun& r : runs)
    for (const BenchEntry& e : r.entries) {
      if (!has(r, e) || std::find(names.begin(), names.end(), e.name) != names.end()) continue;
      int in = 0;
      for (const BenchRun& o : runs)
        if (const BenchEntry* x = o.find(e.group, e.impl, e.shape); x && has(o, *x)) ++in;
      if (in >= 2) names.push_back(e.name);
    }
  c.categories = names;
  c.values.assign(runs.size(), std::vector<double>(names.size(), NAN));
  for (size_t ri = 0; ri < runs.size(); ++ri)
    for (size_t ni = 0; ni < names.size(); ++ni)
      for (const BenchEntry& e : runs[ri].entries)
        if (e.name == names[ni]) c.values[ri][ni] = value(runs[ri], e);
}

// A decode entry's paired share of a read (stream_pct), or −1 where it has none.
double decode_share(const BenchEntry& e) {
  return e.group == "stream" || !charted(e) ? -1.0 : counter_of(e, "stream_pct");
}

void share_axis(BarChart& c) {
  c.value_label = "% of the read timed right after each call (median of the per-call ratios)";
  c.value_format = "%";
  c.reference = 100.0;
  c.reference_label = "the read";
}

}  // namespace

BarChart decode_bandwidth_chart(const BenchRun& run) {
  BarChart c;
  c.title = "Decode bandwidth per core, " + run.label + " (" + std::to_string(run.threads) + " threads)";
  c.value_label = "GB/s per core (bytes of K/V and Q/O read or written / time / threads)";
  c.value_format = "";
  const double per_core_read = run.read_gbps / run.threads;
  if (per_core_read > 0) {
    c.reference = per_core_read;
    c.reference_label = "plain read " + fmt(per_core_read, "%.1f");
  }
  fill_entry_bars(c, run, [&](const BenchEntry& e) {
    const bool decode = !e.shape.empty() && e.shape[0] == 'D' && e.group != "stream" && charted(e);
    return decode && e.gbps > 0 ? e.gbps / run.threads : -1.0;
  });
  return c;
}

BarChart decode_share_chart(const BenchRun& run) {
  BarChart c;
  c.title = "Decode against a plain read of the same bytes (paired), " + run.label + " (" +
            std::to_string(run.threads) + " threads)";
  share_axis(c);
  fill_entry_bars(c, run, decode_share);
  return c;
}

BarChart across_machines_share_chart(const std::vector<BenchRun>& runs) {
  BarChart c;
  c.title = "Decode across machines: share of each machine's plain read of the same bytes (paired)";
  share_axis(c);
  fill_across_bars(
      c, runs, [](const BenchRun&, const BenchEntry& e) { return decode_share(e) > 0; },
      [](const BenchRun&, const BenchEntry& e) { return decode_share(e) > 0 ? decode_share(e) : NAN; });
  return c;
}

BarChart across_machines_chart(const std::vector<BenchRun>& runs) {
  BarChart c;
  c.title = "The same entries across machines: speed-up over each machine's oneDNN";
  c.value_label = "speed-up: oneDNN time / attend time (median)";
  c.reference = 1.0;
  c.reference_label = "oneDNN";
  fill_across_bars(
      c, runs, [](const BenchRun& r, const BenchEntry& e) { return charted(e) && baseline_of(r, e) != nullptr; },
      [](const BenchRun& r, const BenchEntry& e) {
        const BenchEntry* b = baseline_of(r, e);
        return b && e.ms > 0 ? b->ms / e.ms : NAN;
      });
  return c;
}

std::map<std::string, std::string> report_charts(const std::vector<BenchRun>& runs) {
  std::map<std::string, std::string> out;
  for (const BenchRun& r : runs) {
    const std::string l = safe_label(r.label);
    out["speedup-" + l + ".svg"] = bar_chart_svg(speedup_chart(r, false));
    out["headline-" + l + ".svg"] = bar_chart_svg(speedup_chart(r, true));
    out["roofline-" + l + ".svg"] = roofline_svg(roofline_of(r));
    out["decode-bandwidth-" + l + ".svg"] = bar_chart_svg(decode_bandwidth_chart(r));
    out["decode-share-" + l + ".svg"] = bar_chart_svg(decode_share_chart(r));
  }
  if (runs.size() >= 2) {
    out["across-machines.svg"] = bar_chart_svg(across_machines_chart(runs));
    out["across-machines-share.svg"] = bar_chart_svg(across_machines_share_chart(runs));
  }
  return out;
}

std::string report_html(const std::vector<BenchRun>& runs, const std::string& title) {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" << xml_escape(title)
    << "</title>\n<style>body{font-family:sans-serif;margin:24px;max-width:1100px;color:#222}"
       "table{border-collapse:collapse;margin:8px 0 20px}td,th{border:1px solid #ccc;padding:3px 8px;"
       "font-size:13px;text-align:right}th{background:#f2f2f2}td.l,th.l{text-align:left}"
       "h2{border-bottom:2px solid #ddd;padding-bottom:4px;margin-top:36px}.fast{color:#176d17;font-weight:bold}"
       ".slow{color:#b00}.note{color:#555;font-size:13px}svg{display:block;margin:8px 0}</style></head><body>\n";
  o << "<h1>" << xml_escape(title) << "</h1>\n<p class=\"note\">" << runs.size()
    << " attend-bench run(s). Times are medians over the repetitions; the speed-up is oneDNN's median time over "
       "attend's, both measured in the same process (for bf16 arithmetic: oneDNN with bf16 matmuls). "
       "The paired share is the figure the machine's noise leaves comparable: a decode entry's time against a "
       "plain read of the same bytes (a prefill entry's against the FMA probe, or the vdpbf16ps probe for bf16 "
       "arithmetic) timed right after each call, the median of the per-call ratios. Hover a mark for its value.</p>\n";

  // Machines.
  o << "<h2 id=\"machines\">Machines</h2>\n<table class=\"machines\"><tr><th class=\"l\">run</th><th "
       "class=\"l\">CPU</th>"
       "<th class=\"l\">attend ISA</th><th>threads</th><th class=\"l\">oneDNN</th><th>FMA peak GFLOP/s</th>"
       "<th>bf16 peak GFLOP/s</th><th>AMX bf16 peak GFLOP/s</th><th>plain read GB/s</th><th class=\"l\">decode shares "
       "are of</th>"
       "<th class=\"l\">attend</th><th class=\"l\">date</th></tr>\n";
  for (const BenchRun& r : runs)
    o << "<tr><td class=\"l\">" << xml_escape(r.label) << "</td><td class=\"l\">" << xml_escape(machine_name(r))
      << "</td><td class=\"l\">" << xml_escape(r.context_value("attend_isa")) << "</td><td>" << r.threads
      << "</td><td class=\"l\">"
      << xml_escape(r.context_value("onednn_version") + " (" + r.context_value("onednn_isa") + ")") << "</td><td>"
      << fmt(r.fma_peak_gflops, "%.0f") << "</td><td>" << fmt(r.bf16_peak_gflops, "%.0f") << "</td><td>"
      << (r.amx_peak_gflops > 0 ? fmt(r.amx_peak_gflops, "%.0f") : std::string("—")) << "</td><td>"
      << fmt(r.read_gbps, "%.1f") << "</td>" << read_reference_cell(r) << "<td class=\"l\">"
      << xml_escape(r.context_value("attend_version")) << "</td><td class=\"l\">" << xml_escape(r.context_value("date"))
      << "</td></tr>\n";
  o << "</table>\n";

  if (runs.size() >= 2) {
    o << "<h2 id=\"across\">Across machines</h2>\n" << bar_chart_svg(across_machines_chart(runs)) << "\n";
    const BarChart shares = across_machines_share_chart(runs);
    if (!shares.categories.empty()) o << bar_chart_svg(shares) << "\n";
    // Times side by side for every entry present in more than one run.
    o << "<table class=\"across\"><tr><th class=\"l\">entry</th>";
    for (const BenchRun& r : runs) o << "<th>" << xml_escape(r.label) << " ms</th>";
    for (const BenchRun& r : runs) o << "<th>" << xml_escape(r.label) << " speed-up</th>";
    o << "</tr>\n";
    std::vector<std::string> names;
    for (const BenchRun& r : runs)
      for (const BenchEntry& e : r.entries)
        if (std::find(names.begin(), names.end(), e.name) == names.end()) names.push_back(e.name);
    for (const std::string& n : names) {
      std::vector<const BenchEntry*> es;
      for (const BenchRun& r : runs) {
        const BenchEntry* f = nullptr;
        for (const BenchEntry& e : r.entries)
          if (e.name == n) f = &e;
        es.push_back(f);
      }
      if (std::count(es.begin(), es.end(), nullptr) > static_cast<long>(runs.size()) - 2) continue;
      o << "<tr><td class=\"l\">" << xml_escape(n) << "</td>";
      for (const BenchEntry* e : es) o << "<td>" << (e ? fmt(e->ms, "%.4g") : "–") << "</td>";
      for (size_t i = 0; i < es.size(); ++i) {
        const BenchEntry* b = es[i] ? baseline_of(runs[i], *es[i]) : nullptr;
        o << "<td>" << (b ? fmt(b->ms / es[i]->ms, "%.2f") + "×" : "–") << "</td>";
      }
      o << "</tr>\n";
    }
    o << "</table>\n";
  }

  for (const BenchRun& r : runs) {
    const std::string id = safe_label(r.label);
    o << "<h2 id=\"run-" << id << "\">" << xml_escape(r.label) << ": attend against oneDNN</h2>\n";
    o << bar_chart_svg(speedup_chart(r, true)) << "\n";
    o << "<details><summary>every entry with a oneDNN baseline</summary>" << bar_chart_svg(speedup_chart(r, false))
      << "</details>\n";
    for (const std::string& g : groups_of(r)) {
      o << "<h3>" << xml_escape(group_title(g)) << "</h3>\n<table class=\"entries\" data-group=\"" << xml_escape(g)
        << "\"><tr><th class=\"l\">shape</th><th class=\"l\">implementation</th><th>median ms</th><th>GFLOP/s</th>"
           "<th>GB/s</th><th>paired share</th><th class=\"l\">oneDNN baseline</th><th>baseline ms</th>"
           "<th>speed-up</th></tr>\n";
      for (const BenchEntry& e : r.entries) {
        if (e.group != g) continue;
        const BenchEntry* b = baseline_of(r, e);
        const double sp = b && e.ms > 0 ? b->ms / e.ms : 0;
        o << "<tr><td class=\"l\">" << xml_escape(e.shape) << "</td><td class=\"l\">" << xml_escape(e.impl)
          << "</td><td>" << fmt(e.ms, "%.4g") << "</td><td>" << (e.gflops > 0 ? fmt(e.gflops, "%.1f") : "")
          << "</td><td>" << (e.gbps > 0 ? fmt(e.gbps, "%.1f") : "") << "</td>" << paired_share_cell(e)
          << "<td class=\"l\">" << (b ? xml_escape(b->impl) : "") << "</td><td>" << (b ? fmt(b->ms, "%.4g") : "")
          << "</td><td"
          << (sp >= 1  ? " class=\"fast\""
              : sp > 0 ? " class=\"slow\""
                       : "")
          << ">" << (sp > 0 ? fmt(sp, "%.2f") + "×" : "") << "</td></tr>\n";
      }
      o << "</table>\n";
    }
    o << "<h2 id=\"roofline-" << id << "\">" << xml_escape(r.label) << ": roofline</h2>\n<p class=\"note\">Each "
      << "entry at its arithmetic intensity (the bench's FLOP and byte counters) and throughput, under the "
         "machine's measured FMA"
      << (r.bf16_peak_gflops > 0 ? " and vdpbf16ps" : "") << (r.amx_peak_gflops > 0 ? " and AMX (tdpbf16ps)" : "")
      << " peaks and its plain-read bandwidth (the best stream/read entry).</p>\n"
      << roofline_svg(roofline_of(r)) << "\n";
    const BarChart share = decode_share_chart(r);
    if (!share.categories.empty())
      o << "<h2 id=\"decode-share-" << id << "\">" << xml_escape(r.label) << ": decode against a plain read</h2>\n"
        << "<p class=\"note\">Each decode entry's paired share: its time against a plain read of the very bytes it "
           "streams, evicted from every cache level before both and timed right after each call ("
        << xml_escape(r.context_value("reference_read").empty() ? std::string("one plain read")
                                                                : r.context_value("reference_read"))
        << "). The figure a fleet compares: it does not move with the machine's memory state as GB/s do.</p>\n"
        << bar_chart_svg(share) << "\n";
    const BarChart dec = decode_bandwidth_chart(r);
    if (!dec.categories.empty())
      o << "<h2 id=\"decode-" << id << "\">" << xml_escape(r.label) << ": decode bandwidth per core</h2>\n"
        << bar_chart_svg(dec) << "\n";
  }
  o << "<p class=\"note\">Made by attend-report from " << runs.size()
    << " file(s); self-contained (no scripts, no network).</p>\n</body></html>\n";
  return o.str();
}

}  // namespace attend::report
