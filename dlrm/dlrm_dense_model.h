// DlrmDenseModel: the dense part of a DLRM-style click model (bottom MLP, dot interaction, top
// MLP, sigmoid and log loss), forward and backward over one batch. The embeddings come from a
// recemb::Embedding (its activations) and go back to it (their gradients); the dense parameters
// are trained by a DenseOptimizer.
//
//   DlrmDenseModel model({.num_dense_features = 13, .num_sparse_features = 26});
//   DenseOptimizer optimizer(DenseAdam{}, model.num_parameters(), model.dense_isa());
//   for (each batch) {
//     layer.lookup(inputs, activations, lookup_batch);                   // recemb
//     float loss = model.train_step(dense, labels, activations, activation_gradients);
//     optimizer.apply(model.parameters(), model.gradients());
//     layer.apply_gradients(lookup_batch, activation_gradients);         // recemb
//   }
//
// The model, for a batch of B examples (n = num_sparse_features, d = embedding_dim):
//   z = bottom_mlp(dense)                       dense [B, num_dense_features] -> z [B, d]; ReLU
//                                               after every layer (as DLRM)
//   x = DotInteraction(z, e_1 .. e_n)           [B, d + (n + 1) n / 2] (see interaction.h)
//   s = top_mlp(x)                              ReLU hidden layers of widths top_mlp, then a linear
//                                               layer to one logit per example: s [B]
//   p = sigmoid(s)
//   loss = mean_b [ max(s_b, 0) - s_b y_b + log(1 + exp(-|s_b|)) ]
// The loss is the log loss -(y log p + (1 - y) log(1 - p)) in a form that is exact for any logit
// (no log of a rounded sigmoid); labels y may be any value in [0, 1].
//
// All dense parameters are in ONE flat float vector, parameters() (and their gradients in
// gradients(), same layout): the bottom MLP's then the top MLP's, each as mlp.h lays it out
// (W_0, b_0, W_1, b_1, ...; W_l is [in, out] row-major). parameter_blocks() names every array.
// A checkpoint saves one array; a data-parallel trainer all-reduces gradients() in one call.
//
// train_step and predict run on config.num_threads threads (the caller's and a ThreadPool's) or on
// config.pool's, one task per block of 256 examples doing all of the block's layers, forward and
// backward, while its activations are in the cache (the sum of the loss and the sigmoid on the
// caller's thread). Results are bitwise the same for the same parameters and inputs, whatever the
// thread count and wherever the arrays lie in memory (so replicas and a resumed run compute exactly
// what an uninterrupted one does; mlp.h, interaction.h). They are computed by the kernels of one
// instruction set (dense_isa.h), chosen when the model is built; different sets round differently.
//
// Thread safety: not safe for concurrent calls (train_step and predict use the model's
// workspace). The workspace grows to the largest batch seen and is then reused: neither
// train_step nor predict allocates once it has run on a batch at least as large (for layers of
// up to 1024 inputs and outputs and 2^18 weights; eigen.h).
#ifndef RECEMB_DLRM_DLRM_DENSE_MODEL_H_
#define RECEMB_DLRM_DLRM_DENSE_MODEL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "dlrm/dense_isa.h"
#include "dlrm/interaction.h"
#include "dlrm/mlp.h"
#include "support/thread_pool.h"

namespace recemb::dlrm {

struct DlrmDenseConfig {
  int64_t num_dense_features = 13;   // per example, >= 1 (Criteo: 13)
  int64_t num_sparse_features = 26;  // embeddings per example, >= 1 (Criteo: 26)
  int64_t embedding_dim = 16;        // width of every embedding, >= 1
  // Output widths of the bottom MLP's layers, each >= 1; non-empty and the last equals
  // embedding_dim (z is dotted with the embeddings).
  std::vector<int64_t> bottom_mlp = {64, 16};
  // Widths of the top MLP's hidden layers, each >= 1 (may be empty); an output layer of width 1
  // (the logit) is added after them.
  std::vector<int64_t> top_mlp = {64, 32};
  // Seed of the parameters' initialisation (mlp.h: Glorot-uniform weights, uniform biases of
  // variance 1 / width, drawn bottom MLP first from one std::mt19937_64 seeded with it).
  uint64_t seed = 0;
  // Threads of train_step and predict, counting the caller, >= 0; 0: one per core. Results do
  // not depend on it. Must be 0 when `pool` is set.
  int num_threads = 1;
  // Set: train_step and predict run on this pool's threads, which others may use at once (the
  // trainer's Embedding runs on the same pool: support/thread_pool.h); unset: on a pool of the
  // model's own with num_threads threads.
  std::shared_ptr<support::ThreadPool> pool;
  // The instruction set of the dense layers' arithmetic; unset: default_dense_isa()
  // (RECEMB_DENSE_ISA, else the widest the CPU runs). Results differ between sets by rounding.
  std::optional<DenseIsa> dense_isa;
};

class DlrmDenseModel {
 public:
  // Validates the config (InvalidArgument naming the field and the value; dense_isa.h for the
  // instruction set), then allocates and initialises the parameters; gradients() starts at zero.
  explicit DlrmDenseModel(DlrmDenseConfig config);

  const DlrmDenseConfig& config() const { return config_; }
  // The instruction set the model computes with: config().dense_isa, or the default it stood for.
  DenseIsa dense_isa() const { return dense_isa_; }
  int64_t num_parameters() const { return static_cast<int64_t>(parameters_.size()); }
  // The num_parameters() of a model of `config`, without building one (which allocates the
  // parameters and workspaces): how a reader checks a file's shapes against its data before
  // building the model. Validates the config as the constructor does (InvalidArgument), except
  // the MLPs' own checks; widths and dims up to 2^16 cannot overflow.
  static int64_t parameter_count(const DlrmDenseConfig& config);

  // The flat parameter vector (layout above). Writable: the optimizer updates it in place and a
  // checkpoint restore overwrites it. Valid as long as the model (or the one it is moved into).
  std::span<float> parameters() { return parameters_; }
  std::span<const float> parameters() const { return parameters_; }
  // d(mean loss)/d(parameters) of the last train_step (zeros before the first), same layout.
  std::span<const float> gradients() const { return gradients_; }
  // The arrays inside parameters(): "bottom_mlp/layer_<l>/{weights,bias}", then
  // "top_mlp/layer_<l>/{weights,bias}" (the last top layer is the logit layer), in layout order,
  // together covering the vector exactly.
  std::vector<ParameterBlock> parameter_blocks() const;

  // Forward and backward over one batch of B = labels.size() >= 1 examples:
  //   dense:      [B, num_dense_features] row-major, finite.
  //   labels:     [B], each in [0, 1] (clicks are 0 or 1).
  //   embeddings: num_sparse_features spans of [B, embedding_dim], finite (recemb's
  //               activations, in feature order).
  //   embedding_gradients: num_sparse_features spans of [B, embedding_dim]; overwritten with
  //               d(mean loss)/d(embeddings) (what recemb's apply_gradients takes).
  // Sets gradients() to d(mean loss)/d(parameters) and returns the mean loss over the batch.
  // Parameters are not changed. Validates everything first: a wrong size, a non-finite dense
  // value or embedding, or a label outside [0, 1] throws InvalidArgument naming the argument, the
  // feature and the example, and leaves gradients() and embedding_gradients as they were.
  float train_step(std::span<const float> dense, std::span<const float> labels,
                   std::span<const std::span<const float>> embeddings,
                   std::span<const std::span<float>> embedding_gradients);

  // Writes p = sigmoid(s), the click probabilities, into `probabilities` [B] (B =
  // probabilities.size() >= 1) for dense and embeddings shaped as in train_step. Validates as
  // train_step (InvalidArgument, `probabilities` unchanged); leaves gradients() unchanged.
  void predict(std::span<const float> dense, std::span<const std::span<const float>> embeddings,
               std::span<float> probabilities);

 private:
  // Validates the inputs shared by train_step and predict (`caller`, which messages name) for a
  // batch of batch_size examples.
  void validate_inputs(const char* caller, std::span<const float> dense,
                       std::span<const std::span<const float>> embeddings,
                       int64_t batch_size) const;
  // The forward pass: start_forward sizes the workspace for a batch, then forward_block runs
  // the bottom MLP, the interaction and the top MLP on one block of the MLPs' rows (mlp.h),
  // leaving its logits in the top MLP's output.
  void start_forward(int64_t batch_size);
  void forward_block(std::span<const float> dense,
                     std::span<const std::span<const float>> embeddings, int64_t block, int worker);

  DlrmDenseConfig config_;
  DenseIsa dense_isa_;
  const DenseKernels* kernels_;
  Mlp bottom_mlp_;
  DotInteraction interaction_;
  Mlp top_mlp_;
  std::shared_ptr<support::ThreadPool> pool_;  // a pointer: the model stays movable
  std::vector<float> parameters_;
  std::vector<float> gradients_;
  // Workspace, [B, ...] of the current batch.
  std::vector<float> features_;           // x, the interaction's output
  std::vector<float> feature_gradients_;  // d(loss)/d(x)
  std::vector<float> logit_gradients_;    // d(mean loss)/d(s)
  std::vector<float> example_losses_;     // each example's loss
  std::vector<float> bottom_gradients_;   // d(loss)/d(z)
};

}  // namespace recemb::dlrm

#endif  // RECEMB_DLRM_DLRM_DENSE_MODEL_H_
