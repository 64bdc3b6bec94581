#include "dlrm/dense_isa.h"

#include <algorithm>
#include <cstdlib>

#include "recemb/error.h"

namespace recemb::dlrm {
namespace {

constexpr DenseIsa kAllIsas[] = {DenseIsa::kBaseline, DenseIsa::kAvx2, DenseIsa::kAvx512};

bool cpu_runs([[maybe_unused]] DenseIsa isa) {
#ifdef RECEMB_DENSE_X86_KERNELS
  // __builtin_cpu_supports also checks that the operating system saves the registers' state.
  // (__builtin_cpu_init: this may run in a static initialiser, before libgcc's own.)
  __builtin_cpu_init();
  switch (isa) {
    case DenseIsa::kBaseline:
      return true;
    case DenseIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case DenseIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }
  return false;
#else
  // Other targets: the baseline kernels only (train/CMakeLists.txt).
  return isa == DenseIsa::kBaseline;
#endif
}

std::string names_of(std::span<const DenseIsa> isas) {
  std::string names;
  for (const DenseIsa isa : isas) {
    names += (names.empty() ? "" : ", ") + std::string(dense_isa_name(isa));
  }
  return names;
}

}  // namespace

std::string_view dense_isa_name(DenseIsa isa) {
  switch (isa) {
    case DenseIsa::kBaseline:
      return "baseline";
    case DenseIsa::kAvx2:
      return "avx2";
    case DenseIsa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

std::vector<DenseIsa> supported_dense_isas() {
  std::vector<DenseIsa> isas;
  for (const DenseIsa isa : kAllIsas) {
    if (cpu_runs(isa)) isas.push_back(isa);
  }
  return isas;
}

DenseIsa widest_dense_isa() { return supported_dense_isas().back(); }

DenseIsa choose_dense_isa(const char* requested, std::span<const DenseIsa> supported) {
  if (requested == nullptr || *requested == '\0') return supported.back();
  const auto* const named =
      std::find_if(std::begin(kAllIsas), std::end(kAllIsas),
                   [&](DenseIsa isa) { return dense_isa_name(isa) == requested; });
  if (named == std::end(kAllIsas)) {
    throw InvalidArgument(std::string("RECEMB_DENSE_ISA = '") + requested +
                          "' is not an instruction set of the dense layers; use one of "
                          "avx512, avx2, baseline (this CPU runs " +
                          names_of(supported) + "), or unset it for the widest");
  }
  if (std::find(supported.begin(), supported.end(), *named) == supported.end()) {
    throw InvalidArgument(std::string("RECEMB_DENSE_ISA = '") + requested +
                          "' asks for an instruction set this CPU (or build) lacks; it runs " +
                          names_of(supported));
  }
  return *named;
}

DenseIsa default_dense_isa() {
  return choose_dense_isa(std::getenv("RECEMB_DENSE_ISA"), supported_dense_isas());
}

const DenseKernels& dense_kernels(DenseIsa isa) {
  if (!cpu_runs(isa)) {
    throw InvalidArgument("the dense layers' instruction set " + std::string(dense_isa_name(isa)) +
                          " is not available: this CPU (and build) runs " +
                          names_of(supported_dense_isas()) +
                          " (RECEMB_DENSE_ISA chooses among them)");
  }
  switch (isa) {
#ifdef RECEMB_DENSE_X86_KERNELS
    case DenseIsa::kAvx2:
      return recemb_dense_kernels_avx2;
    case DenseIsa::kAvx512:
      return recemb_dense_kernels_avx512;
#endif
    default:
      return recemb_dense_kernels_baseline;
  }
}

}  // namespace recemb::dlrm
