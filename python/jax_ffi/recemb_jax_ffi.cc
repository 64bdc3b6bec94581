// JAX's custom calls for recemb.keras on Keras's JAX backend (docs/keras.md, "How the layer
// runs"): the XLA FFI handlers RecembJaxLookup and RecembJaxApplyGradients, built against jaxlib's
// FFI headers (header-only) into recemb/_jax_ffi.so. The only file of recemb that includes XLA.
// Like TensorFlow's ops, they call the Embedding of recemb._recemb through graph_op_abi.h
// (attributes `api` and `layer`).
//
// RecembJaxLookup(ids..., weights...; api, layer, training) -> (activations..., batch): feature f
// has dense ids ids[f] (int32 or int64, any shape: recemb::DenseIds) and weights[f] (float32, one
// per id, or empty for none). A training lookup keeps its batch (its id, as int32: JAX without
// x64 has no int64 results) for RecembJaxApplyGradients(batch, gradients...) -> (done), which
// applies the fused optimizer.
#include <cstdint>
#include <string>
#include <vector>

#include "graph_op_abi.h"
#include "xla/ffi/api/ffi.h"

namespace recemb_jax {
namespace ffi = ::xla::ffi;

namespace {

constexpr size_t kMessageSize = 2048;

ffi::Error error_of(int32_t code, const char* message) {
  switch (code) {
    case RECEMB_GRAPH_OK:
      return ffi::Error::Success();
    case RECEMB_GRAPH_INVALID_ARGUMENT:
      return ffi::Error(ffi::ErrorCode::kInvalidArgument, message);
    case RECEMB_GRAPH_FAILED_PRECONDITION:
      return ffi::Error(ffi::ErrorCode::kFailedPrecondition, message);
    case RECEMB_GRAPH_RESOURCE_EXHAUSTED:
      return ffi::Error(ffi::ErrorCode::kResourceExhausted, message);
    default:
      return ffi::Error(ffi::ErrorCode::kInternal, message);
  }
}

ffi::Error lookup(int64_t api_address, int64_t layer, bool training, ffi::RemainingArgs args,
                  ffi::RemainingRets rets) {
  const RecembGraphApi* api = recemb_graph_api_at(api_address);
  if (args.size() % 2 != 0 || rets.size() != args.size() / 2 + 1) {
    return ffi::Error::InvalidArgument(
        "RecembJaxLookup: expected ids and weights per feature, "
        "and one activation per feature plus the batch");
  }
  const size_t features = args.size() / 2;
  std::vector<std::vector<int64_t>> widened(features);  // int32 ids as int64 (int64 ids: as given)
  std::vector<std::vector<int64_t>> shapes(features);
  std::vector<RecembGraphInput> inputs(features);
  std::vector<float*> activations(features);
  std::vector<int64_t> sizes(features);
  char message[kMessageSize] = {};
  for (size_t f = 0; f < features; ++f) {
    auto id_buffer = args.get<ffi::AnyBuffer>(f);
    auto weight_buffer = args.get<ffi::AnyBuffer>(features + f);
    auto output = rets.get<ffi::AnyBuffer>(f);
    if (id_buffer.has_error()) return id_buffer.error();
    if (weight_buffer.has_error()) return weight_buffer.error();
    if (output.has_error()) return output.error();
    const ffi::AnyBuffer& id_values = *id_buffer;
    const size_t count = id_values.element_count();
    const int64_t* id_data = nullptr;
    if (id_values.element_type() == ffi::DataType::S64) {
      id_data = static_cast<const int64_t*>(id_values.untyped_data());
    } else if (id_values.element_type() == ffi::DataType::S32) {
      const auto* data = static_cast<const int32_t*>(id_values.untyped_data());
      widened[f].assign(data, data + count);
      id_data = widened[f].data();
    } else {
      return ffi::Error::InvalidArgument("RecembJaxLookup: feature " + std::to_string(f) +
                                         ": ids must be int32 or int64");
    }
    for (const int64_t dim : id_values.dimensions()) shapes[f].push_back(dim);
    const ffi::AnyBuffer& weights = *weight_buffer;
    RecembGraphInput& input = inputs[f];
    input.kind = RECEMB_INPUT_DENSE;
    input.ids = id_data;
    input.id_count = static_cast<int64_t>(count);
    input.shape = shapes[f].data();
    input.shape_rank = static_cast<int32_t>(shapes[f].size());
    input.weight_count = static_cast<int64_t>(weights.element_count());
    input.weights =
        input.weight_count == 0 ? nullptr : static_cast<const float*>(weights.untyped_data());
    activations[f] = static_cast<float*>((*output)->untyped_data());
    sizes[f] = static_cast<int64_t>((*output)->element_count());
  }
  auto batch = rets.get<ffi::AnyBuffer>(features);
  if (batch.has_error()) return batch.error();
  int64_t batch_id = -1;
  ffi::Error status =
      error_of(api->lookup(layer, inputs.data(), static_cast<int32_t>(features), activations.data(),
                           sizes.data(), training ? &batch_id : nullptr, message, kMessageSize),
               message);
  *static_cast<int32_t*>((*batch)->untyped_data()) = static_cast<int32_t>(batch_id);
  return status;
}

ffi::Error apply_gradients(int64_t api_address, int64_t layer, ffi::RemainingArgs args,
                           ffi::RemainingRets rets) {
  const RecembGraphApi* api = recemb_graph_api_at(api_address);
  if (args.size() < 1 || rets.size() != 1) {
    return ffi::Error::InvalidArgument(
        "RecembJaxApplyGradients: expected the batch, then one "
        "gradient per feature, and one result");
  }
  auto batch = args.get<ffi::AnyBuffer>(0);
  if (batch.has_error()) return batch.error();
  const int64_t batch_id = *static_cast<const int32_t*>(batch->untyped_data());
  const size_t features = args.size() - 1;
  std::vector<const float*> gradients(features);
  std::vector<int64_t> sizes(features);
  for (size_t f = 0; f < features; ++f) {
    auto gradient = args.get<ffi::AnyBuffer>(1 + f);
    if (gradient.has_error()) return gradient.error();
    gradients[f] = static_cast<const float*>(gradient->untyped_data());
    sizes[f] = static_cast<int64_t>(gradient->element_count());
  }
  auto done = rets.get<ffi::AnyBuffer>(0);
  if (done.has_error()) return done.error();
  *static_cast<float*>((*done)->untyped_data()) = 0.0f;
  char message[kMessageSize] = {};
  return error_of(api->apply_gradients(layer, batch_id, gradients.data(), sizes.data(),
                                       static_cast<int32_t>(features), message, kMessageSize),
                  message);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(RecembJaxLookup, lookup,
                              ffi::Ffi::Bind()
                                  .Attr<int64_t>("api")
                                  .Attr<int64_t>("layer")
                                  .Attr<bool>("training")
                                  .RemainingArgs()
                                  .RemainingRets());

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    RecembJaxApplyGradients, apply_gradients,
    ffi::Ffi::Bind().Attr<int64_t>("api").Attr<int64_t>("layer").RemainingArgs().RemainingRets());

}  // namespace recemb_jax
