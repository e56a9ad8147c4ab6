#include "huge_pages.hpp"

#include <sys/mman.h>

#include <cstdint>
#include <new>

namespace attend::detail {

void* map_huge_pages(size_t bytes, size_t& mapped) {
  mapped = bytes < kHugePage ? bytes : (bytes + kHugePage - 1) / kHugePage * kHugePage;
  const size_t extra = bytes < kHugePage ? 0 : kHugePage;
  void* p = mmap(nullptr, mapped + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  if (extra) {  // trim to the 2 MiB-aligned `mapped` bytes inside
    const auto at = reinterpret_cast<uintptr_t>(p);
    const uintptr_t aligned = (at + kHugePage - 1) / kHugePage * kHugePage;
    if (aligned > at) munmap(p, aligned - at);
    if (at + extra > aligned) munmap(reinterpret_cast<void*>(aligned + mapped), at + extra - aligned);
    p = reinterpret_cast<void*>(aligned);
  }
#if defined(MADV_HUGEPAGE)
  madvise(p, mapped, MADV_HUGEPAGE);  // advice only: 4 KiB pages if refused
#endif
  return p;
}

void unmap_huge_pages(void* p, size_t mapped) {
  if (p) munmap(p, mapped);
}

}  // namespace attend::detail
