// The shape side of normalising a feature's input (csr_feature.h): the checks of the input's
// shape against its feature and table, the bags they map its entries to, the activation shape,
// and where a storage entry lies, for error messages. Nothing here writes an output, so a failed
// check changes nothing (docs/semantics.md, "2. Inputs").
//
//   const FeatureContext context{feature, table, input};
//   const InputLayout layout = resolve_layout(context);  // InvalidArgument on a bad shape
//   write_activation_shape(layout, table.dim, out.activation_shape);
#ifndef RECEMB_BATCH_INPUT_LAYOUT_H_
#define RECEMB_BATCH_INPUT_LAYOUT_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "recemb/batch.h"
#include "recemb/config.h"

namespace recemb::internal {

// One feature's input with the configuration it is read against.
struct FeatureContext {
  const FeatureConfig& feature;
  const TableConfig& table;
  const FeatureInput& input;
};

// How the input's entries map to bags once its shape has been checked.
struct InputLayout {
  int64_t num_rows = 0;         // bags of the plain (non-sequence) interpretation
  int64_t sequence_length = 0;  // 0: one bag per row; L > 0: row r, position p is bag r * L + p
  // The activation shape without dim when it is a part of the input's shape or the output_shape
  // (borrowed from them); empty for [num_rows] or, for a sequence, [num_rows, sequence_length].
  std::span<const int64_t> shape;

  int64_t num_bags() const { return sequence_length > 0 ? num_rows * sequence_length : num_rows; }
};

// Checks the input's shape (dims, sizes, ranks, the counts of ids and indices, output_shape,
// max_sequence_length) against the feature and returns its layout; throws InvalidArgument naming
// the feature, its table and what does not fit. Entries themselves (ids, weights, sparse indices,
// row_splits) are checked by the walks that read them (csr_feature.cc).
InputLayout resolve_layout(const FeatureContext& context);

// shape = the layout's activation shape without dim, then dim.
void write_activation_shape(const InputLayout& layout, int64_t dim, std::vector<int64_t>& shape);

// The activation shape [..., dim] of `input` for `feature` and its `table`: resolve_layout's,
// with its errors.
std::vector<int64_t> activation_shape(const FeatureConfig& feature, const TableConfig& table,
                                      const FeatureInput& input);

// "[3, 2, 4]": a shape or an index tuple as the batch checks' error messages write it.
std::string shape_string(std::span<const int64_t> dims);

// Throws InvalidArgument("feature '<name>' (table '<name>'): <detail>").
[[noreturn]] void fail_feature(const FeatureContext& context, const std::string& detail);

// Where storage entry i of the input lies: "example 3, position 1" (dense rank 2, ragged),
// "example [1, 2], position 0" (dense rank 3), "example 4" (dense rank 1), "entry [0, 5]"
// (sparse). For a ragged input, its row_splits must have been checked.
std::string describe_entry(const FeatureContext& context, int64_t i);

// The index tuple of sparse entry i: "[0, 5]".
std::string sparse_index(const SparseIds& sparse, int64_t i);

// The input's ids, of whichever kind, and their count.
const IdSpan& input_ids(const FeatureInput& input);
size_t num_ids(const IdSpan& ids);

}  // namespace recemb::internal

#endif  // RECEMB_BATCH_INPUT_LAYOUT_H_
