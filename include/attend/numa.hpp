// attend::numa_nodes — the machine's NUMA nodes, their CPUs and memory, as the operating system
// reports them (/sys/devices/system/node); what ContextConfig::numa_node chooses among.
#pragma once

#include <attend/export.hpp>
#include <cstdint>
#include <vector>

namespace attend {

struct NumaNode {
  int id = 0;
  std::vector<int> cpus;     ///< the node's online CPUs
  int64_t memory_bytes = 0;  ///< its memory (MemTotal), 0 if unknown
  int64_t free_bytes = 0;    ///< free now (MemFree), 0 if unknown
};

/// The NUMA nodes that have CPUs, in id order. A machine (or container) without NUMA information
/// is one node 0 holding every online CPU and the machine's memory.
ATTEND_API std::vector<NumaNode> numa_nodes();

}  // namespace attend
