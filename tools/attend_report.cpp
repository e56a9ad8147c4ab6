// attend-report: attend-bench JSON runs (one per machine or build) → one self-contained HTML page
// (inline SVG charts and tables, no scripts, no network), and optionally each chart as an SVG file.
//   attend-report run1.json [run2.json …] -o report.html [--svg-dir DIR] [--title T]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "report/bench_results.hpp"
#include "report/report_page.hpp"

namespace {

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f || !(f << text)) throw attend::report::ReportError(path + ": cannot write");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "attend-report: an HTML report (speed-ups over oneDNN, rooflines, decode bandwidth, machines) "
      "from attend-bench --benchmark_format=json output"};
  std::vector<std::string> inputs;
  std::string output, svg_dir, title = "attend-bench report";
  app.add_option("runs", inputs, "attend-bench JSON files (one per machine or build)")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("-o,--output", output, "the HTML page to write")->required();
  app.add_option("--svg-dir", svg_dir, "also write each chart as a standalone SVG into this (existing) directory")
      ->check(CLI::ExistingDirectory);
  app.add_option("--title", title, "the page's title");
  CLI11_PARSE(app, argc, argv);
  try {
    std::vector<attend::report::BenchRun> runs;
    for (const std::string& path : inputs) runs.push_back(attend::report::load_bench_json(path));
    // Labels name the runs in charts: make them distinct.
    for (size_t i = 0; i < runs.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (runs[j].label == runs[i].label) runs[i].label += "#" + std::to_string(i + 1);
    write_file(output, attend::report::report_html(runs, title));
    size_t charts = 0;
    if (!svg_dir.empty())
      for (const auto& [name, svg] : attend::report::report_charts(runs)) {
        write_file(svg_dir + "/" + name, svg + "\n");
        ++charts;
      }
    std::printf("attend-report: %zu run(s) -> %s%s\n", runs.size(), output.c_str(),
                charts ? (" and " + std::to_string(charts) + " SVG chart(s) in " + svg_dir).c_str() : "");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attend-report: %s\n", e.what());
    return 1;
  }
  return 0;
}
