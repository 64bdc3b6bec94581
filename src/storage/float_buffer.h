// An owned, zero-initialised, 64-byte aligned array of floats. Large buffers (>= 2 MiB) are mapped
// anonymously and advised to use transparent huge pages: a random row gather over a big table is
// bound by TLB misses, and 2 MiB pages halve them (docs/performance.md, "Decisions").
#ifndef RECEMB_STORAGE_FLOAT_BUFFER_H_
#define RECEMB_STORAGE_FLOAT_BUFFER_H_

#include <cstddef>
#include <span>

namespace recemb::internal {

class FloatBuffer {
 public:
  FloatBuffer() = default;
  // Allocates `size` floats, all 0. Throws std::bad_alloc when memory is exhausted or `size`
  // floats would take more than PTRDIFF_MAX bytes.
  explicit FloatBuffer(size_t size);
  ~FloatBuffer();
  FloatBuffer(FloatBuffer&& other) noexcept;
  FloatBuffer& operator=(FloatBuffer&& other) noexcept;
  FloatBuffer(const FloatBuffer&) = delete;
  FloatBuffer& operator=(const FloatBuffer&) = delete;

  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<float> span() { return {data_, size_}; }
  std::span<const float> span() const { return {data_, size_}; }
  // Whether the buffer was mapped with the huge-page advice (large buffers only).
  bool mapped() const { return mapped_bytes_ != 0; }

 private:
  void release();

  float* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_bytes_ = 0;  // 0: allocated with aligned operator new
};

}  // namespace recemb::internal

#endif  // RECEMB_STORAGE_FLOAT_BUFFER_H_
