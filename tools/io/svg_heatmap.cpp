#include "svg_heatmap.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

namespace attend::io {
namespace {

// Viridis, sampled at five points and interpolated linearly: perceptually ordered, readable in
// greyscale and by colour-blind readers.
std::string colour(double t) {
  static const double stops[5][3] = {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
  t = std::clamp(t, 0.0, 1.0) * 4.0;
  const int i = std::min(3, static_cast<int>(t));
  const double f = t - i;
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", static_cast<int>(stops[i][0] + f * (stops[i + 1][0] - stops[i][0])),
                static_cast<int>(stops[i][1] + f * (stops[i + 1][1] - stops[i][1])),
                static_cast<int>(stops[i][2] + f * (stops[i + 1][2] - stops[i][2])));
  return buf;
}

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else if (c == '"')
      o += "&quot;";
    else
      o += c;
  }
  return o;
}

}  // namespace

int64_t round_tick_step(int64_t n, int target) {
  const double raw = std::max(1.0, static_cast<double>(n) / target);
  double base = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * base >= raw) return static_cast<int64_t>(m * base);
  return static_cast<int64_t>(10 * base);
}

std::string attention_svg(const std::vector<float>& w, int64_t rows, int64_t cols, const std::string& title,
                          int64_t max_cells, MapScale scale) {
  const int64_t R = std::max<int64_t>(1, std::min(rows, max_cells)),
                C = std::max<int64_t>(1, std::min(cols, max_cells));
  // Block averages: output cell (i, j) covers rows [i·rows/R, (i+1)·rows/R) and likewise columns.
  std::vector<double> cell(static_cast<size_t>(R * C), 0.0);
  double vmax = 0.0;
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) {
      const int64_t r0 = i * rows / R, r1 = std::max(r0 + 1, (i + 1) * rows / R);
      const int64_t c0 = j * cols / C, c1 = std::max(c0 + 1, (j + 1) * cols / C);
      double sum = 0.0;
      int64_t n = 0;
      for (int64_t r = r0; r < std::min(r1, rows); ++r)
        for (int64_t c = c0; c < std::min(c1, cols); ++c, ++n) sum += w[static_cast<size_t>(r * cols + c)];
      const double v = n ? sum / n : 0.0;
      cell[static_cast<size_t>(i * C + j)] = v;
      vmax = std::max(vmax, v);
    }
  if (vmax <= 0.0) vmax = 1.0;
  // The scale: t(v) in [0, 1] for a cell value v; labels for the colour bar.
  double top_value = vmax;
  if (scale == MapScale::clipped) {
    std::vector<double> nonzero;
    for (double v : cell)
      if (v > 0.0) nonzero.push_back(v);
    if (!nonzero.empty()) {
      const size_t k = static_cast<size_t>(0.99 * static_cast<double>(nonzero.size() - 1));
      std::nth_element(nonzero.begin(), nonzero.begin() + static_cast<std::ptrdiff_t>(k), nonzero.end());
      top_value = std::max(nonzero[k], 1e-30);
    }
  }
  const double log_top = std::ceil(std::log10(vmax)), log_bottom = log_top - 4.0;  // four decades
  auto t_of = [&](double v) {
    if (scale == MapScale::log) return v > 0.0 ? (std::log10(v) - log_bottom) / (log_top - log_bottom) : -1.0;
    return v / top_value;
  };
  auto fill = [&](double v) { return t_of(v) < 0.0 ? std::string("#d9d9d9") : colour(t_of(v)); };
  const double plot = 512.0, left = 70.0, top = 50.0, cw = plot / C, ch = plot / R;
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(2);
  s << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << left + plot + 130 << "\" height=\"" << top + plot + 70
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << left << "\" y=\"24\" font-size=\"15\">" << escape(title) << "</text>\n"
    << "<g shape-rendering=\"crispEdges\">\n";
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j)
      s << "<rect x=\"" << left + j * cw << "\" y=\"" << top + i * ch << "\" width=\"" << cw + 0.05 << "\" height=\""
        << ch + 0.05 << "\" fill=\"" << fill(cell[static_cast<size_t>(i * C + j)]) << "\"/>\n";
  s << "</g>\n<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << plot << "\" height=\"" << plot
    << "\" fill=\"none\" stroke=\"black\"/>\n";
  // Axis ticks at round token indices, about six per axis (original indices, also when downsampled).
  auto ticks = [&](int64_t n, bool x_axis) {
    const int64_t step = round_tick_step(n);
    for (int64_t t = 0; t < n; t += step) {
      const double at = (t + 0.5) / n * plot;
      if (x_axis)
        s << "<line x1=\"" << left + at << "\" y1=\"" << top + plot << "\" x2=\"" << left + at << "\" y2=\""
          << top + plot + 5 << "\" stroke=\"black\"/><text x=\"" << left + at << "\" y=\"" << top + plot + 18
          << "\" text-anchor=\"middle\">" << t << "</text>\n";
      else
        s << "<line x1=\"" << left - 5 << "\" y1=\"" << top + at << "\" x2=\"" << left << "\" y2=\"" << top + at
          << "\" stroke=\"black\"/><text x=\"" << left - 8 << "\" y=\"" << top + at + 4 << "\" text-anchor=\"end\">"
          << t << "</text>\n";
    }
  };
  ticks(cols, true);
  ticks(rows, false);
  s << "<text x=\"" << left + plot / 2 << "\" y=\"" << top + plot + 40
    << "\" text-anchor=\"middle\">key position</text>\n"
    << "<text x=\"20\" y=\"" << top + plot / 2 << "\" text-anchor=\"middle\" transform=\"rotate(-90 20 "
    << top + plot / 2 << ")\">query position</text>\n";
  // Colour scale.
  const double bx = left + plot + 30, bw = 20;
  for (int k = 0; k < 64; ++k)
    s << "<rect x=\"" << bx << "\" y=\"" << top + plot * (63 - k) / 64.0 << "\" width=\"" << bw << "\" height=\""
      << plot / 64.0 + 0.05 << "\" fill=\"" << colour(k / 63.0) << "\"/>\n";
  s << "<rect x=\"" << bx << "\" y=\"" << top << "\" width=\"" << bw << "\" height=\"" << plot
    << "\" fill=\"none\" stroke=\"black\"/>\n";
  s.precision(3);
  for (int k = 0; k <= 4; ++k) {
    std::ostringstream label;
    if (scale == MapScale::log) {
      label << "1e" << static_cast<int>(log_bottom + k);
    } else {
      label.precision(3);
      label << top_value * k / 4.0 << (scale == MapScale::clipped && k == 4 ? "+" : "");
    }
    s << "<text x=\"" << bx + bw + 6 << "\" y=\"" << top + plot * (1.0 - k / 4.0) + 4 << "\">" << label.str()
      << "</text>\n";
  }
  const char* scale_name = scale == MapScale::log       ? "log scale, grey: 0 (masked)"
                           : scale == MapScale::clipped ? "clipped at the 99th percentile"
                                                        : "linear scale";
  s << "<text x=\"" << bx << "\" y=\"" << top + plot + 18 << "\" font-size=\"10\">" << scale_name << "</text>\n";
  if (rows > R || cols > C)
    s << "<text x=\"" << left << "\" y=\"40\" font-size=\"11\">(" << rows << "×" << cols << " averaged to " << R << "×"
      << C << " cells)</text>\n";
  s << "</svg>\n";
  return s.str();
}

}  // namespace attend::io
