// Fills blocks of table rows from an Initializer (initializer.h), reproducibly.
#ifndef RECEMB_STORAGE_INITIALIZER_H_
#define RECEMB_STORAGE_INITIALIZER_H_

#include <cstdint>
#include <span>
#include <string_view>

#include "recemb/initializer.h"

namespace recemb::internal {

// A seed for one table: mixes the Embedding's seed with the table's name, so tables differ and a
// table keeps its values when other tables are added or reordered.
uint64_t table_seed(uint64_t seed, std::string_view table_name);

// Writes rows [first_row, first_row + num_rows) of a table of width dim into `values`
// (num_rows * dim floats, row-major). Random initializers draw row r from a stream keyed by
// (table_seed, r) only, so any split of the rows into blocks gives the same table.
void initialize_rows(const Initializer& initializer, uint64_t table_seed, int64_t first_row,
                     int64_t num_rows, int64_t dim, std::span<float> values);

}  // namespace recemb::internal

#endif  // RECEMB_STORAGE_INITIALIZER_H_
