#include "storage/float_buffer.h"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <new>
#include <sys/mman.h>
#include <utility>

namespace recemb::internal {
namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kHugePageBytes = size_t{2} << 20;

}  // namespace

FloatBuffer::FloatBuffer(size_t size) : size_(size) {
  if (size == 0) return;
  // Beyond this, the byte count (rounded up to whole huge pages) would wrap around size_t: no
  // system has that much memory anyway.
  if (size > static_cast<size_t>(std::numeric_limits<ptrdiff_t>::max()) / sizeof(float)) {
    throw std::bad_alloc();
  }
  const size_t bytes = size * sizeof(float);
  if (bytes >= kHugePageBytes) {
    // Round up to whole huge pages so the tail is huge-page backed as well. Anonymous mappings are
    // zero-filled, and pages are only committed when first touched.
    const size_t mapped_bytes = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    void* memory =
        mmap(nullptr, mapped_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) throw std::bad_alloc();
    madvise(memory, mapped_bytes, MADV_HUGEPAGE);  // advice only: ignored where THP is off
    data_ = static_cast<float*>(memory);
    mapped_bytes_ = mapped_bytes;
    return;
  }
  data_ = static_cast<float*>(::operator new (bytes, std::align_val_t{kAlignment}));
  std::fill_n(data_, size, 0.0f);
}

FloatBuffer::~FloatBuffer() { release(); }

FloatBuffer::FloatBuffer(FloatBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_bytes_(std::exchange(other.mapped_bytes_, 0)) {}

FloatBuffer& FloatBuffer::operator=(FloatBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
  }
  return *this;
}

void FloatBuffer::release() {
  if (data_ == nullptr) return;
  if (mapped_bytes_ != 0) {
    munmap(data_, mapped_bytes_);
  } else {
    ::operator delete (data_, std::align_val_t{kAlignment});
  }
  data_ = nullptr;
}

}  // namespace recemb::internal
