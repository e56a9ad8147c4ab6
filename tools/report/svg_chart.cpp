#include "svg_chart.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

namespace attend::report {

double Scale::operator()(double v) const {
  const double a = log ? std::log10(d0) : d0, b = log ? std::log10(d1) : d1;
  const double x = log ? std::log10(v) : v;
  return p0 + (x - a) / (b - a) * (p1 - p0);
}

std::vector<double> Scale::ticks(int target) const {
  std::vector<double> t;
  if (log) {
    for (double d = std::pow(10.0, std::ceil(std::log10(d0) - 1e-9)); d <= d1 * (1 + 1e-9); d *= 10) t.push_back(d);
    return t;
  }
  const double span = d1 - d0;
  if (!(span > 0)) return {d0};
  const double raw = span / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  for (double v = std::ceil(d0 / step - 1e-9) * step; v <= d1 + step * 1e-9; v += step) t.push_back(v);
  return t;
}

Scale nice_linear(double max, double p0, double p1) {
  Scale s{0, 1, p0, p1, false};
  if (!(max > 0)) return s;
  const double want = max * 1.08;
  const double mag = std::pow(10.0, std::floor(std::log10(want)));
  for (double m : {1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0})
    if (m * mag >= want) {
      s.d1 = m * mag;
      break;
    }
  return s;
}

Scale nice_log(double lo, double hi, double p0, double p1) {
  Scale s{1, 10, p0, p1, true};
  if (!(lo > 0) || !(hi > 0)) return s;
  s.d0 = std::pow(10.0, std::floor(std::log10(lo)));
  s.d1 = std::pow(10.0, std::ceil(std::log10(hi)));
  if (s.d1 <= s.d0) s.d1 = s.d0 * 10;
  return s;
}

std::string short_number(double v) {
  char buf[32];
  const double a = std::abs(v);
  if (a >= 1e4)
    std::snprintf(buf, sizeof buf, "%.0fk", v / 1e3);
  else if (a >= 1e3) {
    std::snprintf(buf, sizeof buf, "%.1fk", v / 1e3);
    std::string k = buf;
    if (k.size() > 3 && k.compare(k.size() - 3, 3, ".0k") == 0) k.erase(k.size() - 3, 2);  // "1.0k" → "1k"
    return k;
  } else if (a >= 100)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else if (a >= 10)
    std::snprintf(buf, sizeof buf, "%.1f", v);
  else if (a >= 1)
    std::snprintf(buf, sizeof buf, "%.2f", v);
  else if (a == 0)
    return "0";
  else
    std::snprintf(buf, sizeof buf, "%.2g", v);
  std::string s = buf;
  // "2.50" → "2.5", "1.00" → "1": trailing zeros of a fraction say nothing on an axis.
  if (s.find('.') != std::string::npos && s.find_first_of("ek") == std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return s;
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  return out;
}

const char* series_colour(size_t i) {
  static const char* palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                  "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
  return palette[i % (sizeof palette / sizeof palette[0])];
}

namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}
std::string value_attr(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

const char* kStyle =
    "<style>text{font-family:sans-serif;font-size:11px;fill:#222}.title{font-size:14px;font-weight:bold}"
    ".axis line,.axis path{stroke:#888}.grid{stroke:#e4e4e4}.ref{stroke:#444;stroke-dasharray:4 3}"
    ".roof{stroke-width:2;fill:none}</style>";

}  // namespace

std::string bar_chart_svg(const BarChart& c) {
  // One row per bar that has a value: the category (bold) on its group's first row, the series
  // name beside each bar, bars coloured by series.
  const double left = 250, right = 70, top = 48, bottom = 44;
  const double bar = 13, gap = 4, group_gap = 10;
  struct Row {
    size_t si, ci;
    double v, y;
  };
  std::vector<Row> rows;
  double y = top;
  for (size_t ci = 0; ci < c.categories.size(); ++ci) {
    bool any = false;
    for (size_t si = 0; si < c.series.size(); ++si) {
      const double v = si < c.values.size() && ci < c.values[si].size() ? c.values[si][ci] : NAN;
      if (!std::isfinite(v) || v <= 0) continue;
      rows.push_back({si, ci, v, y});
      y += bar + gap;
      any = true;
    }
    if (any) y += group_gap;
  }
  const double plot_bottom = std::max(y, top + 40.0);
  const double width = 760, height = plot_bottom + bottom;
  double max = c.reference;
  for (const Row& r : rows) max = std::max(max, r.v);
  const Scale x = nice_linear(max, left, width - right);
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart bars\" width=\"" << width << "\" height=\""
    << num(height) << "\" viewBox=\"0 0 " << width << " " << num(height) << "\">" << kStyle;
  o << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>";
  o << "<text class=\"title\" x=\"8\" y=\"18\">" << xml_escape(c.title) << "</text>";
  // Value axis along the bottom, with grid lines.
  o << "<g class=\"axis x\" data-min=\"" << value_attr(x.d0) << "\" data-max=\"" << value_attr(x.d1) << "\">";
  for (double t : x.ticks(6)) {
    o << "<line class=\"grid\" x1=\"" << num(x(t)) << "\" x2=\"" << num(x(t)) << "\" y1=\"" << top << "\" y2=\""
      << num(plot_bottom) << "\"/>";
    o << "<line class=\"tick\" x1=\"" << num(x(t)) << "\" x2=\"" << num(x(t)) << "\" y1=\"" << num(plot_bottom)
      << "\" y2=\"" << num(plot_bottom + 4) << "\" data-value=\"" << value_attr(t) << "\"/>";
    o << "<text class=\"tick-label\" text-anchor=\"middle\" x=\"" << num(x(t)) << "\" y=\"" << num(plot_bottom + 16)
      << "\">" << short_number(t) << "</text>";
  }
  o << "<line x1=\"" << left << "\" x2=\"" << num(width - right) << "\" y1=\"" << num(plot_bottom) << "\" y2=\""
    << num(plot_bottom) << "\"/>";
  o << "<text class=\"axis-title\" text-anchor=\"middle\" x=\"" << num((left + width - right) / 2) << "\" y=\""
    << num(plot_bottom + 34) << "\">" << xml_escape(c.value_label) << "</text></g>";
  // Row labels: the category on its first row, the series on every row.
  o << "<g class=\"axis y\">";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    if (i == 0 || rows[i - 1].ci != r.ci)
      o << "<text class=\"category\" font-weight=\"bold\" x=\"8\" y=\"" << num(r.y + bar - 3) << "\">"
        << xml_escape(c.categories[r.ci]) << "</text>";
    o << "<text class=\"series\" text-anchor=\"end\" x=\"" << left - 6 << "\" y=\"" << num(r.y + bar - 3) << "\">"
      << xml_escape(c.series[r.si]) << "</text>";
  }
  o << "<line x1=\"" << left << "\" x2=\"" << left << "\" y1=\"" << top << "\" y2=\"" << num(plot_bottom) << "\"/></g>";
  // Bars.
  o << "<g class=\"marks\">";
  for (const Row& r : rows) {
    const std::string label = short_number(r.v) + (c.value_format == "x" ? "×" : c.value_format == "%" ? "%" : "");
    o << "<rect class=\"mark\" data-series=\"" << xml_escape(c.series[r.si]) << "\" data-category=\""
      << xml_escape(c.categories[r.ci]) << "\" data-value=\"" << value_attr(r.v) << "\" x=\"" << left << "\" y=\""
      << num(r.y) << "\" width=\"" << num(x(r.v) - x(0)) << "\" height=\"" << bar << "\" fill=\"" << series_colour(r.si)
      << "\"><title>" << xml_escape(c.series[r.si] + " · " + c.categories[r.ci] + ": " + label) << "</title></rect>";
    o << "<text class=\"value\" x=\"" << num(x(r.v) + 4) << "\" y=\"" << num(r.y + bar - 3) << "\">" << label
      << "</text>";
  }
  o << "</g>";
  if (c.reference > 0) {
    o << "<line class=\"ref\" x1=\"" << num(x(c.reference)) << "\" x2=\"" << num(x(c.reference)) << "\" y1=\""
      << top - 6 << "\" y2=\"" << num(plot_bottom) << "\" data-value=\"" << value_attr(c.reference) << "\"/>";
    if (!c.reference_label.empty())
      o << "<text x=\"" << num(x(c.reference) + 3) << "\" y=\"" << top - 8 << "\">" << xml_escape(c.reference_label)
        << "</text>";
  }
  o << "</svg>";
  return o.str();
}

std::string roofline_svg(const Roofline& c) {
  const double left = 70, right = 130, top = 50, bottom = 48, width = 760, height = 460;
  double xlo = 1e30, xhi = 0, yhi = 0, ylo = 1e30;
  for (const RooflinePoint& p : c.points) {
    if (!(p.intensity > 0) || !(p.gflops > 0)) continue;
    xlo = std::min(xlo, p.intensity);
    xhi = std::max(xhi, p.intensity);
    ylo = std::min(ylo, p.gflops);
    yhi = std::max(yhi, p.gflops);
  }
  for (const Roof& r : c.roofs) yhi = std::max(yhi, r.gflops);
  if (xhi == 0) xlo = 0.1, xhi = 100, ylo = 1, yhi = std::max(yhi, 100.0);
  const Scale x = nice_log(xlo, xhi, left, width - right);
  const Scale y = nice_log(std::min(ylo, yhi / 100), yhi * 1.2, top + (height - top - bottom), top);
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart roofline\" width=\"" << width << "\" height=\""
    << height << "\" viewBox=\"0 0 " << width << " " << height << "\">" << kStyle;
  o << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>";
  o << "<text class=\"title\" x=\"" << left << "\" y=\"20\">" << xml_escape(c.title) << "</text>";
  const double xb = height - bottom;
  o << "<g class=\"axis x\" data-min=\"" << value_attr(x.d0) << "\" data-max=\"" << value_attr(x.d1)
    << "\" data-log=\"1\">";
  for (double t : x.ticks()) {
    o << "<line class=\"grid\" x1=\"" << num(x(t)) << "\" x2=\"" << num(x(t)) << "\" y1=\"" << top << "\" y2=\""
      << num(xb) << "\"/><line class=\"tick\" x1=\"" << num(x(t)) << "\" x2=\"" << num(x(t)) << "\" y1=\"" << num(xb)
      << "\" y2=\"" << num(xb + 4) << "\" data-value=\"" << value_attr(t) << "\"/><text class=\"tick-label\" "
      << "text-anchor=\"middle\" x=\"" << num(x(t)) << "\" y=\"" << num(xb + 16) << "\">" << short_number(t)
      << "</text>";
  }
  o << "<line x1=\"" << left << "\" x2=\"" << num(width - right) << "\" y1=\"" << num(xb) << "\" y2=\"" << num(xb)
    << "\"/><text class=\"axis-title\" text-anchor=\"middle\" x=\"" << num((left + width - right) / 2) << "\" y=\""
    << num(xb + 34) << "\">arithmetic intensity (FLOP per byte moved)</text></g>";
  o << "<g class=\"axis y\" data-min=\"" << value_attr(y.d0) << "\" data-max=\"" << value_attr(y.d1)
    << "\" data-log=\"1\">";
  for (double t : y.ticks()) {
    o << "<line class=\"grid\" x1=\"" << left << "\" x2=\"" << num(width - right) << "\" y1=\"" << num(y(t))
      << "\" y2=\"" << num(y(t)) << "\"/><line class=\"tick\" x1=\"" << left - 4 << "\" x2=\"" << left << "\" y1=\""
      << num(y(t)) << "\" y2=\"" << num(y(t)) << "\" data-value=\"" << value_attr(t)
      << "\"/><text class=\"tick-label\" text-anchor=\"end\" x=\"" << left - 7 << "\" y=\"" << num(y(t) + 4) << "\">"
      << short_number(t) << "</text>";
  }
  o << "<line x1=\"" << left << "\" x2=\"" << left << "\" y1=\"" << top << "\" y2=\"" << num(xb)
    << "\"/><text class=\"axis-title\" text-anchor=\"middle\" transform=\"rotate(-90)\" x=\"" << num(-(top + xb) / 2)
    << "\" y=\"16\">GFLOP/s</text></g>";
  // Roofs: min(peak, intensity × bandwidth) for each compute ceiling; the memory slope alone too.
  o << "<g class=\"roofs\">";
  const double bw = c.bandwidth_gbps;
  for (size_t i = 0; i < c.roofs.size(); ++i) {
    const Roof& r = c.roofs[i];
    if (!(r.gflops > 0)) continue;
    const double knee = bw > 0 ? r.gflops / bw : x.d0;
    std::ostringstream d;
    if (bw > 0 && knee > x.d0) {
      const double start = std::max(x.d0, y.d0 / bw);
      d << "M" << num(x(start)) << "," << num(y(start * bw)) << " L" << num(x(std::min(knee, x.d1))) << ","
        << num(y(std::min(knee, x.d1) * bw));
    } else {
      d << "M" << num(x(x.d0)) << "," << num(y(r.gflops));
    }
    if (knee < x.d1) d << " L" << num(x(x.d1)) << "," << num(y(r.gflops));
    o << "<path class=\"roof\" data-roof=\"" << xml_escape(r.label) << "\" data-gflops=\"" << value_attr(r.gflops)
      << "\" d=\"" << d.str() << "\" stroke=\"" << (i == 0 ? "#333" : "#999") << "\"/>";
    o << "<text x=\"" << num(width - right + 4) << "\" y=\"" << num(y(r.gflops) + 4) << "\">"
      << xml_escape(r.label + " " + short_number(r.gflops)) << "</text>";
  }
  if (bw > 0) {
    o << "<text class=\"bandwidth\" data-gbps=\"" << value_attr(bw) << "\" x=\"" << num(x(x.d0) + 6) << "\" y=\""
      << num(std::min(xb - 6, y(x.d0 * bw) - 6)) << "\">" << xml_escape(c.bandwidth_label) << "</text>";
  }
  o << "</g>";
  // Points, coloured by series, with a legend of the series.
  std::vector<std::string> series;
  for (const RooflinePoint& p : c.points)
    if (std::find(series.begin(), series.end(), p.series) == series.end()) series.push_back(p.series);
  o << "<g class=\"marks\">";
  for (const RooflinePoint& p : c.points) {
    if (!(p.intensity > 0) || !(p.gflops > 0)) continue;
    const size_t si = static_cast<size_t>(std::find(series.begin(), series.end(), p.series) - series.begin());
    o << "<circle class=\"mark\" data-label=\"" << xml_escape(p.label) << "\" data-series=\"" << xml_escape(p.series)
      << "\" data-x=\"" << value_attr(p.intensity) << "\" data-y=\"" << value_attr(p.gflops) << "\" cx=\""
      << num(x(p.intensity)) << "\" cy=\"" << num(y(p.gflops)) << "\" r=\"4\" fill=\"" << series_colour(si)
      << "\" fill-opacity=\"0.75\"><title>"
      << xml_escape(p.label + ": " + short_number(p.gflops) + " GFLOP/s at " + short_number(p.intensity) + " FLOP/byte")
      << "</title></circle>";
  }
  // The legend: a row under the title.
  o << "</g><g class=\"legend\">";
  double lx = left;
  for (size_t i = 0; i < series.size(); ++i) {
    o << "<circle cx=\"" << num(lx + 4) << "\" cy=\"" << top - 10 << "\" r=\"4\" fill=\"" << series_colour(i)
      << "\"/><text x=\"" << num(lx + 12) << "\" y=\"" << top - 6 << "\">" << xml_escape(series[i]) << "</text>";
    lx += 24 + 7.0 * static_cast<double>(series[i].size());
  }
  o << "</g></svg>";
  return o.str();
}

}  // namespace attend::report
