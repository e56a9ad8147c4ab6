// The charts of attend-report as standalone SVG (inline in the page, or written alone): grouped
// horizontal bars and a log-log roofline. Every data point is one element of class "mark" carrying
// its values in data-* attributes and a <title> (the tooltip), so the page needs no JavaScript and
// tests can read the chart back.
#pragma once

#include <string>
#include <vector>

namespace attend::report {

/// A linear or log10 map from data [d0, d1] to pixels [p0, p1], with round ticks.
struct Scale {
  double d0 = 0, d1 = 1, p0 = 0, p1 = 1;
  bool log = false;
  double operator()(double v) const;
  /// Tick values inside [d0, d1]: 1, 2 or 5 × 10^k steps (linear) or decades (log).
  std::vector<double> ticks(int target = 6) const;
};
/// A linear scale over [0, max·1.08] (max > 0) with a round upper end.
Scale nice_linear(double max, double p0, double p1);
/// A log scale over whole decades covering [lo, hi] (both > 0).
Scale nice_log(double lo, double hi, double p0, double p1);

/// "1.5", "12", "0.25", "3.2k": a short label for a tick or a value.
std::string short_number(double v);
/// XML text escaping (&, <, >, ").
std::string xml_escape(const std::string& s);

struct BarChart {
  std::string title, value_label;
  std::vector<std::string> categories;  // one row group each (shapes)
  std::vector<std::string> series;      // one bar per category each (implementations or machines)
  /// values[s][c]: series s in category c; NaN or ≤ 0 = no bar.
  std::vector<std::vector<double>> values;
  double reference = 0;  // a vertical reference line at this value (e.g. 1 = parity); 0 = none
  std::string reference_label;
  std::string value_format = "x";  // "x": "2.3×" labels; "%": "91.2%"; "" plain numbers
};
std::string bar_chart_svg(const BarChart& chart);

struct RooflinePoint {
  std::string label, series;  // series picks the colour (the entry's group)
  double intensity = 0;       // FLOP per byte
  double gflops = 0;
};
struct Roof {
  std::string label;
  double gflops = 0;  // a compute ceiling (horizontal)
};
struct Roofline {
  std::string title;
  double bandwidth_gbps = 0;  // the memory roof: GFLOP/s = intensity × bandwidth (0: none)
  std::string bandwidth_label;
  std::vector<Roof> roofs;
  std::vector<RooflinePoint> points;
};
std::string roofline_svg(const Roofline& chart);

/// The colour of series i (a fixed palette, distinguishable in print).
const char* series_colour(size_t i);

}  // namespace attend::report
