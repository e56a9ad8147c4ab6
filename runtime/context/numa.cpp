// NUMA topology from sysfs, and binding a call's threads to one node (ContextConfig::numa_node).
#include "numa.hpp"

#include <sched.h>
#include <unistd.h>

#include <attend/error.hpp>
#include <attend/numa.hpp>
#include <fstream>
#include <sstream>
#include <string>

#if defined(ATTEND_HAVE_OPENMP)
#include <omp.h>
#endif

namespace attend {

namespace {

// "0-3,8,10-11" → {0, 1, 2, 3, 8, 10, 11}.
std::vector<int> parse_cpu_list(const std::string& s) {
  std::vector<int> cpus;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, ',');) {
    if (part.empty() || part == "\n") continue;
    const size_t dash = part.find('-');
    try {
      const int a = std::stoi(part.substr(0, dash));
      const int b = dash == std::string::npos ? a : std::stoi(part.substr(dash + 1));
      for (int c = a; c <= b; ++c) cpus.push_back(c);
    } catch (...) {
      return {};
    }
  }
  return cpus;
}

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

// "Node 0 MemTotal:       24567800 kB" → bytes of `key`.
int64_t meminfo(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    const size_t at = line.find(key + ":");
    if (at == std::string::npos) continue;
    std::stringstream v(line.substr(at + key.size() + 1));
    int64_t kb = 0;
    v >> kb;
    return kb * 1024;
  }
  return 0;
}

}  // namespace

std::vector<NumaNode> numa_nodes() {
  std::vector<NumaNode> nodes;
  const std::vector<int> online = parse_cpu_list(read_line("/sys/devices/system/node/online"));
  for (int id : online) {
    const std::string dir = "/sys/devices/system/node/node" + std::to_string(id);
    NumaNode n;
    n.id = id;
    n.cpus = parse_cpu_list(read_line(dir + "/cpulist"));
    if (n.cpus.empty()) continue;  // memory-only nodes hold no threads
    n.memory_bytes = meminfo(dir + "/meminfo", "MemTotal");
    n.free_bytes = meminfo(dir + "/meminfo", "MemFree");
    nodes.push_back(std::move(n));
  }
  if (nodes.empty()) {  // no NUMA information: one node with everything
    NumaNode n;
    const long count = sysconf(_SC_NPROCESSORS_ONLN);
    for (int c = 0; c < (count > 0 ? count : 1); ++c) n.cpus.push_back(c);
    const long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    n.memory_bytes = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
    n.free_bytes = avail > 0 && page > 0 ? static_cast<int64_t>(avail) * page : 0;
    nodes.push_back(std::move(n));
  }
  return nodes;
}

namespace detail {

std::vector<int> numa_node_cpus(int node) {
  const std::vector<NumaNode> nodes = numa_nodes();
  for (const NumaNode& n : nodes)
    if (n.id == node) return n.cpus;
  std::string ids;
  for (const NumaNode& n : nodes) ids += (ids.empty() ? "" : ", ") + std::to_string(n.id);
  throw Error(ErrorCode::invalid_argument,
              "Context: no NUMA node " + std::to_string(node) + " with CPUs (this machine's: " + ids + ")");
}

namespace {
thread_local int bound_node = -1;  // the node this thread was last bound to by a context

void bind_this_thread(int node, const std::vector<int>& cpus) {
  if (bound_node == node) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus)
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  if (sched_setaffinity(0, sizeof set, &set) == 0) bound_node = node;
}
}  // namespace

void bind_team(int node, const std::vector<int>& cpus, int threads) {
  bind_this_thread(node, cpus);
#if defined(ATTEND_HAVE_OPENMP)
  if (threads > 1 && !omp_in_parallel()) {
#pragma omp parallel num_threads(threads)
    bind_this_thread(node, cpus);
  }
#else
  (void)threads;
#endif
}

}  // namespace detail
}  // namespace attend
