// TensorFlow's ops for recemb.keras (docs/keras.md, "How the layer runs"): RecembLookup and
// RecembApplyGradients, built against the TensorFlow wheel's headers into recemb/_tf_ops.so. The
// only file of recemb that includes TensorFlow. The ops call the Embedding of recemb._recemb
// through graph_op_abi.h (the address of the module's RecembGraphApi is their attribute `api`,
// the id of a GraphOps' layer their attribute `layer`), so they are real graph ops: they run under
// tf.function and in model.fit's compiled step, where a Python callback could not.
//
// RecembLookup(ids, index, shapes, weights; kinds, training) -> (activations, batch): feature f's
// input is ids[f] with, by kinds[f] (graph_op_abi.h's RecembInputKind), its row_splits or sparse
// indices in index[f] and its dense shape in shapes[f] (empty for dense ids: the shape of ids[f]
// itself); weights[f] is empty for none. A training
// lookup keeps its batch for RecembApplyGradients(batch, gradients), which applies the fused
// optimizer (an empty gradient stands for zeros); batch is -1 for a pure lookup.
// RecembStringKeys(strings) -> keys: the int64 keys of string ids (recemb/string_key.h), for
// dynamic tables.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "graph_op_abi.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace recemb_tf {

using ::tensorflow::OpInputList;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

REGISTER_OP("RecembLookup")
    .Attr("api: int")
    .Attr("layer: int")
    .Attr("kinds: list(int)")
    .Attr("training: bool")
    .Attr("n: int >= 1")
    .Input("ids: n * int64")
    .Input("index: n * int64")
    .Input("shapes: n * int64")
    .Input("weights: n * float")
    .Output("activations: n * float")
    .Output("batch: int64")
    .SetIsStateful()
    .SetShapeFn([](::tensorflow::shape_inference::InferenceContext* context) {
      for (int i = 0; i + 1 < context->num_outputs(); ++i) {
        context->set_output(i, context->UnknownShape());
      }
      context->set_output(context->num_outputs() - 1, context->Scalar());
      return absl::OkStatus();
    });

REGISTER_OP("RecembApplyGradients")
    .Attr("api: int")
    .Attr("layer: int")
    .Attr("n: int >= 1")
    .Input("batch: int64")
    .Input("gradients: n * float")
    .SetIsStateful()
    .SetShapeFn([](::tensorflow::shape_inference::InferenceContext*) { return absl::OkStatus(); });

REGISTER_OP("RecembStringKeys")
    .Attr("api: int")
    .Input("strings: string")
    .Output("keys: int64")
    .SetShapeFn([](::tensorflow::shape_inference::InferenceContext* context) {
      context->set_output(0, context->input(0));
      return absl::OkStatus();
    });

namespace {

constexpr size_t kMessageSize = 2048;

// The context's error for a status of graph_op_abi.h.
absl::Status status_of(int32_t code, const char* message) {
  switch (code) {
    case RECEMB_GRAPH_OK:
      return absl::OkStatus();
    case RECEMB_GRAPH_INVALID_ARGUMENT:
      return absl::InvalidArgumentError(message);
    case RECEMB_GRAPH_FAILED_PRECONDITION:
      return absl::FailedPreconditionError(message);
    case RECEMB_GRAPH_RESOURCE_EXHAUSTED:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

// What every op reads from its attributes: the API table `api` and, when the op has one, the
// layer id `layer` (graph_op_abi.h).
class RecembKernel : public OpKernel {
 protected:
  explicit RecembKernel(OpKernelConstruction* context) : OpKernel(context) {
    int64_t address = 0;
    OP_REQUIRES_OK(context, context->GetAttr("api", &address));
    api_ = recemb_graph_api_at(address);
    if (context->HasAttr("layer")) OP_REQUIRES_OK(context, context->GetAttr("layer", &layer_));
  }

  const RecembGraphApi* api_ = nullptr;
  int64_t layer_ = 0;
};

class LookupOp : public RecembKernel {
 public:
  explicit LookupOp(OpKernelConstruction* context) : RecembKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("kinds", &kinds_));
    OP_REQUIRES_OK(context, context->GetAttr("training", &training_));
  }

  void Compute(OpKernelContext* context) override {
    OpInputList ids, index, shapes, weights;
    OP_REQUIRES_OK(context, context->input_list("ids", &ids));
    OP_REQUIRES_OK(context, context->input_list("index", &index));
    OP_REQUIRES_OK(context, context->input_list("shapes", &shapes));
    OP_REQUIRES_OK(context, context->input_list("weights", &weights));
    const int features = ids.size();
    OP_REQUIRES(context, static_cast<int>(kinds_.size()) == features,
                absl::InvalidArgumentError("RecembLookup: " + std::to_string(kinds_.size()) +
                                           " kinds for " + std::to_string(features) + " features"));
    std::vector<RecembGraphInput> inputs(features);
    std::vector<std::vector<int64_t>> dense_shapes(features);
    std::vector<float*> activations(features);
    std::vector<int64_t> sizes(features);
    char message[kMessageSize] = {};
    for (int f = 0; f < features; ++f) {
      RecembGraphInput& input = inputs[f];
      input.kind = kinds_[f];
      input.ids = ids[f].flat<int64_t>().data();
      input.id_count = ids[f].NumElements();
      input.index = index[f].flat<int64_t>().data();
      input.index_count = index[f].NumElements();
      input.shape = shapes[f].flat<int64_t>().data();
      input.shape_rank = static_cast<int32_t>(shapes[f].NumElements());
      if (input.kind == RECEMB_INPUT_DENSE && input.shape_rank == 0) {
        // Dense ids without a shape given: the ids tensor's own.
        for (int axis = 0; axis < ids[f].dims(); ++axis) {
          dense_shapes[f].push_back(ids[f].dim_size(axis));
        }
        input.shape = dense_shapes[f].data();
        input.shape_rank = static_cast<int32_t>(dense_shapes[f].size());
      }
      input.weights = weights[f].NumElements() == 0 ? nullptr : weights[f].flat<float>().data();
      input.weight_count = weights[f].NumElements();
      int64_t dims[RECEMB_GRAPH_MAX_RANK];
      int32_t rank = 0;
      OP_REQUIRES_OK(context, status_of(api_->activation_shape(layer_, f, &input, dims, &rank,
                                                               message, kMessageSize),
                                        message));
      TensorShape shape;
      for (int32_t axis = 0; axis < rank; ++axis) {
        OP_REQUIRES_OK(context, shape.AddDimWithStatus(dims[axis]));
      }
      Tensor* output = nullptr;
      OP_REQUIRES_OK(context, context->allocate_output(f, shape, &output));
      activations[f] = output->flat<float>().data();
      sizes[f] = output->NumElements();
    }
    Tensor* batch = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(features, TensorShape({}), &batch));
    int64_t batch_id = -1;
    OP_REQUIRES_OK(
        context,
        status_of(api_->lookup(layer_, inputs.data(), features, activations.data(), sizes.data(),
                               training_ ? &batch_id : nullptr, message, kMessageSize),
                  message));
    batch->scalar<int64_t>()() = batch_id;
  }

 private:
  std::vector<int32_t> kinds_;
  bool training_ = false;
};

class ApplyGradientsOp : public RecembKernel {
 public:
  explicit ApplyGradientsOp(OpKernelConstruction* context) : RecembKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& batch = context->input(0);
    OP_REQUIRES(context, batch.NumElements() == 1,
                absl::InvalidArgumentError("RecembApplyGradients: batch must be a scalar"));
    OpInputList gradients;
    OP_REQUIRES_OK(context, context->input_list("gradients", &gradients));
    const int features = gradients.size();
    std::vector<const float*> data(features);
    std::vector<int64_t> sizes(features);
    for (int f = 0; f < features; ++f) {
      data[f] = gradients[f].flat<float>().data();
      sizes[f] = gradients[f].NumElements();
    }
    char message[kMessageSize] = {};
    OP_REQUIRES_OK(context,
                   status_of(api_->apply_gradients(layer_, batch.flat<int64_t>()(0), data.data(),
                                                   sizes.data(), features, message, kMessageSize),
                             message));
  }
};

class StringKeysOp : public RecembKernel {
 public:
  explicit StringKeysOp(OpKernelConstruction* context) : RecembKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& strings = context->input(0);
    Tensor* keys = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, strings.shape(), &keys));
    const auto values = strings.flat<::tensorflow::tstring>();
    std::vector<const char*> data(values.size());
    std::vector<int64_t> sizes(values.size());
    for (int64_t i = 0; i < values.size(); ++i) {
      data[i] = values(i).data();
      sizes[i] = static_cast<int64_t>(values(i).size());
    }
    api_->string_keys(data.data(), sizes.data(), static_cast<int64_t>(data.size()),
                      keys->flat<int64_t>().data());
  }
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("RecembStringKeys").Device(::tensorflow::DEVICE_CPU), StringKeysOp);
REGISTER_KERNEL_BUILDER(Name("RecembLookup").Device(::tensorflow::DEVICE_CPU), LookupOp);
REGISTER_KERNEL_BUILDER(Name("RecembApplyGradients").Device(::tensorflow::DEVICE_CPU),
                        ApplyGradientsOp);

}  // namespace recemb_tf
