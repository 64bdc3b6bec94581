// How a table's rows get their initial values.
#ifndef RECEMB_INITIALIZER_H_
#define RECEMB_INITIALIZER_H_

#include <cstdint>
#include <functional>
#include <span>
#include <variant>

namespace recemb {

// Normal(mean, stddev) with values beyond 2 stddev redrawn (TF's TruncatedNormal). stddev 0 means
// TF's default 1/sqrt(dim). Values depend only on (seed, table name, row, column): the same table
// gets the same values whatever the number of threads or shards.
struct TruncatedNormal {
  float mean = 0.0f;
  float stddev = 0.0f;  // >= 0; 0 = 1/sqrt(dim)
};

// Every value is `value` (TF's Constant; Zeros is Constant{0}).
struct Constant {
  float value = 0.0f;
};

// Row r is filled with offset + r in every column (TF's RowIdInitializer, a testing aid).
struct RowId {
  float offset = 0.0f;
};

// Fills the rows [first_row, first_row + num_rows) of a table of width dim: `values` has
// num_rows * dim floats, row-major. Called on the thread that builds the Embedding, once per block
// of rows; an exception it throws propagates out of the Embedding's constructor.
using InitializerCallback =
    std::function<void(int64_t first_row, int64_t num_rows, int64_t dim, std::span<float> values)>;

using Initializer = std::variant<TruncatedNormal, Constant, RowId, InitializerCallback>;

}  // namespace recemb

#endif  // RECEMB_INITIALIZER_H_
