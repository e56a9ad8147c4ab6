// What a microkernel test run reports, in plain C types (see ukernel_tester.hpp: the per-ISA
// translation units must not share inline standard-library code with the rest of the binary).
#pragma once

#include <cstdarg>
#include <cstdio>

namespace attend::kernels {

struct UkernelReport {
  long cases = 0;    // cases checked
  int failures = 0;  // cases that failed (each microkernel stops at its first)
  char text[8192] = {};
  int used = 0;
  // Records a failure (printf-style). Defined out of line in ukernel_test.cpp, the one translation
  // unit built without ISA flags, so no ISA-specific copy of it exists.
  void fail(const char* format, ...) __attribute__((format(printf, 2, 3)));
};

}  // namespace attend::kernels
