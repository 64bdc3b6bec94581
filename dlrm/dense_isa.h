// The instruction set of the trainer's dense layers, chosen when a model is built: the widest
// the CPU runs (AVX-512 F/VL/DQ/BW, else AVX2 + FMA, else the target's baseline, SSE2 on x86-64),
// or a narrower one that the environment variable RECEMB_DENSE_ISA (avx512, avx2 or baseline)
// asks for, for testing and measurement. One build runs on any CPU of its target; the kernels
// of each set are compiled apart (dense_kernels.h, docs/training.md "Instruction set").
//
//   const DenseIsa isa = default_dense_isa();          // RECEMB_DENSE_ISA, else the widest
//   const DenseKernels& kernels = dense_kernels(isa);  // InvalidArgument if the CPU lacks it
#ifndef RECEMB_DLRM_DENSE_ISA_H_
#define RECEMB_DLRM_DENSE_ISA_H_

#include <span>
#include <string_view>
#include <vector>

#include "dlrm/dense_kernels.h"

namespace recemb::dlrm {

// Narrowest first.
enum class DenseIsa { kBaseline, kAvx2, kAvx512 };

// "baseline", "avx2", "avx512": the names RECEMB_DENSE_ISA takes and the start-up line prints.
std::string_view dense_isa_name(DenseIsa isa);

// The sets this build has kernels for and this CPU runs, narrowest first (kBaseline always).
std::vector<DenseIsa> supported_dense_isas();

// The widest of supported_dense_isas().
DenseIsa widest_dense_isa();

// The set `requested` names (null or empty: the widest of `supported`), where `supported` are
// the sets the CPU runs, narrowest first. Throws InvalidArgument naming RECEMB_DENSE_ISA, the
// value and the supported sets when `requested` is not one of the names or not supported.
DenseIsa choose_dense_isa(const char* requested, std::span<const DenseIsa> supported);

// choose_dense_isa(RECEMB_DENSE_ISA, supported_dense_isas()): the set the environment asks for,
// else the widest this CPU runs.
DenseIsa default_dense_isa();

// The kernels of `isa`; throws InvalidArgument naming the sets this CPU runs when it lacks `isa`.
const DenseKernels& dense_kernels(DenseIsa isa);

}  // namespace recemb::dlrm

#endif  // RECEMB_DLRM_DENSE_ISA_H_
