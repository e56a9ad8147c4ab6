// UkernelReport::fail, out of line and built without ISA flags (see ukernel_report.hpp).
#include "ukernel_report.hpp"

#include <algorithm>
#include <cstdarg>
#include <cstdio>

namespace attend::kernels {

void UkernelReport::fail(const char* format, ...) {
  ++failures;
  if (used >= static_cast<int>(sizeof(text)) - 2) return;
  va_list args;
  va_start(args, format);
  const int n = std::vsnprintf(text + used, sizeof(text) - static_cast<size_t>(used) - 1, format, args);
  va_end(args);
  if (n > 0) used = std::min(static_cast<int>(sizeof(text)) - 2, used + n);
  text[used++] = '\n';
  text[used] = '\0';
}

}  // namespace attend::kernels
