// attend-report's pieces, tested like a page: the bench JSON reader (medians, units, sorting,
// baselines, the machine's roofs), the SVG charts read back (axes and their scales, one mark per
// entry, each mark's value and its position on the scale), the HTML page (machine table, sections,
// self-contained), and the command line.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "report/bench_results.hpp"
#include "report/report_page.hpp"
#include "report/svg_chart.hpp"

namespace attend::report {
namespace {

// A benchmark JSON entry: an aggregate (mean/median/stddev) or a plain run.
std::string entry(const std::string& run_name, const std::string& aggregate, double time, const std::string& unit,
                  const std::string& counters = "") {
  std::ostringstream o;
  o << "{\"name\":\"" << run_name << (aggregate.empty() ? "" : "_" + aggregate) << "\",\"run_name\":\"" << run_name
    << "\",\"run_type\":\"" << (aggregate.empty() ? "iteration" : "aggregate") << "\","
    << (aggregate.empty() ? "" : "\"aggregate_name\":\"" + aggregate + "\",") << "\"real_time\":" << time
    << ",\"cpu_time\":" << time * 2 << ",\"time_unit\":\"" << unit << "\"" << (counters.empty() ? "" : ",") << counters
    << "}";
  return o.str();
}

// Three repetitions summarised: the median is `t`, mean and stddev decoys.
std::string aggregates(const std::string& run_name, double t, const std::string& unit,
                       const std::string& counters = "") {
  return entry(run_name, "mean", t * 1.5, unit, counters) + "," + entry(run_name, "median", t, unit, counters) + "," +
         entry(run_name, "stddev", t * 0.1, unit, "\"bytes_per_second\":NaN");
}

std::string sample_json(double scale = 1.0, const std::string& cpu = "AMD EPYC") {
  std::ostringstream o;
  o << "{\"context\":{\"date\":\"2026-11-23\",\"num_cpus\":2,\"cpu_model\":\"" << cpu
    << "\",\"attend_isa\":\"avx512_bf16\",\"threads\":\"2\",\"fma_peak_gflops\":\"400.0\","
       "\"bf16_dot_peak_gflops\":\"800.0\",\"onednn_version\":\"2.6.3\",\"onednn_isa\":\"avx512_core_bf16\"},"
       "\"benchmarks\":[";
  o << aggregates("sdpa/onednn/P1/manual_time", 2.0 * scale, "ms", "\"FLOPS\":1e11,\"bytes_per_second\":1e9") << ",";
  o << aggregates("sdpa/attend/P1/manual_time", 1.0 * scale, "ms",
                  "\"FLOPS\":2e11,\"bytes_per_second\":2e9,\"peak_pct\":" + std::to_string(50 / scale))
    << ",";
  o << aggregates("sdpa/attend/D2/manual_time", 500.0 * scale, "us",
                  "\"FLOPS\":2e10,\"bytes_per_second\":4e10,\"stream_pct\":" + std::to_string(91.24 * scale) +
                      ",\"read_req_pct\":40")
    << ",";
  o << aggregates("sdpa/onednn/D2/manual_time", 1e6 * scale, "ns", "\"FLOPS\":1e10,\"bytes_per_second\":2e10") << ",";
  o << aggregates("sdpa/attend-softcap/P1/manual_time", 1.1 * scale, "ms", "\"FLOPS\":1.8e11") << ",";
  o << aggregates("stream/read/D2/manual_time", 0.4, "ms", "\"bytes_per_second\":5e10") << ",";
  o << aggregates("stream/read/D3/manual_time", 0.4, "ms", "\"bytes_per_second\":4.5e10") << ",";
  o << aggregates("serve/paged-f32/iterations:3/manual_time", 100.0 * scale, "ms") << ",";
  o << aggregates("serve/onednn/iterations:3/manual_time", 150.0, "ms") << ",";
  o << aggregates("serve/paged-f32-decode/manual_time", 10.0, "ms", "\"bytes_per_second\":4e10") << ",";
  o << "{\"name\":\"cache/attend-f32/D1/manual_time\",\"run_name\":\"cache/attend-f32/D1/manual_time\","
       "\"error_occurred\":true,\"error_message\":\"x\",\"aggregate_name\":\"median\"}";
  o << "]}";
  return o.str();
}

TEST(ReportData, MediansUnitsSortingAndRoofs) {
  const BenchRun run = parse_bench_json(sample_json(), "m1");
  ASSERT_EQ(run.entries.size(), 10u);  // the errored entry is skipped
  // Sorted: sdpa (D before P; attend before variants before onednn), serve, stream.
  std::vector<std::string> names;
  for (const BenchEntry& e : run.entries) names.push_back(e.name);
  const std::vector<std::string> want = {
      "sdpa/attend/D2",  "sdpa/onednn/D2",         "sdpa/attend/P1", "sdpa/attend-softcap/P1", "sdpa/onednn/P1",
      "serve/paged-f32", "serve/paged-f32-decode", "serve/onednn",   "stream/read/D2",         "stream/read/D3"};
  EXPECT_EQ(names, want);
  const BenchEntry* d2 = run.find("sdpa", "attend", "D2");
  ASSERT_NE(d2, nullptr);
  EXPECT_DOUBLE_EQ(d2->ms, 0.5);                                // the median, 500 us
  EXPECT_DOUBLE_EQ(run.find("sdpa", "onednn", "D2")->ms, 1.0);  // 1e6 ns
  EXPECT_DOUBLE_EQ(d2->gflops, 20.0);
  EXPECT_DOUBLE_EQ(d2->gbps, 40.0);
  EXPECT_DOUBLE_EQ(d2->intensity(), 0.5);
  EXPECT_EQ(run.find("serve", "paged-f32", "-")->shape, "-");
  EXPECT_EQ(run.threads, 2);
  EXPECT_DOUBLE_EQ(run.fma_peak_gflops, 400.0);
  EXPECT_DOUBLE_EQ(run.bf16_peak_gflops, 800.0);
  EXPECT_DOUBLE_EQ(run.read_gbps, 50.0);  // the best stream/read entry
  // Baselines: same group and shape; none for oneDNN, stream and decode-only serving timings.
  EXPECT_EQ(baseline_of(run, *run.find("sdpa", "attend", "P1")), run.find("sdpa", "onednn", "P1"));
  EXPECT_EQ(baseline_of(run, *run.find("serve", "paged-f32", "-")), run.find("serve", "onednn", "-"));
  EXPECT_EQ(baseline_of(run, *run.find("sdpa", "onednn", "P1")), nullptr);
  EXPECT_EQ(baseline_of(run, *run.find("stream", "read", "D2")), nullptr);
  EXPECT_EQ(baseline_of(run, *run.find("serve", "paged-f32-decode", "-")), nullptr);
}

TEST(ReportData, PlainRunsWithoutAggregates) {
  const std::string j = "{\"benchmarks\":[" + entry("sdpa/attend/P1/manual_time", "", 3.0, "ms") + "," +
                        entry("sdpa/attend/P1/manual_time", "", 9.0, "ms") + "]}";
  const BenchRun run = parse_bench_json(j, "plain");
  ASSERT_EQ(run.entries.size(), 1u);
  EXPECT_DOUBLE_EQ(run.entries[0].ms, 3.0);
  EXPECT_EQ(run.threads, 1);
}

TEST(ReportData, BadFilesAreReportErrors) {
  EXPECT_THROW(parse_bench_json("not json", "a"), ReportError);
  EXPECT_THROW(parse_bench_json("{\"context\":{}}", "b"), ReportError);
  EXPECT_THROW(parse_bench_json("{\"benchmarks\":[]}", "c"), ReportError);
  EXPECT_THROW(load_bench_json("/nonexistent/run.json"), ReportError);
  try {
    parse_bench_json("[1,2", "named");
    FAIL();
  } catch (const ReportError& e) {
    EXPECT_NE(std::string(e.what()).find("named"), std::string::npos);
  }
}

// ---- reading SVG back ----

struct Element {
  std::map<std::string, std::string> attrs;
  double num(const std::string& k) const { return std::stod(attrs.at(k)); }
};

// Elements `tag` whose class attribute contains `cls` (attribute order free).
std::vector<Element> elements(const std::string& svg, const std::string& tag, const std::string& cls) {
  std::vector<Element> out;
  const std::regex el("<" + tag + R"(\s([^>]*?)/?>)");
  const std::regex attr(R"re(([\w-]+)="([^"]*)")re");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), el); it != std::sregex_iterator(); ++it) {
    Element e;
    const std::string body = (*it)[1];
    for (auto a = std::sregex_iterator(body.begin(), body.end(), attr); a != std::sregex_iterator(); ++a)
      e.attrs[(*a)[1]] = (*a)[2];
    auto c = e.attrs.find("class");
    if (c == e.attrs.end() || (" " + c->second + " ").find(" " + cls + " ") == std::string::npos) continue;
    out.push_back(e);
  }
  return out;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(ReportSvg, BarChartMarksValuesAndScale) {
  BarChart c;
  c.title = "t";
  c.value_label = "speed-up";
  c.categories = {"P1", "P2", "D1"};
  c.series = {"attend", "attend-bf16"};
  c.values = {{2.0, 3.5, NAN}, {0.5, 7.25, 1.0}};
  c.reference = 1.0;
  const std::string svg = bar_chart_svg(c);
  ASSERT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_EQ(count(svg, "<svg"), count(svg, "</svg>"));
  const std::vector<Element> marks = elements(svg, "rect", "mark");
  ASSERT_EQ(marks.size(), 5u);  // one per finite value
  std::map<std::string, double> width;
  double x0 = -1;
  for (const Element& m : marks) {
    const std::string key = m.attrs.at("data-series") + "/" + m.attrs.at("data-category");
    width[key] = m.num("width");
    if (x0 < 0) x0 = m.num("x");
    EXPECT_DOUBLE_EQ(m.num("x"), x0);  // bars start at the axis
  }
  EXPECT_DOUBLE_EQ(std::stod(marks[0].attrs.at("data-value")), 2.0);
  // Widths are proportional to values (the linear scale starts at 0).
  EXPECT_NEAR(width["attend/P2"] / width["attend/P1"], 3.5 / 2.0, 1e-3);
  EXPECT_NEAR(width["attend-bf16/P2"] / width["attend-bf16/P1"], 7.25 / 0.5, 1e-2);
  // The axis: ticks ascending, evenly spaced, covering the largest value; tick positions on the
  // same scale as the bars.
  const std::vector<Element> axis = elements(svg, "g", "x");
  ASSERT_EQ(axis.size(), 1u);
  EXPECT_GE(axis[0].num("data-max"), 7.25);
  const std::vector<Element> ticks = elements(svg, "line", "tick");
  ASSERT_GE(ticks.size(), 3u);
  for (size_t i = 1; i < ticks.size(); ++i) {
    EXPECT_GT(ticks[i].num("data-value"), ticks[i - 1].num("data-value"));
    EXPECT_GT(ticks[i].num("x1"), ticks[i - 1].num("x1"));
    if (i > 1) {
      EXPECT_NEAR(ticks[i].num("x1") - ticks[i - 1].num("x1"), ticks[1].num("x1") - ticks[0].num("x1"), 0.02);
    }
  }
  const double px_per_unit =
      (ticks[1].num("x1") - ticks[0].num("x1")) / (ticks[1].num("data-value") - ticks[0].num("data-value"));
  EXPECT_NEAR(width["attend/P1"], 2.0 * px_per_unit, 0.02);
  // The reference line at 1 is where a bar of value 1 ends.
  const std::vector<Element> ref = elements(svg, "line", "ref");
  ASSERT_EQ(ref.size(), 1u);
  EXPECT_NEAR(ref[0].num("x1"), x0 + width["attend-bf16/D1"], 0.02);
  // Labels: every category and series is written; the title is escaped.
  for (const char* s : {">P1<", ">P2<", ">D1<", ">attend<", ">attend-bf16<", "7.25×"})
    EXPECT_NE(svg.find(s), std::string::npos) << s;
  c.title = "a<b & \"c\"";
  EXPECT_NE(bar_chart_svg(c).find("a&lt;b &amp; &quot;c&quot;"), std::string::npos);
}

TEST(ReportSvg, RooflineLogScalesMarksAndRoofs) {
  Roofline r;
  r.title = "roof";
  r.bandwidth_gbps = 50;
  r.roofs = {{"FMA peak", 400}, {"bf16 dot peak", 800}};
  r.points = {{"a", "sdpa", 0.5, 20}, {"b", "sdpa", 200, 350}, {"c", "cache", 2, 90}, {"bad", "cache", 0, 5}};
  const std::string svg = roofline_svg(r);
  const std::vector<Element> marks = elements(svg, "circle", "mark");
  ASSERT_EQ(marks.size(), 3u);  // a point without intensity is not drawn
  // Log axes: equal ratios at equal distances.
  auto px = [&](const std::string& label) {
    for (const Element& m : marks)
      if (m.attrs.at("data-label") == label) return std::make_pair(m.num("cx"), m.num("cy"));
    ADD_FAILURE() << label;
    return std::make_pair(0.0, 0.0);
  };
  const auto [ax, ay] = px("a");
  const auto [bx, by] = px("b");
  const auto [cx, cy] = px("c");
  // (coordinates are written to 0.01 px)
  EXPECT_NEAR((cx - ax) / std::log10(2 / 0.5), (bx - ax) / std::log10(200 / 0.5), 0.05);
  EXPECT_NEAR((cy - ay) / std::log10(90.0 / 20), (by - ay) / std::log10(350.0 / 20), 0.05);
  EXPECT_LT(by, ay);  // more GFLOP/s is higher up
  const std::vector<Element> xaxis = elements(svg, "g", "x");
  ASSERT_EQ(xaxis.size(), 1u);
  EXPECT_LE(xaxis[0].num("data-min"), 0.5);
  EXPECT_GE(xaxis[0].num("data-max"), 200);
  // Decade ticks on both axes.
  for (const Element& t : elements(svg, "line", "tick")) {
    const double l = std::log10(t.num("data-value"));
    EXPECT_NEAR(l, std::round(l), 1e-9);
  }
  // Two roofs: each path ends flat at its peak, right of the knee peak / bandwidth.
  const std::vector<Element> roofs = elements(svg, "path", "roof");
  ASSERT_EQ(roofs.size(), 2u);
  EXPECT_DOUBLE_EQ(roofs[0].num("data-gflops"), 400);
  const std::string d = roofs[0].attrs.at("d");
  const std::regex pt(R"(([-\d.]+),([-\d.]+))");
  std::vector<std::pair<double, double>> pts;
  for (auto it = std::sregex_iterator(d.begin(), d.end(), pt); it != std::sregex_iterator(); ++it)
    pts.emplace_back(std::stod((*it)[1]), std::stod((*it)[2]));
  ASSERT_EQ(pts.size(), 3u);  // the bandwidth slope, the knee, the flat roof
  EXPECT_NEAR(pts[1].second, pts[2].second, 1e-9);
  EXPECT_LT(pts[1].second, pts[0].second);
  // The slope is 45° in log-log: y rises one decade per decade of x, on axes with equal pixels per
  // decade only if the ranges match, so compare in data units through the point scales instead.
  const double px_per_decade_x = (bx - ax) / std::log10(200 / 0.5),
               px_per_decade_y = (ay - by) / std::log10(350.0 / 20);
  EXPECT_NEAR((pts[0].second - pts[1].second) / px_per_decade_y, (pts[1].first - pts[0].first) / px_per_decade_x, 0.02);
  EXPECT_NE(svg.find("data-gbps=\"50\""), std::string::npos);
}

TEST(ReportPage, MachinesSectionsAndSelfContained) {
  const BenchRun a = parse_bench_json(sample_json(1.0, "Zen 4 box"), "zen4");
  const BenchRun b = parse_bench_json(sample_json(0.5, "Zen 5 box"), "zen5");
  const std::string one = report_html({a}, "One machine");
  EXPECT_NE(one.find("<h1>One machine</h1>"), std::string::npos);
  EXPECT_NE(one.find("Zen 4 box"), std::string::npos);
  EXPECT_NE(one.find("avx512_bf16"), std::string::npos);
  EXPECT_NE(one.find("2.6.3 (avx512_core_bf16)"), std::string::npos);
  EXPECT_EQ(one.find("Across machines"), std::string::npos);
  for (const char* banned : {"<script", "src=", "href=", "@import", "url("})
    EXPECT_EQ(one.find(banned), std::string::npos) << banned;
  // Each run: the headline chart (sdpa/attend on two shapes, serve/paged-f32), the full chart, the
  // roofline (entries with both counters), decode bandwidth; tables per group.
  EXPECT_EQ(count(one, "class=\"chart roofline\""), 1u);
  EXPECT_EQ(count(one, "<table class=\"entries\""), 2u);  // sdpa, serve
  // The paired shares, where an entry has one: of a read (with which read won), or of the peak.
  EXPECT_NE(one.find("the read with software requests was the faster in 40% of calls\">91.2% of read</td>"),
            std::string::npos);
  EXPECT_NE(one.find("<td>50.0% of peak</td>"), std::string::npos);
  EXPECT_EQ(count(one, "% of read</td>"), 1u);
  // The reference the decode shares are of: this context does not name it (an older run).
  EXPECT_NE(one.find(">one plain read</td>"), std::string::npos);
  std::string named = sample_json();
  named.insert(named.find("\"context\":{") + 11, "\"reference_read\":\"two <reads>\",");
  const std::string newer = report_html({parse_bench_json(named, "newer")}, "Newer");
  EXPECT_NE(newer.find("title=\"two &lt;reads&gt;\">the faster of two reads</td>"), std::string::npos);
  // A run whose reference is the fastest of three reads (session 52): named so, and each decode
  // share says how often each of the two later reads won.
  std::string three = sample_json();
  three.insert(three.find("\"context\":{") + 11, "\"reference_read\":\"the fastest of three plain reads\",");
  for (size_t at = three.find("\"read_req_pct\":40"); at != std::string::npos;
       at = three.find("\"read_req_pct\":40", at + 1))
    three.insert(at + 17, ",\"read_wide_pct\":25");  // the mean's and the median's counters
  const std::string newest = report_html({parse_bench_json(three, "newest")}, "Newest");
  EXPECT_NE(newest.find(">the fastest of three reads</td>"), std::string::npos);
  EXPECT_EQ(newest.find(">the faster of two reads</td>"), std::string::npos);
  EXPECT_NE(newest.find("the read with software requests was the fastest in 40% of calls, the 512-bit read "
                        "without them in 25%\">91.2% of read</td>"),
            std::string::npos);
  const std::string svg = bar_chart_svg(speedup_chart(a, true));
  const std::vector<Element> marks = elements(svg, "rect", "mark");
  ASSERT_EQ(marks.size(), 3u);
  std::map<std::string, double> sp;
  for (const Element& m : marks) sp[m.attrs.at("data-category")] = m.num("data-value");
  EXPECT_DOUBLE_EQ(sp["sdpa/P1"], 2.0);
  EXPECT_DOUBLE_EQ(sp["sdpa/D2"], 2.0);
  EXPECT_DOUBLE_EQ(sp["serve/-"], 1.5);
  EXPECT_EQ(elements(roofline_svg(roofline_of(a)), "circle", "mark").size(), 4u);
  const BarChart dec = decode_bandwidth_chart(a);
  ASSERT_EQ(dec.categories, std::vector<std::string>{"sdpa/D2"});
  EXPECT_DOUBLE_EQ(dec.reference, 25.0);  // 50 GB/s read over 2 threads
  // The paired decode shares: the entries with a stream_pct counter, at its value, against 100%.
  const BarChart share = decode_share_chart(a);
  ASSERT_EQ(share.categories, std::vector<std::string>{"sdpa/D2"});
  ASSERT_EQ(share.series, std::vector<std::string>{"attend"});
  EXPECT_DOUBLE_EQ(share.values[0][0], 91.24);
  EXPECT_DOUBLE_EQ(share.reference, 100.0);
  const std::string share_svg = bar_chart_svg(share);
  const std::vector<Element> sm = elements(share_svg, "rect", "mark");
  ASSERT_EQ(sm.size(), 1u);
  EXPECT_DOUBLE_EQ(sm[0].num("data-value"), 91.24);
  EXPECT_NE(share_svg.find(">91.2%</text>"), std::string::npos);
  EXPECT_EQ(count(one, "decode against a plain read</h2>"), 1u);
  EXPECT_EQ(count(one, "class=\"chart bars\""), 4u);  // headline, every entry, decode share, decode bandwidth
  // Two runs: the across-machines chart has one bar per run for each shared entry.
  const std::string two = report_html({a, b}, "Two");
  EXPECT_NE(two.find("Across machines"), std::string::npos);
  EXPECT_NE(two.find("Decode across machines: share of each machine"), std::string::npos);
  const BarChart across = across_machines_chart({a, b});
  EXPECT_EQ(across.series, (std::vector<std::string>{"zen4", "zen5"}));
  const std::vector<Element> am = elements(bar_chart_svg(across), "rect", "mark");
  EXPECT_EQ(am.size(), 2 * across.categories.size());
  EXPECT_EQ(across.categories.size(), 3u);  // sdpa/attend/D2, sdpa/attend/P1, serve/paged-f32
  // zen5 ran attend twice as fast against the same oneDNN P1 time scaled too: equal speed-ups,
  // and serve's oneDNN baseline was not scaled: 150 / 50.
  for (const Element& m : am)
    if (m.attrs.at("data-series") == "zen5" && m.attrs.at("data-category") == "serve/paged-f32") {
      EXPECT_DOUBLE_EQ(m.num("data-value"), 3.0);
    }
  // The decode shares side by side: one bar per run for each entry two runs have.
  const BarChart across_share = across_machines_share_chart({a, b});
  ASSERT_EQ(across_share.categories, std::vector<std::string>{"sdpa/attend/D2"});
  EXPECT_DOUBLE_EQ(across_share.values[0][0], 91.24);
  EXPECT_DOUBLE_EQ(across_share.values[1][0], 45.62);
  EXPECT_EQ(elements(bar_chart_svg(across_share), "rect", "mark").size(), 2u);
  EXPECT_TRUE(across_machines_share_chart({a}).categories.empty());
  const auto charts = report_charts({a, b});
  for (const char* f : {"headline-zen4.svg", "speedup-zen5.svg", "roofline-zen4.svg", "decode-bandwidth-zen5.svg",
                        "decode-share-zen4.svg", "across-machines.svg", "across-machines-share.svg"})
    EXPECT_EQ(charts.count(f), 1u) << f;
}

#ifdef ATTEND_REPORT_PATH
TEST(ReportCli, WritesThePageAndCharts) {
  const std::string dir = ::testing::TempDir();
  const std::string in1 = dir + "/cli_a.json", in2 = dir + "/cli_b.json", out = dir + "/cli_report.html";
  std::ofstream(in1) << sample_json();
  std::ofstream(in2) << sample_json(0.8);
  const std::string cmd =
      std::string(ATTEND_REPORT_PATH) + " " + in1 + " " + in2 + " -o " + out + " --svg-dir " + dir + " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream page(out);
  std::stringstream ss;
  ss << page.rdbuf();
  EXPECT_NE(ss.str().find("cli_a"), std::string::npos);
  EXPECT_NE(ss.str().find("Across machines"), std::string::npos);
  EXPECT_TRUE(std::ifstream(dir + "/across-machines.svg").good());
  std::ofstream(dir + "/broken.json") << "{";
  EXPECT_NE(
      std::system((std::string(ATTEND_REPORT_PATH) + " " + dir + "/broken.json -o " + out + " 2>/dev/null").c_str()),
      0);
}
#endif

}  // namespace
}  // namespace attend::report
