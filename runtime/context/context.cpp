// attend::Context: a pool of workspaces (one per call in flight), allocated with mmap so that
// release() gives the pages back to the operating system at once (malloc would keep large freed
// blocks in its heap once its mmap threshold has grown).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <attend/context.hpp>
#include <attend/error.hpp>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "../parallel/scheduler.hpp"
#include "numa.hpp"
#include "workspace.hpp"

namespace attend {
namespace detail {
namespace {

size_t page_size() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}
size_t page_round(size_t bytes) { return (bytes + page_size() - 1) / page_size() * page_size(); }

// One mmap'd, page-aligned buffer.
struct Buffer {
  void* data = nullptr;
  size_t bytes = 0;
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }
  void reset() {
    if (data) munmap(data, bytes);
    data = nullptr;
    bytes = 0;
  }
  void allocate(size_t b) {
    reset();
    if (b == 0) return;
    void* p = mmap(nullptr, b, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    data = p;
    bytes = b;
  }
};

std::string mib(size_t bytes) {
  return std::to_string(bytes / (1024 * 1024)) + "." + std::to_string(bytes % (1024 * 1024) * 10 / (1024 * 1024)) +
         " MiB (" + std::to_string(bytes) + " bytes)";
}

}  // namespace

size_t bytes_of(const Needs& needs) {
  size_t total = 0;
  for (size_t f : needs.floats) total += page_round(f * sizeof(float));
  return total;
}

struct Lease::Workspace {
  Buffer slots[kSlots];
  size_t bytes() const {
    size_t b = 0;
    for (const Buffer& s : slots) b += s.bytes;
    return b;
  }
};

struct ContextAccess;

}  // namespace detail

struct Context::Impl {
  std::atomic<int> num_threads{0};
  std::atomic<size_t> limit{0};
  std::atomic<int> in_flight{0};
  mutable std::mutex mutex;  // guards everything below
  std::vector<std::unique_ptr<detail::Lease::Workspace>> idle;
  size_t held = 0;  // bytes of every workspace, idle or in use
  size_t peak = 0;
  unsigned long generation = 0;  // bumped by release(): workspaces checked out before are freed on return
  int numa_node = -1;            // ContextConfig::numa_node, and its CPUs
  std::vector<int> numa_cpus;
};

namespace detail {
struct ContextAccess {
  static Context::Impl& impl(Context& c) { return *c.impl_; }
};
}  // namespace detail

Context::Context() : Context(ContextConfig{}) {}
Context::Context(const ContextConfig& config) : impl_(std::make_unique<Impl>()) {
  set_num_threads(config.num_threads);
  set_max_workspace_bytes(config.max_workspace_bytes);
  if (config.numa_node < -1)
    throw Error(ErrorCode::invalid_argument,
                "Context: numa_node must be -1 (none) or a node id, got " + std::to_string(config.numa_node));
  if (config.numa_node >= 0) {
    impl_->numa_cpus = detail::numa_node_cpus(config.numa_node);
    impl_->numa_node = config.numa_node;
  }
}
int Context::numa_node() const { return impl_->numa_node; }
Context::~Context() = default;

Context& Context::default_context() {
  static Context* context = new Context();  // never destroyed: calls may run during static destruction
  return *context;
}

void Context::set_num_threads(int threads) {
  if (threads < 0)
    throw Error(ErrorCode::invalid_argument, "Context: num_threads must be >= 0, got " + std::to_string(threads));
  impl_->num_threads = threads;
}
int Context::num_threads() const { return impl_->num_threads; }
void Context::set_max_workspace_bytes(size_t bytes) { impl_->limit = bytes; }
size_t Context::max_workspace_bytes() const { return impl_->limit; }

size_t Context::workspace_bytes() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->held;
}
size_t Context::peak_workspace_bytes() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->peak;
}

void Context::release() {
  std::vector<std::unique_ptr<detail::Lease::Workspace>> idle;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    for (auto& w : impl_->idle) impl_->held -= w->bytes();
    idle.swap(impl_->idle);
    ++impl_->generation;
    impl_->peak = impl_->held;
  }
  // munmap outside the lock
}

namespace detail {

Lease::Lease(Context* context, int requested_threads) : context_(context ? *context : Context::default_context()) {
  auto& c = ContextAccess::impl(context_);
  const int in_flight = ++c.in_flight;
  if (requested_threads > 0) {
    threads_ = requested_threads;
  } else if (c.num_threads > 0) {
    threads_ = c.num_threads;
  } else {
    threads_ = parallel::default_threads(in_flight);
  }
  if (c.numa_node >= 0) bind_team(c.numa_node, c.numa_cpus, threads_);
}

Lease::~Lease() {
  auto& c = ContextAccess::impl(context_);
  std::unique_ptr<Workspace> done(workspace_);
  if (done) {
    std::lock_guard<std::mutex> lock(c.mutex);
    if (generation_ == c.generation) {
      c.idle.push_back(std::move(done));
    } else {
      c.held -= done->bytes();  // released while in use: give it back now
      done.reset();
    }
  }
  --c.in_flight;
}

void Lease::reserve(const Needs& needs, const char* who) {
  auto& c = ContextAccess::impl(context_);
  const size_t limit = c.limit;
  const size_t need = bytes_of(needs);
  if (limit && need > limit)
    throw Error(ErrorCode::capacity, std::string(who) + ": needs " + detail::mib(need) +
                                         " of workspace; the context's limit is " + detail::mib(limit));
  std::lock_guard<std::mutex> lock(c.mutex);
  if (!workspace_) {
    // The largest idle workspace is the most likely to fit without growing.
    auto best = std::max_element(c.idle.begin(), c.idle.end(),
                                 [](const auto& a, const auto& b) { return a->bytes() < b->bytes(); });
    if (best != c.idle.end()) {
      workspace_ = best->release();
      c.idle.erase(best);
    } else {
      workspace_ = new Workspace();
    }
    generation_ = c.generation;
  }
  Workspace& w = *workspace_;
  auto after = [&] {  // what the context would hold once this call's slots have grown
    size_t mine = 0;
    for (int i = 0; i < kSlots; ++i) mine += std::max(w.slots[i].bytes, page_round(needs.floats[i] * sizeof(float)));
    return c.held - w.bytes() + mine;
  };
  if (limit && after() > limit) {
    for (auto& idle : c.idle) c.held -= idle->bytes();  // drop what no call is using
    c.idle.clear();
    for (int i = 0; i < kSlots; ++i) {  // and this workspace's slots larger than this call needs
      if (w.slots[i].bytes > page_round(needs.floats[i] * sizeof(float))) {
        c.held -= w.slots[i].bytes;
        w.slots[i].reset();
      }
    }
    if (after() > limit)
      throw Error(ErrorCode::capacity, std::string(who) + ": needs " + detail::mib(need) +
                                           " of workspace but other calls in flight on the context hold " +
                                           detail::mib(c.held - w.bytes()) + "; the limit is " + detail::mib(limit));
  }
  for (int i = 0; i < kSlots; ++i) {
    const size_t b = page_round(needs.floats[i] * sizeof(float));
    if (w.slots[i].bytes >= b) continue;
    c.held -= w.slots[i].bytes;
    w.slots[i].allocate(b);
    c.held += b;
  }
  c.peak = std::max(c.peak, c.held);
}

float* Lease::get(Slot slot) const {
  return workspace_ ? static_cast<float*>(workspace_->slots[static_cast<int>(slot)].data) : nullptr;
}

}  // namespace detail
}  // namespace attend
