// The plain-C interface through which a graph framework's op library calls an Embedding of the
// extension module recemb._recemb (docs/keras.md, "How the layer runs"): TensorFlow's op library
// (python/tensorflow/ops.cc) includes only this header, not recemb's, so the process holds one
// copy of the engine's code, the module's, and the op library depends on TensorFlow alone.
//
// recemb._recemb.graph_api_address() is the address of the module's one RecembGraphApi (static:
// it lives as long as the process); recemb._recemb.GraphOps(embedding) registers an Embedding
// under an id (GraphOps.layer_id()), unregistered when the GraphOps is destroyed. The op library
// receives both as attributes of each op. A call naming an id no longer registered (a graph kept
// after its layer was deleted) fails with RECEMB_GRAPH_FAILED_PRECONDITION, never touching freed
// memory: a call in flight keeps its GraphOps and Embedding alive. The functions may be called
// from any thread (calls on one layer run one at a time), never throw, and take the interpreter
// lock only where the Embedding calls back into Python (learning-rate callables). They return
// RECEMB_GRAPH_OK or an error code with the message in `message` (NUL-terminated, truncated to
// message_size).
#ifndef RECEMB_PYTHON_GRAPH_OP_ABI_H_
#define RECEMB_PYTHON_GRAPH_OP_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum RecembGraphStatus {
  RECEMB_GRAPH_OK = 0,
  RECEMB_GRAPH_INVALID_ARGUMENT = 1,     // bad input: nothing changed
  RECEMB_GRAPH_FAILED_PRECONDITION = 2,  // a valid call in the wrong state: nothing changed
  RECEMB_GRAPH_RESOURCE_EXHAUSTED = 3,
  RECEMB_GRAPH_INTERNAL = 4,
};

enum RecembInputKind {
  RECEMB_INPUT_DENSE = 0,   // ids of shape `shape` (recemb::DenseIds)
  RECEMB_INPUT_RAGGED = 1,  // ids = values, index = row_splits (recemb::RaggedIds)
  RECEMB_INPUT_SPARSE = 2,  // ids = values, index = indices [nnz, rank], shape = dense_shape
};

// One feature's input (recemb/batch.h's FeatureInput), borrowed for the call.
struct RecembGraphInput {
  int32_t kind;  // RecembInputKind
  const int64_t* ids;
  int64_t id_count;
  const int64_t* index;  // row_splits or sparse indices; null for dense ids
  int64_t index_count;
  const int64_t* shape;  // dense ids' shape, or the sparse dense_shape; null for ragged ids
  int32_t shape_rank;
  const float* weights;  // one per id, or null (weight_count 0) for none
  int64_t weight_count;
};

// The most axes an activation has (recemb::Embedding::activation_shape's rank).
#define RECEMB_GRAPH_MAX_RANK 8

struct RecembGraphApi {
  // Writes feature `feature`'s activation shape into shape[0 .. *rank).
  int32_t (*activation_shape)(int64_t layer, int32_t feature, const RecembGraphInput* input,
                              int64_t* shape, int32_t* rank, char* message, size_t message_size);
  // Looks up every feature (inputs[f], activations[f] holding activation_sizes[f] floats, in
  // feature order). With batch_id null: a pure lookup. Otherwise a training lookup, whose batch
  // is kept under the id written to *batch_id until apply_gradients takes it (or until more than
  // GraphOps' pending limit of newer training lookups are kept: the oldest is then dropped, as a
  // forward pass that no gradient reached).
  int32_t (*lookup)(int64_t layer, const RecembGraphInput* inputs, int32_t feature_count,
                    float* const* activations, const int64_t* activation_sizes, int64_t* batch_id,
                    char* message, size_t message_size);
  // Applies the gradients of the training lookup `batch_id` (gradients[f] holding
  // gradient_sizes[f] floats; 0 stands for zeros) and forgets the batch.
  int32_t (*apply_gradients)(int64_t layer, int64_t batch_id, const float* const* gradients,
                             const int64_t* gradient_sizes, int32_t feature_count, char* message,
                             size_t message_size);
  // keys[i] = recemb::string_key of the bytes strings[i][0 .. sizes[i]) (recemb/string_key.h):
  // the keys of string ids of a dynamic table. Never fails.
  void (*string_keys)(const char* const* strings, const int64_t* sizes, int64_t count,
                      int64_t* keys);
};

// The RecembGraphApi at `address` (an op attribute: recemb._recemb.graph_api_address()).
static inline const struct RecembGraphApi* recemb_graph_api_at(int64_t address) {
  return (const struct RecembGraphApi*)(uintptr_t)address;
}

#ifdef __cplusplus
}
#endif

#endif  // RECEMB_PYTHON_GRAPH_OP_ABI_H_
