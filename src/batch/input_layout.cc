#include "batch/input_layout.h"

#include <algorithm>
#include <optional>
#include <string>
#include <variant>

#include "recemb/error.h"

namespace recemb::internal {
namespace {

std::string prefix(const FeatureContext& context) {
  return "feature '" + context.feature.name + "' (table '" + context.table.name + "')";
}

// Product of dims >= 0; nullopt if it does not fit in int64_t.
std::optional<int64_t> checked_product(std::span<const int64_t> dims) {
  if (std::find(dims.begin(), dims.end(), 0) != dims.end()) return 0;
  int64_t product = 1;
  for (const int64_t d : dims) {
    if (__builtin_mul_overflow(product, d, &product)) return std::nullopt;
  }
  return product;
}

void check_no_negative_dims(const FeatureContext& context, std::span<const int64_t> dims,
                            const char* what) {
  if (std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d < 0; })) {
    fail_feature(context,
                 std::string(what) + " " + shape_string(dims) + " has a negative dimension");
  }
}

// The product of `part`, a part of the shape `dims` named by `what`.
int64_t shape_product(const FeatureContext& context, std::span<const int64_t> dims,
                      std::span<const int64_t> part, const char* what) {
  const std::optional<int64_t> product = checked_product(part);
  if (!product)
    fail_feature(context, std::string(what) + " " + shape_string(dims) + " is too large");
  return *product;
}

const IdSpan& ids_of(const DenseIds& dense) { return dense.ids; }
const IdSpan& ids_of(const RaggedIds& ragged) { return ragged.values; }
const IdSpan& ids_of(const SparseIds& sparse) { return sparse.values; }

}  // namespace

void fail_feature(const FeatureContext& context, const std::string& detail) {
  throw InvalidArgument(prefix(context) + ": " + detail);
}

const IdSpan& input_ids(const FeatureInput& input) {
  return std::visit([](const auto& typed) -> const IdSpan& { return ids_of(typed); }, input);
}

size_t num_ids(const IdSpan& ids) {
  return std::visit([](auto typed) { return typed.size(); }, ids);
}

std::string sparse_index(const SparseIds& sparse, int64_t i) {
  const size_t rank = sparse.dense_shape.size();
  return shape_string(sparse.indices.subspan(static_cast<size_t>(i) * rank, rank));
}

std::string describe_entry(const FeatureContext& context, int64_t i) {
  if (const auto* dense = std::get_if<DenseIds>(&context.input)) {
    const std::vector<int64_t>& shape = dense->shape;
    if (shape.size() == 1) return "example " + std::to_string(i);
    const int64_t bag_size = shape.back();
    int64_t row = i / bag_size;
    const std::string position = ", position " + std::to_string(i % bag_size);
    if (shape.size() == 2) return "example " + std::to_string(row) + position;
    std::vector<int64_t> tuple(shape.size() - 1);
    for (size_t d = tuple.size(); d-- > 0;) {
      tuple[d] = row % shape[d];
      row /= shape[d];
    }
    return "example " + shape_string(tuple) + position;
  }
  if (const auto* ragged = std::get_if<RaggedIds>(&context.input)) {
    return std::visit(
        [i](auto splits) {
          // The splits were validated before any entry, so this finds the row holding i.
          const auto end = std::upper_bound(splits.begin(), splits.end(), i);
          const auto row = end - splits.begin() - 1;
          return "example " + std::to_string(row) + ", position " +
                 std::to_string(i - static_cast<int64_t>(splits[static_cast<size_t>(row)]));
        },
        ragged->row_splits);
  }
  return "entry " + sparse_index(std::get<SparseIds>(context.input), i);
}

InputLayout resolve_layout(const FeatureContext& context) {
  const FeatureConfig& feature = context.feature;
  if (feature.max_sequence_length < 0) {
    fail_feature(context, "max_sequence_length " + std::to_string(feature.max_sequence_length) +
                              " is negative");
  }
  int64_t num_rows = 0;
  bool sequence_capable = false;       // rows are examples and entries are positions
  std::span<const int64_t> row_shape;  // the plain activation shape without dim
  if (const auto* dense = std::get_if<DenseIds>(&context.input)) {
    const std::vector<int64_t>& dims = dense->shape;
    if (dims.empty()) fail_feature(context, "dense ids have an empty shape; rank >= 1 is required");
    check_no_negative_dims(context, dims, "dense shape");
    const int64_t size = shape_product(context, dims, dims, "dense shape");
    if (static_cast<size_t>(size) != num_ids(dense->ids)) {
      fail_feature(context, "dense shape " + shape_string(dims) + " needs " + std::to_string(size) +
                                " ids but " + std::to_string(num_ids(dense->ids)) + " were given");
    }
    if (dims.size() == 1 && feature.max_sequence_length > 0 && feature.output_shape.empty()) {
      throw InvalidArgument(prefix(context) + " is a sequence feature (max_sequence_length " +
                            std::to_string(feature.max_sequence_length) +
                            ") but the dense ids have rank 1; pass [batch, positions] ids");
    }
    row_shape = dims;
    if (dims.size() >= 2) row_shape = row_shape.first(dims.size() - 1);
    num_rows = shape_product(context, dims, row_shape, "dense shape");
    sequence_capable = dims.size() == 2;
  } else if (const auto* ragged = std::get_if<RaggedIds>(&context.input)) {
    const size_t num_splits =
        std::visit([](auto splits) { return splits.size(); }, ragged->row_splits);
    if (num_splits == 0)
      fail_feature(context, "row_splits is empty; it needs batch size + 1 entries");
    num_rows = static_cast<int64_t>(num_splits) - 1;
    sequence_capable = true;  // row_shape stays empty: [num_rows]
  } else {
    const auto& sparse = std::get<SparseIds>(context.input);
    const std::vector<int64_t>& dims = sparse.dense_shape;
    const size_t rank = dims.size();
    if (rank < 2) {
      fail_feature(context, "sparse dense_shape " + shape_string(dims) + " has rank " +
                                std::to_string(rank) + "; rank >= 2 is required");
    }
    check_no_negative_dims(context, dims, "sparse dense_shape");
    const size_t nnz = num_ids(sparse.values);
    if (sparse.indices.size() != nnz * rank) {
      fail_feature(context, "sparse indices hold " + std::to_string(sparse.indices.size()) +
                                " values but " + std::to_string(nnz) + " entries of rank " +
                                std::to_string(rank) + " need " + std::to_string(nnz * rank));
    }
    row_shape = std::span<const int64_t>(dims).first(rank - 1);
    num_rows = shape_product(context, dims, row_shape, "sparse dense_shape");
    sequence_capable = rank == 2;
  }

  if (!feature.output_shape.empty()) {
    const std::vector<int64_t>& output_shape = feature.output_shape;
    if (std::any_of(output_shape.begin(), output_shape.end(), [](int64_t d) { return d < 1; })) {
      fail_feature(context, "output_shape " + shape_string(output_shape) + " has a dimension < 1");
    }
    const std::optional<int64_t> size = checked_product(output_shape);
    if (!size)
      fail_feature(context, "output_shape " + shape_string(output_shape) + " is too large");
    if (*size == num_rows) return {num_rows, 0, output_shape};
    if (sequence_capable && num_rows > 0 && *size % num_rows == 0) {
      return {num_rows, *size / num_rows, output_shape};
    }
    fail_feature(context,
                 "output_shape " + shape_string(output_shape) + " (" + std::to_string(*size) +
                     " bags) matches neither the input's " + std::to_string(num_rows) + " bags" +
                     (sequence_capable ? " nor a multiple of its batch size (a sequence)"
                                       : " (only ragged and rank-2 inputs can be sequences)"));
  }
  const int64_t length = feature.max_sequence_length;
  if (length > 0 && sequence_capable) {
    int64_t num_bags = 0;
    if (__builtin_mul_overflow(num_rows, length, &num_bags)) {
      fail_feature(context, "max_sequence_length " + std::to_string(length) + " times batch size " +
                                std::to_string(num_rows) + " is too large");
    }
    return {num_rows, length, {}};
  }
  // TF ignores max_sequence_length for sparse inputs of rank > 2; dense ones of rank > 2 match.
  return {num_rows, 0, row_shape};
}

void write_activation_shape(const InputLayout& layout, int64_t dim, std::vector<int64_t>& shape) {
  if (!layout.shape.empty()) {
    shape.assign(layout.shape.begin(), layout.shape.end());
  } else if (layout.sequence_length > 0) {
    shape.assign({layout.num_rows, layout.sequence_length});
  } else {
    shape.assign({layout.num_rows});
  }
  shape.push_back(dim);
}

std::string shape_string(std::span<const int64_t> dims) {
  std::string text = "[";
  for (size_t d = 0; d < dims.size(); ++d) {
    text += (d == 0 ? "" : ", ") + std::to_string(dims[d]);
  }
  return text + "]";
}

std::vector<int64_t> activation_shape(const FeatureConfig& feature, const TableConfig& table,
                                      const FeatureInput& input) {
  std::vector<int64_t> shape;
  write_activation_shape(resolve_layout(FeatureContext{feature, table, input}), table.dim, shape);
  return shape;
}

}  // namespace recemb::internal
