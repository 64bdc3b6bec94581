// Time of the trainer's dense layers per step (dlrm/dlrm_dense_model.h): train_step (forward and
// backward of bottom MLP, interaction, top MLP and loss), predict, and the dense optimizer's
// update, on 1 and 2 threads (the model's num_threads), for DLRM's default shapes (13 dense
// features, 26 embeddings of dim 16, bottom MLP 64-16, top MLP 64-32-1) and batch sizes 512, 2048
// (`recemb train`'s default) and 4096; each on every instruction set this CPU runs
// (dlrm/dense_isa.h), named in the benchmark's name: BM_TrainStep/avx512/batch:2048/threads:1.
//
// Counters: items_processed = examples, and GFLOP/s of the nominal work: 2 flops per multiply-add
// of the matrix products (forward B * sum(in * out) over all layers, backward twice that, less the
// input gradient of the first layer) and of the interaction (forward B * pairs * dim, backward
// twice that). Inputs are random and fixed; the parameters are not updated between iterations.
//
// BM_Gemm: the matrix products of the top MLP's first layer (367 -> 64, three quarters of the
// model's multiply-adds) as the MLP computes them, on blocks of 256 rows (mlp.h), for a batch of
// 2048 (8 blocks spread over 1 or 2 threads, each block's product on one thread): forward
// X W, weight gradient X^T D, input gradient D W^T; and the second layer's forward. Each through
// the trainer's own kernels (dlrm/dense_kernels.h: libxsmm's generated code or Eigen, one entry
// per instruction set, e.g. recemb_avx512: the forward adds the bias, the weight gradient sums it
// and the input gradient takes W^T, as the MLP does) and,
// where the build found them, OpenBLAS, oneDNN (dnnl_sgemm) and libxsmm (libxsmm_sgemm, and a JIT
// kernel of the whole block where libxsmm makes one), each library on one thread per block; and
// the forward of a 1024 -> 1024 layer, which the trainer computes with Eigen (docs/training.md,
// "Performance").
#include <benchmark/benchmark.h>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "dlrm/dense_isa.h"
#include "dlrm/dense_kernels.h"
#include "dlrm/dense_optimizer.h"
#include "dlrm/dlrm_dense_model.h"
#include "support/thread_pool.h"

#ifdef RECEMB_BENCH_OPENBLAS
#include <cblas.h>
#endif
#ifdef RECEMB_BENCH_DNNL
#include <dnnl.h>
#include <omp.h>
#endif
#ifdef RECEMB_BENCH_LIBXSMM
#include <libxsmm.h>
#endif

namespace {

using recemb::dlrm::DenseAdam;
using recemb::dlrm::DenseIsa;
using recemb::dlrm::DenseKernels;
using recemb::dlrm::DenseOptimizer;
using recemb::dlrm::DlrmDenseConfig;
using recemb::dlrm::DlrmDenseModel;
using recemb::dlrm::ParameterBlock;

struct Inputs {
  std::vector<float> dense;
  std::vector<float> labels;
  std::vector<std::vector<float>> embeddings;
  std::vector<std::vector<float>> embedding_gradients;
  std::vector<std::span<const float>> embedding_views;
  std::vector<std::span<float>> gradient_views;
};

Inputs make_inputs(const DlrmDenseConfig& config, int64_t batch_size) {
  std::mt19937_64 random(1);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  Inputs inputs;
  inputs.dense.resize(static_cast<size_t>(batch_size * config.num_dense_features));
  for (float& value : inputs.dense) value = uniform(random);
  for (int64_t b = 0; b < batch_size; ++b) inputs.labels.push_back(uniform(random) > 0.5f);
  for (int64_t f = 0; f < config.num_sparse_features; ++f) {
    std::vector<float> embedding(static_cast<size_t>(batch_size * config.embedding_dim));
    for (float& value : embedding) value = 0.1f * uniform(random);
    inputs.embeddings.push_back(std::move(embedding));
    inputs.embedding_gradients.emplace_back(inputs.embeddings.back().size());
  }
  inputs.embedding_views.assign(inputs.embeddings.begin(), inputs.embeddings.end());
  inputs.gradient_views.assign(inputs.embedding_gradients.begin(),
                               inputs.embedding_gradients.end());
  return inputs;
}

// Nominal multiply-adds of one forward pass per example.
double forward_multiply_adds(const DlrmDenseModel& model) {
  double total = 0.0;
  for (const ParameterBlock& block : model.parameter_blocks()) {
    if (block.shape.size() == 2) total += static_cast<double>(block.shape[0] * block.shape[1]);
  }
  const DlrmDenseConfig& config = model.config();
  const int64_t vectors = config.num_sparse_features + 1;
  return total + static_cast<double>(vectors * (vectors - 1) / 2 * config.embedding_dim);
}

void BM_TrainStep(benchmark::State& state, DenseIsa isa) {
  const DlrmDenseConfig config = {.num_threads = static_cast<int>(state.range(1)),
                                  .dense_isa = isa};
  const int64_t batch_size = state.range(0);
  DlrmDenseModel model(config);
  Inputs inputs = make_inputs(config, batch_size);
  for (auto _ : state) {
    benchmark::DoNotOptimize(model.train_step(inputs.dense, inputs.labels, inputs.embedding_views,
                                              inputs.gradient_views));
  }
  state.SetItemsProcessed(state.iterations() * batch_size);
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * 3.0 * forward_multiply_adds(model) * static_cast<double>(batch_size) * 1e-9,
      benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Predict(benchmark::State& state, DenseIsa isa) {
  const DlrmDenseConfig config = {.num_threads = static_cast<int>(state.range(1)),
                                  .dense_isa = isa};
  const int64_t batch_size = state.range(0);
  DlrmDenseModel model(config);
  Inputs inputs = make_inputs(config, batch_size);
  std::vector<float> probabilities(static_cast<size_t>(batch_size));
  for (auto _ : state) {
    model.predict(inputs.dense, inputs.embedding_views, probabilities);
    benchmark::DoNotOptimize(probabilities.data());
  }
  state.SetItemsProcessed(state.iterations() * batch_size);
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * forward_multiply_adds(model) * static_cast<double>(batch_size) * 1e-9,
      benchmark::Counter::kIsIterationInvariantRate);
}

void BM_DenseAdamApply(benchmark::State& state, DenseIsa isa) {
  DlrmDenseModel model({.dense_isa = isa});
  DenseOptimizer optimizer(DenseAdam{.learning_rate = 1e-6f}, model.num_parameters(), isa);
  std::vector<float> gradients(static_cast<size_t>(model.num_parameters()), 1e-3f);
  for (auto _ : state) {
    optimizer.apply(model.parameters(), gradients);
    benchmark::DoNotOptimize(model.parameters().data());
  }
  state.SetItemsProcessed(state.iterations() * model.num_parameters());
}

// One matrix product C [m, n] += op(A) op(B), row-major, op(A) [m, k], op(B) [k, n], A stored
// transposed ([k, m]) when transpose_a, B ([n, k]) when transpose_b.
struct GemmShape {
  const char* name;
  int m, n, k;
  bool transpose_a, transpose_b;
};
constexpr GemmShape kGemmShapes[] = {
    {"top0_forward", 256, 64, 367, false, false},
    {"top0_weight_gradient", 367, 64, 256, true, false},
    {"top0_input_gradient", 256, 367, 64, false, true},
    {"top1_forward", 256, 32, 64, false, false},
    // A layer of 1024 -> 1024, wider than the trainer's generated code takes (it uses Eigen).
    {"wide_forward", 256, 1024, 1024, false, false},
};
constexpr int64_t kGemmBlocks = 8;  // a batch of 2048 rows

enum class GemmLibrary { kRecemb, kOpenBlas, kDnnl, kLibxsmm, kLibxsmmJit };

// The product through the trainer's kernels, as the MLP calls them (mlp.cc): the forward X W
// after the bias (zeros here), the weight gradient X^T D with the bias gradient's row sums (into
// `bias`), the input gradient D W^T (given W^T).
void gemm_kernels(const DenseKernels& kernels, const GemmShape& shape, const float* a,
                  const float* b, float* c, float* bias) {
  if (shape.transpose_a) {  // a: X [k, m], b: D [k, n]
    kernels.affine_parameter_gradients(a, b, shape.k, shape.m, shape.n, c, bias);
  } else if (shape.transpose_b) {  // a: D [m, k], b: W^T [k, n]
    kernels.affine_input_gradient(a, b, shape.m, shape.n, shape.k, c);
  } else {  // a: X [m, k], b: W [k, n]
    kernels.affine_forward(a, b, bias, shape.m, shape.k, shape.n, false, c);
  }
}

void BM_Gemm(benchmark::State& state, GemmShape shape, GemmLibrary library, DenseIsa isa) {
  const int num_threads = static_cast<int>(state.range(0));
  std::mt19937_64 random(2);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const auto filled = [&](int size) {
    std::vector<float> values(static_cast<size_t>(size * kGemmBlocks));
    for (float& value : values) value = uniform(random);
    return values;
  };
  const std::vector<float> a = filled(shape.m * shape.k);
  const std::vector<float> b = filled(shape.k * shape.n);
  // The trainer's input gradient takes W^T, which the MLP transposes once per batch.
  std::vector<float> b_transposed(b.size());
  if (shape.transpose_b) {
    for (int64_t block = 0; block < kGemmBlocks; ++block) {
      recemb::dlrm::dense_kernels(isa).transpose(b.data() + block * shape.n * shape.k, shape.n,
                                                 shape.k,
                                                 b_transposed.data() + block * shape.n * shape.k);
    }
  }
  std::vector<float> c = filled(shape.m * shape.n);
  // The peer libraries' leading dimensions: unused when none of them was found at configure time.
  [[maybe_unused]] const int lda = shape.transpose_a ? shape.m : shape.k;
  [[maybe_unused]] const int ldb = shape.transpose_b ? shape.k : shape.n;
  const DenseKernels& kernels = recemb::dlrm::dense_kernels(isa);
  // The kernels' bias, one per block (zeros forward; the row sums of D, weight gradient).
  std::vector<float> bias(static_cast<size_t>(shape.n * kGemmBlocks), 0.0f);
#ifdef RECEMB_BENCH_OPENBLAS
  openblas_set_num_threads(1);
#endif
#ifdef RECEMB_BENCH_LIBXSMM
  libxsmm_smmfunction jit = nullptr;
  if (library == GemmLibrary::kLibxsmmJit) {
    // Column-major: C^T [n, m] += B^T op(A)^T, A^T as stored [k, m] transposed when transpose_a.
    const float one = 1.0f;
    const libxsmm_blasint m = shape.n, n = shape.m, k = shape.k, ld_a = lda;
    const int flags = shape.transpose_a ? LIBXSMM_GEMM_FLAG_TRANS_B : LIBXSMM_GEMM_FLAG_NONE;
    jit = libxsmm_smmdispatch(m, n, k, nullptr, &ld_a, nullptr, &one, &one, &flags, nullptr);
    if (jit == nullptr) {
      state.SkipWithError("libxsmm makes no JIT kernel of this shape");
      return;
    }
  }
#endif
  recemb::support::ThreadPool pool(num_threads);
  const auto block_product = [&](int64_t block, int) {
    const float* block_a = a.data() + block * shape.m * shape.k;
    const float* block_b = b.data() + block * shape.k * shape.n;
    float* block_c = c.data() + block * shape.m * shape.n;
    switch (library) {
      case GemmLibrary::kRecemb:
        gemm_kernels(kernels, shape, block_a,
                     shape.transpose_b ? b_transposed.data() + block * shape.k * shape.n : block_b,
                     block_c, bias.data() + block * shape.n);
        break;
#ifdef RECEMB_BENCH_OPENBLAS
      case GemmLibrary::kOpenBlas:
        cblas_sgemm(CblasRowMajor, shape.transpose_a ? CblasTrans : CblasNoTrans,
                    shape.transpose_b ? CblasTrans : CblasNoTrans, shape.m, shape.n, shape.k, 1.0f,
                    block_a, lda, block_b, ldb, 1.0f, block_c, shape.n);
        break;
#endif
#ifdef RECEMB_BENCH_DNNL
      case GemmLibrary::kDnnl:
        omp_set_num_threads(1);  // this thread's OpenMP regions
        dnnl_sgemm(shape.transpose_a ? 'T' : 'N', shape.transpose_b ? 'T' : 'N', shape.m, shape.n,
                   shape.k, 1.0f, block_a, lda, block_b, ldb, 1.0f, block_c, shape.n);
        break;
#endif
#ifdef RECEMB_BENCH_LIBXSMM
      case GemmLibrary::kLibxsmm: {
        const char transpose_b = shape.transpose_b ? 'T' : 'N';
        const char transpose_a = shape.transpose_a ? 'T' : 'N';
        const libxsmm_blasint m = shape.n, n = shape.m, k = shape.k, ld_b = ldb, ld_a = lda,
                              ld_c = shape.n;
        const float one = 1.0f;
        libxsmm_sgemm(&transpose_b, &transpose_a, &m, &n, &k, &one, block_b, &ld_b, block_a, &ld_a,
                      &one, block_c, &ld_c);
        break;
      }
      case GemmLibrary::kLibxsmmJit:
        jit(block_b, block_a, block_c);
        break;
#endif
      default:
        break;
    }
  };
  for (auto _ : state) {
    pool.parallel_for(kGemmBlocks, block_product);
    benchmark::DoNotOptimize(c.data());
  }
  state.SetItemsProcessed(state.iterations() * kGemmBlocks * 256);
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * shape.m * shape.n * shape.k * static_cast<double>(kGemmBlocks) * 1e-9,
      benchmark::Counter::kIsIterationInvariantRate);
}

// Registers BM_Gemm for every shape and every library of this build, and the model's benchmarks,
// each on every instruction set this CPU runs.
[[maybe_unused]] const bool kRegistered = [] {
  struct Library {
    std::string name;
    GemmLibrary library;
    DenseIsa isa;  // of the trainer's kernels; the others choose their own code
  };
  std::vector<Library> libraries;
  for (const DenseIsa isa : recemb::dlrm::supported_dense_isas()) {
    libraries.push_back(
        {"recemb_" + std::string(recemb::dlrm::dense_isa_name(isa)), GemmLibrary::kRecemb, isa});
  }
  [[maybe_unused]] const DenseIsa widest = recemb::dlrm::widest_dense_isa();  // for the peers
#ifdef RECEMB_BENCH_OPENBLAS
  libraries.push_back({"openblas", GemmLibrary::kOpenBlas, widest});
#endif
#ifdef RECEMB_BENCH_DNNL
  libraries.push_back({"onednn", GemmLibrary::kDnnl, widest});
#endif
#ifdef RECEMB_BENCH_LIBXSMM
  libraries.push_back({"libxsmm", GemmLibrary::kLibxsmm, widest});
  libraries.push_back({"libxsmm_jit", GemmLibrary::kLibxsmmJit, widest});
#endif
  for (const GemmShape& shape : kGemmShapes) {
    for (const Library& library : libraries) {
      // libxsmm's kernels take no transposed right-hand operand (column-major: no A^T).
      if (library.library == GemmLibrary::kLibxsmmJit && shape.transpose_b) {
        continue;
      }
      benchmark::RegisterBenchmark(
          (std::string("BM_Gemm/") + shape.name + "/" + library.name).c_str(),
          [shape, library](benchmark::State& state) {
            BM_Gemm(state, shape, library.library, library.isa);
          })
          ->ArgName("threads")
          ->Arg(1)
          ->Arg(2)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
  for (const DenseIsa isa : recemb::dlrm::supported_dense_isas()) {
    const std::string name(recemb::dlrm::dense_isa_name(isa));
    benchmark::RegisterBenchmark(("BM_TrainStep/" + name).c_str(),
                                 [isa](benchmark::State& state) { BM_TrainStep(state, isa); })
        ->ArgNames({"batch", "threads"})
        ->ArgsProduct({{512, 2048, 4096}, {1, 2}})
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BM_Predict/" + name).c_str(),
                                 [isa](benchmark::State& state) { BM_Predict(state, isa); })
        ->ArgNames({"batch", "threads"})
        ->ArgsProduct({{512, 2048, 4096}, {1, 2}})
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BM_DenseAdamApply/" + name).c_str(),
                                 [isa](benchmark::State& state) { BM_DenseAdamApply(state, isa); })
        ->Unit(benchmark::kMicrosecond);
  }
  return true;
}();

}  // namespace
