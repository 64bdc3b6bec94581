#include "dlrm/jit_product.h"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <libxsmm_cpuid.h>
#include <libxsmm_generator.h>
#include <mutex>
#include <shared_mutex>
#include <sys/mman.h>
#include <unordered_map>
#include <vector>

namespace recemb::dlrm {
namespace {

struct CacheKey {
  JitIsa isa;
  ProductShape shape;
  bool operator==(const CacheKey&) const = default;
};

struct CacheKeyHash {
  size_t operator()(const CacheKey& key) const {
    const ProductShape& s = key.shape;
    uint64_t h = static_cast<uint64_t>(key.isa);
    for (const uint64_t field :
         {static_cast<uint64_t>(s.rows), static_cast<uint64_t>(s.columns),
          static_cast<uint64_t>(s.depth), uint64_t{s.transpose_left}, uint64_t{s.accumulate}}) {
      h = (h ^ field) * 0x100000001b3ull;  // FNV-1a's prime over whole fields
    }
    return static_cast<size_t>(h);
  }
};

// The generator writes a kernel's machine code into a buffer of ours: the kernels of DLRM's layers
// take under 8 KiB. Code that would not fit is a generator error: no kernel for the shape.
constexpr unsigned kCodeBufferBytes = 1u << 20;

[[noreturn]] void abort_for(const ProductShape& shape, const char* what) {
  std::fprintf(stderr,
               "recemb: fatal: %s for the %lld x %lld x %lld matrix product's generated code\n",
               what, static_cast<long long>(shape.rows), static_cast<long long>(shape.columns),
               static_cast<long long>(shape.depth));
  std::abort();
}

// Generates the kernel and copies it into memory of its own, readable and executable but not
// writable. Returns null when libxsmm makes no code for the shape. Called with the cache's lock
// held.
ProductKernel::Function generate(JitIsa isa, const ProductShape& shape) {
  if (shape.rows < 1 || shape.columns < 1 || shape.depth < 1 || shape.rows > INT_MAX ||
      shape.columns > INT_MAX || shape.depth > INT_MAX) {
    return nullptr;
  }
  // Column-major, as libxsmm sees them: out^T [columns, rows] = right^T [columns, depth]
  // op(left)^T [depth, rows], where left^T as stored (transpose_left) is op(left)^T transposed.
  const auto m = static_cast<libxsmm_blasint>(shape.columns);
  const auto n = static_cast<libxsmm_blasint>(shape.rows);
  const auto k = static_cast<libxsmm_blasint>(shape.depth);
  const libxsmm_blasint ld_left = shape.transpose_left ? n : k;
  libxsmm_descriptor_blob blob;
  const libxsmm_gemm_descriptor* descriptor = libxsmm_sgemm_descriptor_init(
      &blob, m, n, k, /*lda=*/m, /*ldb=*/ld_left, /*ldc=*/m, /*alpha=*/1.0f,
      /*beta=*/shape.accumulate ? 1.0f : 0.0f,
      shape.transpose_left ? LIBXSMM_GEMM_FLAG_TRANS_B : LIBXSMM_GEMM_FLAG_NONE,
      LIBXSMM_GEMM_PREFETCH_NONE);
  if (descriptor == nullptr) return nullptr;

  // Kernels are generated one at a time, under the cache's lock: one buffer serves them all
  // (a fresh one per kernel cost most of a model's construction under the sanitizers).
  static std::vector<unsigned char>& buffer = *new std::vector<unsigned char>(kCodeBufferBytes);
  libxsmm_generated_code code = {};
  code.generated_code = buffer.data();
  code.buffer_size = kCodeBufferBytes;
  code.code_type = 2;  // machine code
  code.arch = isa == JitIsa::kAvx512 ? LIBXSMM_X86_AVX512_CORE : LIBXSMM_X86_AVX2;
  libxsmm_generator_gemm_kernel(&code, descriptor);
  if (code.last_error != 0 || code.code_size == 0) return nullptr;

  void* memory =
      mmap(nullptr, code.code_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) abort_for(shape, "mmap failed");
  std::memcpy(memory, buffer.data(), code.code_size);
  if (mprotect(memory, code.code_size, PROT_READ | PROT_EXEC) != 0) {
    abort_for(shape, "mprotect failed");
  }
  return reinterpret_cast<ProductKernel::Function>(memory);
}

// The kernels made so far. Never destroyed, nor is their code unmapped: threads may call a
// kernel until the process ends.
struct Cache {
  std::shared_mutex mutex;
  std::unordered_map<CacheKey, ProductKernel::Function, CacheKeyHash> kernels;
};

Cache& cache() {
  static Cache* const instance = new Cache;
  return *instance;
}

}  // namespace

ProductKernel product_kernel(JitIsa isa, const ProductShape& shape) {
  Cache& kernels = cache();
  const CacheKey key = {.isa = isa, .shape = shape};
  {
    const std::shared_lock lock(kernels.mutex);
    if (const auto found = kernels.kernels.find(key); found != kernels.kernels.end()) {
      return ProductKernel(found->second);
    }
  }
  const std::unique_lock lock(kernels.mutex);
  if (const auto found = kernels.kernels.find(key); found != kernels.kernels.end()) {
    return ProductKernel(found->second);
  }
  // Generated before it is cached: should an allocation throw, nothing is cached.
  const ProductKernel::Function function = generate(isa, shape);
  kernels.kernels.emplace(key, function);
  return ProductKernel(function);
}

}  // namespace recemb::dlrm
