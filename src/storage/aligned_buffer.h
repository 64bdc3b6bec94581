// An owned, zero-initialised, 64-byte aligned array of floats (FloatBuffer) or of 16-bit values
// (HalfBuffer: a bfloat16 or float16 table's rows). Large buffers (>= 2 MiB) are mapped
// anonymously and advised to use transparent huge pages: a random row gather over a big table is
// bound by TLB misses, and 2 MiB pages halve them (docs/performance.md, "Decisions").
#ifndef RECEMB_STORAGE_ALIGNED_BUFFER_H_
#define RECEMB_STORAGE_ALIGNED_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <new>
#include <span>
#include <utility>

namespace recemb::internal {

// The memory of an AlignedBuffer: `bytes` zero bytes, 64-byte aligned; mapped_bytes is set to the
// bytes mapped (0 when allocated with aligned operator new). Throws std::bad_alloc when memory is
// exhausted or `bytes` exceeds PTRDIFF_MAX.
void* allocate_aligned_bytes(size_t bytes, size_t& mapped_bytes);
void release_aligned_bytes(void* data, size_t mapped_bytes);

template <class T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Allocates `size` values, all 0. Throws std::bad_alloc when memory is exhausted or `size`
  // values would take more than PTRDIFF_MAX bytes.
  explicit AlignedBuffer(size_t size) : size_(size) {
    if (size == 0) return;
    if (size > static_cast<size_t>(PTRDIFF_MAX) / sizeof(T)) throw std::bad_alloc();
    data_ = static_cast<T*>(allocate_aligned_bytes(size * sizeof(T), mapped_bytes_));
  }
  ~AlignedBuffer() { release_aligned_bytes(data_, mapped_bytes_); }
  AlignedBuffer(AlignedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        mapped_bytes_(std::exchange(other.mapped_bytes_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    if (this != &other) {
      release_aligned_bytes(data_, mapped_bytes_);
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
    }
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<T> span() { return {data_, size_}; }
  std::span<const T> span() const { return {data_, size_}; }
  // Whether the buffer was mapped with the huge-page advice (large buffers only).
  bool mapped() const { return mapped_bytes_ != 0; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_bytes_ = 0;  // 0: allocated with aligned operator new
};

using FloatBuffer = AlignedBuffer<float>;
using HalfBuffer = AlignedBuffer<uint16_t>;

}  // namespace recemb::internal

#endif  // RECEMB_STORAGE_ALIGNED_BUFFER_H_
