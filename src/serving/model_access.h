// What tests read of a ServingModel beyond its API: the bytes of its tables as they are in its
// memory, to compare a base with deltas applied against a fresh export byte for byte.
#ifndef RECEMB_SERVING_MODEL_ACCESS_H_
#define RECEMB_SERVING_MODEL_ACCESS_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "recemb/serving.h"

namespace recemb::internal {

struct ServingModelAccess {
  // Table `table`'s rows blob without padding (a dynamic table's zero row included).
  static std::span<const std::byte> table_rows(const ServingModel& model, size_t table);
  // A dynamic table's keys, increasing; empty for a static table.
  static std::span<const int64_t> table_keys(const ServingModel& model, size_t table);
};

}  // namespace recemb::internal

#endif  // RECEMB_SERVING_MODEL_ACCESS_H_
