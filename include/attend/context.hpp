// attend::Context — owns the threads and the memory attend's calls use.
#pragma once

#include <attend/export.hpp>
#include <cstddef>
#include <memory>

namespace attend {

namespace detail {
struct ContextAccess;
}

struct ContextConfig {
  /// Threads a call uses when its options leave num_threads at 0. 0 = automatic: OpenMP's default
  /// (omp_get_max_threads()) divided by the number of calls in flight on this context at the
  /// moment the call starts (at least 1), and 1 for a call made from inside an OpenMP parallel
  /// region. A server calling from several threads of its own therefore does not oversubscribe.
  int num_threads = 0;
  /// Upper bound, in bytes, on the workspace this context holds (0 = unbounded). A call whose own
  /// workspace would not fit, or would not fit beside what other calls in flight on this context
  /// hold, throws attend::Error (ErrorCode::capacity) before it reads or writes anything.
  size_t max_workspace_bytes = 0;
  /// NUMA placement (one rank or one worker per node): -1 (the default) leaves threads where the
  /// operating system puts them. A node id (attend::numa_nodes()) binds every call's threads — the
  /// calling thread and the OpenMP threads of its parallel loops, which oneDNN's projections use
  /// too — to that node's CPUs (sched_setaffinity, once per thread; the binding stays with the
  /// thread). Memory follows by first touch: the workspace and the KV-cache pages a call writes are
  /// placed on the node of the thread writing them. On a one-node machine node 0 is every CPU (a
  /// no-op). An id without CPUs throws attend::Error at construction. For a whole process per
  /// node, mpirun's `--bind-to numa` does the same from outside.
  int numa_node = -1;
};

/// The execution context of attend's calls: a thread count and the workspace (per-thread tile
/// scratch, split-K partial states, the layer's activations and projection scratchpads) that calls
/// take their memory from, reused from call to call so the hot path does not allocate once warm.
///
/// A server creates one per worker (or shares one) and passes it in the options
/// (SdpaOptions::context, MhaOptions::context); calls with a null context use default_context().
/// Every member function is thread-safe, and so is using one context from several calls at once:
/// each call in flight checks out a workspace of its own. Destroying a context while a call uses
/// it is undefined.
class ATTEND_API Context {
 public:
  Context();
  explicit Context(const ContextConfig& config);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  /// The process-wide context of calls that pass none. Lives until the process exits.
  static Context& default_context();

  /// See ContextConfig. Negative thread counts throw attend::Error.
  void set_num_threads(int threads);
  int num_threads() const;
  void set_max_workspace_bytes(size_t bytes);
  size_t max_workspace_bytes() const;
  /// ContextConfig::numa_node (-1: none).
  int numa_node() const;

  /// Bytes of workspace this context holds now (in use by calls in flight, or kept for reuse).
  size_t workspace_bytes() const;
  /// The most workspace_bytes() has been since construction or the last release().
  size_t peak_workspace_bytes() const;
  /// Returns all workspace kept for reuse to the operating system. Workspace in use by a call in
  /// flight is returned when that call ends. The next call allocates again.
  void release();

 private:
  friend struct detail::ContextAccess;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attend
