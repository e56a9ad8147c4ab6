// Anonymous mappings that transparent huge pages can back whole: a KV store's pool, a projection's
// packed weights (runtime-internal).
#pragma once

#include <cstddef>

#include "internal_api.hpp"

namespace attend::detail {

/// 2 MiB, the x86-64 huge page.
constexpr size_t kHugePage = size_t{2} << 20;

/// An anonymous, zero-filled mapping of at least `bytes` (its length in `mapped`), advised
/// MADV_HUGEPAGE (Debian's THP mode is "madvise"). From 2 MiB on it starts on a 2 MiB boundary and
/// covers whole 2 MiB pages, so huge pages can back all of it: at mmap's own 4 KiB alignment a
/// pool's first and last partial 2 MiB stayed in 4 KiB pages, up to a third of a small cache, and
/// decode over the heads there ran slower (D2's shape over an i8 cache, 8.7 MB: 70.0% of a read
/// against 74.3%; docs/performance.md, session 29). The rounding holds at most one 2 MiB page
/// more; untouched pages take no memory. Throws std::bad_alloc if the mapping fails; release with
/// unmap_huge_pages(p, mapped).
ATTEND_INTERNAL void* map_huge_pages(size_t bytes, size_t& mapped);
ATTEND_INTERNAL void unmap_huge_pages(void* p, size_t mapped);

}  // namespace attend::detail
