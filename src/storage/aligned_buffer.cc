#include "storage/aligned_buffer.h"

#include <cstring>
#include <new>
#include <sys/mman.h>

namespace recemb::internal {
namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kHugePageBytes = size_t{2} << 20;

}  // namespace

void* allocate_aligned_bytes(size_t bytes, size_t& mapped_bytes) {
  mapped_bytes = 0;
  // Beyond this, the byte count (rounded up to whole huge pages) would wrap around size_t: no
  // system has that much memory anyway.
  if (bytes > static_cast<size_t>(PTRDIFF_MAX)) throw std::bad_alloc();
  if (bytes >= kHugePageBytes) {
    // Round up to whole huge pages so the tail is huge-page backed as well. Anonymous mappings are
    // zero-filled, and pages are only committed when first touched.
    const size_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    void* memory =
        mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) throw std::bad_alloc();
    madvise(memory, rounded, MADV_HUGEPAGE);  // advice only: ignored where THP is off
    mapped_bytes = rounded;
    return memory;
  }
  void* memory = ::operator new (bytes, std::align_val_t{kAlignment});
  std::memset(memory, 0, bytes);
  return memory;
}

void release_aligned_bytes(void* data, size_t mapped_bytes) {
  if (data == nullptr) return;
  if (mapped_bytes != 0) {
    munmap(data, mapped_bytes);
  } else {
    ::operator delete (data, std::align_val_t{kAlignment});
  }
}

}  // namespace recemb::internal
