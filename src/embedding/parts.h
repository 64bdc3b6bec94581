// Access to the parts of the tables that one rank holds (placement/partition.h), for code that
// moves whole variables in and out without gathering them on one rank: the checkpoint writer and
// reader (src/checkpoint), where each rank writes and reads only its own rows and columns.
//
// Layout of a part's variable: `bytes` holds part.rows local rows of `columns` values each (of its
// dtype), row-major; local row l is the table's row part.global_row(l), and its values are the
// table variable's columns [first_column, first_column + columns) of a row `width` values wide. For
// a variable as wide as the table's dim that is the part's column range; for a narrower one (a
// row-wise slot, width 1) the part keeps the whole width (first_column 0). A dynamic table's part
// (LocalPart::dynamic) holds one row more, its zero row, and local row l is the row of the key in
// slot l of its index (no table row).
#ifndef RECEMB_EMBEDDING_PARTS_H_
#define RECEMB_EMBEDDING_PARTS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "recemb/communicator.h"
#include "recemb/config.h"
#include "recemb/embedding.h"

#include "embedding/dynamic_part.h"
#include "placement/partition.h"
#include "storage/table_storage.h"
#include "util/check.h"

namespace recemb::internal {

struct Model;

// One variable of a part; Float is float or const float.
template <class Float>
struct PartVariable {
  using Byte = std::conditional_t<std::is_const_v<Float>, const std::byte, std::byte>;

  std::string name;          // "parameters", then the slots (Embedding::variable_names order)
  int64_t width = 0;         // values per row of the whole variable
  int64_t first_column = 0;  // of this part's values within a whole row
  int64_t columns = 0;       // values per local row
  // The values' type: float32, except a 16-bit table's parameters (docs/semantics.md, "16-bit
  // tables"), which are its bfloat16 or float16 values as they are.
  DType dtype = DType::kFloat32;
  // part.rows * columns values of dtype: the part's memory itself.
  std::span<Byte> bytes;

  // The values of a float32 variable (dtype kFloat32).
  std::span<Float> floats() const {
    RECEMB_CHECK(dtype == DType::kFloat32);
    return {reinterpret_cast<Float*>(bytes.data()), bytes.size() / sizeof(float)};
  }
};

template <class Float>
struct LocalPart {
  TablePart part;  // part.table indexes Embedding::tables()
  std::vector<PartVariable<Float>> variables;
  // A dynamic table's part (part.keyed): its keys, whose slots are the local rows of `variables`
  // (which also hold the zero row, local row part.rows); nullptr for a static table.
  std::conditional_t<std::is_const_v<Float>, const DynamicPart*, DynamicPart*> dynamic = nullptr;
};

struct PublicationState;  // serving/publisher.cc

// One part's changes since the last publish (embedding/change_log.h), for online publishing.
struct PartChanges {
  TablePart part;  // part.table indexes Embedding::tables()
  // A byte per local row (a dynamic part: per slot of its index), 1 for a row written by training
  // steps; empty before tracking started.
  std::span<const uint8_t> changed_rows;
  std::span<const int64_t> removed_keys;  // a dynamic part's, as ChangeLog::removed_keys
  bool untracked = false;                 // rows written by another call since: a base follows
  const DynamicPart* dynamic = nullptr;   // a dynamic table's part
  // The part's rows (part.rows rows of part.num_columns values, and a dynamic part's zero row, in
  // the table's dtype: TableStorage::read_rows gives them as float32), and whether they are its
  // table's whole (every row and column: Embedding::has_whole_table).
  const TableStorage* storage = nullptr;
  bool whole = false;
};

// Online publishing's door into the engine (serving/publisher.cc): the changes of this rank's
// parts and where the Embedding last published; nothing else. Each call waits for a prefetch in
// progress first.
struct ChangeAccess {
  // The parts this rank holds, in partition.rank_parts(rank) order.
  static std::vector<PartChanges> changes(Embedding& embedding);
  // After a base: every part tracks changes from here on (ChangeLog::start).
  static void start_tracking(Embedding& embedding);
  // After a delta took the changes (ChangeLog::clear).
  static void clear(Embedding& embedding);
  // Where and what the Embedding last published: null before its first publish.
  static std::shared_ptr<PublicationState>& publication(Embedding& embedding);
};

struct PartAccess {
  // The parts this rank holds (partition.rank_parts(rank)), in that order. The spans point into
  // the Embedding and stay valid while it lives and is not moved from. Waits for a prefetch in
  // progress first (as every call on the Embedding does).
  static std::vector<LocalPart<const float>> local_parts(const Embedding& embedding);
  // The same, to write: through the parts' untracked door (embedding/table_state.h), so that the
  // Embedding's next publish writes a base.
  static std::vector<LocalPart<float>> local_parts(Embedding& embedding);
  // The ranks sharing the tables (local_communicator() for one process alone).
  static Communicator& communicator(const Embedding& embedding);
  // Whether a training lookup is not applied yet (its batch holds slots of dynamic tables' keys).
  static bool has_pending_training_lookup(const Embedding& embedding);

 private:
  template <class Float>
  static std::vector<LocalPart<Float>> parts_of(const Embedding& embedding);
};

}  // namespace recemb::internal

#endif  // RECEMB_EMBEDDING_PARTS_H_
