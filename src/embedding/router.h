// The router: where each (feature, id) of a batch goes, and back. It maps an id to the part of the
// feature's table that holds its row and the row's local index there (placement/partition.h), and
// writes the request sections that carry a batch's ids to the parts' owners (embedding/exchange.h),
// in the partition's section order; on the receiving side it reads them back.
//
//   sent[q][k]:     section k of partition.sections(q), what this rank asks of rank q's parts
//   received[q][k]: section k of partition.sections(rank), what rank q asks of this rank's parts
//
// A section's bag i is the sender's bag section.bag(i), and part.global_row(section.ids[j]) is the
// table row of its id j: the way back from the parts to the batch.
//
// Local views. A section a rank sends itself for a part that holds its table whole (table-wise, a
// replicated table's own copy, a plan with a single part) is not copied into the message: it is a
// local view of the feature's CsrFeature (exchange.h), every bag included, its ids the table's
// rows. With one rank and whole tables, routing and the exchange move no byte.
//
// Dynamic tables. locate() (locate_in) is the one place an id becomes (part, local row); route()
// applies it to every id. A dynamic table's key goes to the part owning its bucket
// (placement/partition.h, key_part) and travels as the key; the part resolves it to a slot through
// its index before pooling (embedding/dynamic_part.h), so the same sections, exchange, pooling and
// update serve it with no other path.
#ifndef RECEMB_EMBEDDING_ROUTER_H_
#define RECEMB_EMBEDDING_ROUTER_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "batch/csr_feature.h"
#include "embedding/exchange.h"
#include "placement/partition.h"

namespace recemb::internal {

// The sections of one direction of a request exchange, per rank, and the message they live in.
struct Requests {
  Message message;
  std::vector<std::vector<RequestSection>> sections;  // [rank][section]
};

class Router {
 public:
  // `partition` must outlive the router; feature_table[f] is feature f's table; rank is this
  // process's rank in [0, partition.world_size()).
  Router(const Partition& partition, std::vector<size_t> feature_table, int rank);

  // Where the row of `id` (in [0, vocabulary_size) of `table`, or a dynamic table's key) lives:
  // the part's index in
  // partition.table_parts(table) and its local row. A table not split by rows (table-wise,
  // column-wise, replicated) sends every id to each of its parts (each column range, each copy) at
  // local row id: part 0 stands for all of them.
  struct Location {
    size_t part = 0;
    int64_t row = 0;
  };
  Location locate(size_t table, int64_t id) const {
    return locate_in(partition_.table_parts(table)[0], id);
  }

  // Whether the sections this rank sends part `part` are local views.
  bool is_local_view(const TablePart& part) const;
  // The part of `table` that this rank holds whole, or nullptr: the part that pools the table's
  // features straight into their activations.
  const TablePart* local_whole_part(size_t table) const;

  // Writes the sections this rank sends for `features` (validated CsrFeatures, one per feature)
  // into `sent`, reusing its memory. Views borrow the features' arrays: they stay valid while
  // `features` is neither changed nor destroyed.
  void route(std::span<CsrFeature> features, Requests& sent);

  // Reads the sections of `received.message` (what an all-to-all of sent.message delivered) into
  // received.sections; this rank's own views are taken from `sent`. A malformed message is a bug
  // (abort): it comes from a rank of the same program.
  void read(const Requests& sent, Requests& received) const;

 private:
  // locate() given the table's first part (which says how the table is split).
  static Location locate_in(const TablePart& first, int64_t id) {
    if (first.strategy != ShardingStrategy::kRowWise) return {.part = 0, .row = id};
    // A key stays a key: the part resolves it through its index (dynamic_part.h).
    if (first.keyed) return {.part = key_part(id, first.row_stride), .row = id};
    return {.part = static_cast<size_t>(id % first.row_stride), .row = id / first.row_stride};
  }
  // The bags and ids one feature sends to one part of its table.
  struct SectionCounts {
    int64_t bags = 0;
    int64_t ids = 0;
  };
  void count(const CsrFeature& csr, std::span<const TablePart> parts,
             std::vector<SectionCounts>& counts);
  void write(const CsrFeature& csr, std::span<const TablePart> parts,
             std::span<RequestSection* const> targets);

  const Partition& partition_;
  std::vector<size_t> feature_table_;
  int rank_;
  // Per-call buffers (no allocation once grown).
  std::vector<std::vector<SectionCounts>> counts_;     // [feature][part of its table]
  std::vector<std::vector<RequestSection*>> targets_;  // [feature][part of its table]; null: view
  std::vector<int64_t> last_bag_;                      // [part of a table]
  std::vector<int64_t> bags_written_;                  // [part of a table]
  std::vector<int64_t> ids_written_;                   // [part of a table]
  std::vector<int64_t> bytes_;                         // [rank]
};

}  // namespace recemb::internal

#endif  // RECEMB_EMBEDDING_ROUTER_H_
