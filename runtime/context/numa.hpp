// Placing a call's threads on a NUMA node (runtime-internal; see ContextConfig::numa_node).
#pragma once

#include <vector>

namespace attend::detail {

/// The CPUs of NUMA node `node`; attend::Error (invalid_argument) if it has none.
std::vector<int> numa_node_cpus(int node);

/// Binds the calling thread and the OpenMP team of `threads` threads that the call's parallel
/// loops will use to `cpus` (sched_setaffinity), once per thread and node: the threads then
/// first-touch the workspace and cache pages they write, which places them on that node.
void bind_team(int node, const std::vector<int>& cpus, int threads);

}  // namespace attend::detail
