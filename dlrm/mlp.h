// Mlp: a stack of fully connected layers over a batch, forward and backward, whose parameters live
// in a caller's flat float array (so that a model keeps all of its dense parameters, and all of
// their gradients, in one contiguous vector each).
//
//   Mlp mlp({.name = "bottom_mlp", .input_width = 13, .layer_widths = {64, 16}}, isa);
//   std::vector<float> parameters(mlp.num_parameters()), gradients(mlp.num_parameters());
//   mlp.initialize(parameters, rng);
//   std::span<const float> y = mlp.forward(parameters, x);      // x [B, 13] -> y [B, 16]
//   mlp.backward(parameters, x, dy, gradients, dx);              // dy [B, 16] -> gradients, dx
//
// Layer l (widths in_l -> out_l, in_0 = input_width, in_{l+1} = out_l) computes, on row-major
// batches,
//   a_l = h_l * W_l + b_l          h_0 = input [B, in_0], W_l [in_l, out_l], b_l [out_l]
//   h_{l+1} = relu(a_l)            for every layer but the last;
//   output  = relu(a_last) or a_last, as output_activation says.
// relu'(0) is taken as 0.
//
// Parameter layout (floats, in this order, each array row-major): W_0, b_0, W_1, b_1, ...
//
// Forward and backward run on the threads of a ThreadPool (support/) when given one (else on the
// caller's): the batch is cut into blocks of kRowBlock rows whatever the thread count, each
// block's parameter gradients are summed apart and the blocks' sums added in block order, so
// results are bitwise the same for the same inputs whatever the thread count and wherever the
// arrays lie in memory, for each instruction set `isa` (dense_isa.h; sets differ by rounding).
// Thread safety: forward and backward use the Mlp's own workspace; one Mlp serves one caller at a
// time.
#ifndef RECEMB_DLRM_MLP_H_
#define RECEMB_DLRM_MLP_H_

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "dlrm/dense_isa.h"
#include "support/thread_pool.h"

namespace recemb::dlrm {

// What the last layer applies to its affine output (hidden layers always apply ReLU).
enum class OutputActivation {
  kRelu,      // as DLRM's bottom MLP, whose output is interacted with embeddings
  kIdentity,  // as the top MLP's last layer, whose output is a logit
};

struct MlpConfig {
  std::string name;                        // names the MLP in error messages and parameter blocks
  int64_t input_width = 0;                 // features per example, >= 1 (required)
  std::vector<int64_t> layer_widths = {};  // output width of each layer, each >= 1; non-empty
  OutputActivation output_activation = OutputActivation::kRelu;
};

// A named array inside a flat parameter vector: parameters[offset, offset + product(shape)),
// row-major. Names are "<mlp name>/layer_<l>/weights" ([in, out]) and ".../bias" ([out]).
struct ParameterBlock {
  std::string name;
  int64_t offset = 0;
  std::vector<int64_t> shape;
};

class Mlp {
 public:
  // Throws InvalidArgument naming the MLP, the field and the value when input_width < 1,
  // layer_widths is empty or a width is < 1, and (dense_kernels) when the CPU lacks `isa`.
  Mlp(MlpConfig config, DenseIsa isa);

  const MlpConfig& config() const { return config_; }
  int64_t input_width() const { return config_.input_width; }
  int64_t output_width() const { return config_.layer_widths.back(); }
  // Floats of the parameter layout above: sum over layers of (in_l + 1) * out_l.
  int64_t num_parameters() const { return num_parameters_; }
  // The same for an MLP of this shape, without building one (which allocates its workspace):
  // how a reader checks a file's shapes against its data. Widths must be >= 1 (unchecked).
  static int64_t parameter_count(int64_t input_width, std::span<const int64_t> layer_widths);

  // The layout above as blocks, their offsets shifted by `first_offset` (where this MLP's
  // parameters start in a larger vector).
  std::vector<ParameterBlock> parameter_blocks(int64_t first_offset) const;

  // Fills `parameters` (num_parameters() floats) as DLRM's reference implementation initialises
  // its MLPs, with the same variances but uniform draws: W_l ~ U(-sqrt(6 / (in_l + out_l)), +...)
  // (Glorot uniform: variance 2 / (in_l + out_l)) and b_l ~ U(-sqrt(3 / out_l), +...) (variance
  // 1 / out_l). Draws come from the raw 64-bit outputs of `random` in layout order, so the values
  // are the same on every platform and standard library. Throws InvalidArgument on a wrong size.
  void initialize(std::span<float> parameters, std::mt19937_64& random) const;

  // The output [B, output_width()] for `input` [B, input_width()], B = input.size() /
  // input_width() >= 1. `parameters` has num_parameters() floats. The result points into the
  // Mlp's workspace and stays valid until the next forward; the workspace only grows (no
  // allocation once it has held a batch this large). Throws InvalidArgument, computing nothing,
  // when a size does not fit.
  std::span<const float> forward(std::span<const float> parameters, std::span<const float> input,
                                 support::ThreadPool* pool = nullptr);

  // The output of the last forward (empty before the first), as forward returned it.
  std::span<const float> output() const { return activations_.back(); }

  // Backpropagates `output_gradient` = d(loss)/d(output) [B, output_width()] through the last
  // forward, which must have run on the same `parameters` and `input` (the Mlp keeps its
  // activations, not its input). Overwrites `parameter_gradients` (num_parameters() floats, the
  // parameter layout) with d(loss)/d(parameters) and, unless it is empty, `input_gradient`
  // [B, input_width()] with d(loss)/d(input). Throws InvalidArgument on a wrong size and
  // FailedPrecondition when the last forward had another batch size (or none ran); either way
  // nothing is written.
  void backward(std::span<const float> parameters, std::span<const float> input,
                std::span<const float> output_gradient, std::span<float> parameter_gradients,
                std::span<float> input_gradient, support::ThreadPool* pool = nullptr);

  // The steps of forward and backward, for a model that runs several layers' work on one block
  // of rows in one task (DlrmDenseModel): forward is start_forward, then forward_block for every
  // block; backward is start_backward, backward_block for every block, then finish_backward.
  // Blocks may run in any order on any threads, each thread with its own `worker` index below
  // the start_backward's num_workers. These check nothing: the caller checks the sizes as forward
  // and backward do.
  static constexpr int64_t kRowBlock = 256;  // rows of the batch per block
  static int64_t num_blocks(int64_t batch_size) { return (batch_size + kRowBlock - 1) / kRowBlock; }
  void start_forward(int64_t batch_size);
  void forward_block(std::span<const float> parameters, std::span<const float> input,
                     int64_t block);
  // `input_gradient`: whether backward_block will be given one.
  void start_backward(std::span<const float> parameters, bool input_gradient, int num_workers);
  // Backpropagates the rows of block `block`, writing the block's rows of input_gradient (unless
  // empty) and its own parameter gradients, which finish_backward adds up in block order.
  void backward_block(std::span<const float> input, std::span<const float> output_gradient,
                      std::span<float> input_gradient, int64_t block, int worker);
  void finish_backward(std::span<float> parameter_gradients, support::ThreadPool* pool);

 private:
  struct Layer {
    int64_t input_width;
    int64_t output_width;
    int64_t weights_offset;  // in the MLP's parameter span; the bias follows the weights
  };

  static constexpr int64_t kReduceChunk = 4096;  // parameters per task of the blocks' sum

  // The parameters of one layer: W [in, out] and b [out].
  static int64_t layer_parameter_count(int64_t input_width, int64_t output_width) {
    return (input_width + 1) * output_width;
  }

  int64_t batch_size_of(std::span<const float> input, const char* argument) const;
  void check_parameter_size(size_t size, const char* argument) const;

  MlpConfig config_;
  const DenseKernels* kernels_;
  std::vector<Layer> layers_;
  int64_t num_parameters_ = 0;

  // Workspace: activations_[l] = h_{l+1} [B, out_l] of the last forward (B = batch_size_); per
  // worker thread, two gradient buffers of [kRowBlock, max out_l] that backward alternates
  // between; the parameter gradients of every block of the batch, one after the other.
  int64_t batch_size_ = 0;
  int64_t max_width_ = 0;
  std::vector<std::vector<float>> activations_;
  std::vector<float> gradient_buffers_;
  std::vector<float> block_gradients_;
  // Each layer's W^T [out, in] for the last backward, at its weights' offset in the parameters.
  std::vector<float> transposed_weights_;
};

}  // namespace recemb::dlrm

#endif  // RECEMB_DLRM_MLP_H_
