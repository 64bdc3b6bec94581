#include "embedding/router.h"

#include <algorithm>
#include <utility>

#include "util/check.h"

namespace recemb::internal {

Router::Router(const Partition& partition, std::vector<size_t> feature_table, int rank)
    : partition_(partition), feature_table_(std::move(feature_table)), rank_(rank) {
  RECEMB_CHECK(rank >= 0 && rank < partition.world_size());
}

bool Router::is_local_view(const TablePart& part) const { return part.rank == rank_ && part.whole; }

const TablePart* Router::local_whole_part(size_t table) const {
  for (const TablePart& part : partition_.table_parts(table)) {
    if (is_local_view(part)) return &part;
  }
  return nullptr;
}

void Router::count(const CsrFeature& csr, std::span<const TablePart> parts,
                   std::vector<SectionCounts>& counts) {
  counts.assign(parts.size(), {});
  if (parts[0].strategy != ShardingStrategy::kRowWise) {
    // Every part gets every non-empty bag.
    SectionCounts all{.bags = 0, .ids = static_cast<int64_t>(csr.ids.size())};
    for (int64_t b = 0; b < csr.num_bags(); ++b) {
      if (csr.offsets[static_cast<size_t>(b) + 1] > csr.offsets[static_cast<size_t>(b)]) ++all.bags;
    }
    std::fill(counts.begin(), counts.end(), all);
    return;
  }
  last_bag_.assign(parts.size(), -1);
  for (int64_t b = 0; b < csr.num_bags(); ++b) {
    for (int64_t j = csr.offsets[static_cast<size_t>(b)];
         j < csr.offsets[static_cast<size_t>(b) + 1]; ++j) {
      const size_t s = locate_in(parts[0], csr.ids[static_cast<size_t>(j)]).part;
      ++counts[s].ids;
      if (last_bag_[s] != b) {
        last_bag_[s] = b;
        ++counts[s].bags;
      }
    }
  }
}

void Router::write(const CsrFeature& csr, std::span<const TablePart> parts,
                   std::span<RequestSection* const> targets) {
  const bool weighted = !csr.weights.empty();
  if (parts[0].strategy != ShardingStrategy::kRowWise) {
    for (RequestSection* section : targets) {
      if (section == nullptr) continue;  // a local view
      int64_t bag = 0;
      for (int64_t b = 0; b < csr.num_bags(); ++b) {
        const int64_t first = csr.offsets[static_cast<size_t>(b)];
        const int64_t last = csr.offsets[static_cast<size_t>(b) + 1];
        if (first == last) continue;
        section->bags[bag] = b;
        section->scales[bag] = csr.bag_scales[static_cast<size_t>(b)];
        section->offsets[bag + 1] = last;
        ++bag;
      }
      // locate() leaves these ids unchanged.
      std::copy(csr.ids.begin(), csr.ids.end(), section->ids);
      if (weighted) std::copy(csr.weights.begin(), csr.weights.end(), section->weights);
      // Only empty bags are skipped and every id is copied, so the offsets are csr's.
    }
    return;
  }
  last_bag_.assign(parts.size(), -1);
  bags_written_.assign(parts.size(), 0);
  ids_written_.assign(parts.size(), 0);
  for (int64_t b = 0; b < csr.num_bags(); ++b) {
    for (int64_t j = csr.offsets[static_cast<size_t>(b)];
         j < csr.offsets[static_cast<size_t>(b) + 1]; ++j) {
      const Location location = locate_in(parts[0], csr.ids[static_cast<size_t>(j)]);
      const size_t s = location.part;
      RequestSection& section = *targets[s];
      if (last_bag_[s] != b) {
        last_bag_[s] = b;
        section.bags[bags_written_[s]] = b;
        section.scales[bags_written_[s]] = csr.bag_scales[static_cast<size_t>(b)];
        ++bags_written_[s];
      }
      section.ids[ids_written_[s]] = location.row;
      if (weighted) section.weights[ids_written_[s]] = csr.weights[static_cast<size_t>(j)];
      ++ids_written_[s];
      section.offsets[bags_written_[s]] = ids_written_[s];
    }
  }
}

void Router::route(std::span<CsrFeature> features, Requests& sent) {
  const int world_size = partition_.world_size();
  const auto ranks = static_cast<size_t>(world_size);
  RECEMB_CHECK(features.size() == feature_table_.size());
  // Per feature, per part of its table: what it sends there (nothing to count when every part is
  // a local view).
  counts_.resize(features.size());
  targets_.resize(features.size());
  for (size_t f = 0; f < features.size(); ++f) {
    const std::span<const TablePart> parts = partition_.table_parts(feature_table_[f]);
    targets_[f].assign(parts.size(), nullptr);
    const bool copied = std::any_of(parts.begin(), parts.end(),
                                    [&](const TablePart& part) { return !is_local_view(part); });
    if (copied) {
      count(features[f], parts, counts_[f]);
    } else {
      counts_[f].assign(parts.size(), {});
    }
  }
  // Lay the sections out, rank by rank, and write their headers.
  bytes_.assign(ranks, 0);
  for (int q = 0; q < world_size; ++q) {
    for (const Section& section : partition_.sections(q)) {
      const TablePart& held = partition_.rank_parts(q)[section.part];
      if (is_local_view(held)) continue;
      const SectionCounts& c = counts_[section.feature][held.index_in_table];
      bytes_[static_cast<size_t>(q)] += static_cast<int64_t>(
          request_section_bytes(c.bags, c.ids, !features[section.feature].weights.empty()));
    }
  }
  sent.message.resize(bytes_);
  sent.sections.resize(ranks);
  std::byte* at = sent.message.bytes.data();
  for (int q = 0; q < world_size; ++q) {
    std::vector<RequestSection>& sections = sent.sections[static_cast<size_t>(q)];
    const std::span<const Section> layout = partition_.sections(q);
    sections.resize(layout.size());
    for (size_t k = 0; k < layout.size(); ++k) {
      const TablePart& held = partition_.rank_parts(q)[layout[k].part];
      const size_t f = layout[k].feature;
      if (is_local_view(held)) {
        sections[k] = local_view(features[f]);
        continue;
      }
      const SectionCounts& c = counts_[f][held.index_in_table];
      const bool weighted = !features[f].weights.empty();
      sections[k] = start_request_section(at, c.bags, c.ids, weighted);
      at += request_section_bytes(c.bags, c.ids, weighted);
      targets_[f][held.index_in_table] = &sections[k];
    }
  }
  for (size_t f = 0; f < features.size(); ++f) {
    const std::vector<RequestSection*>& targets = targets_[f];
    if (std::any_of(targets.begin(), targets.end(), [](const auto* t) { return t != nullptr; })) {
      write(features[f], partition_.table_parts(feature_table_[f]), targets);
    }
  }
}

void Router::read(const Requests& sent, Requests& received) const {
  const int world_size = partition_.world_size();
  const std::span<const Section> mine = partition_.sections(rank_);
  received.sections.resize(static_cast<size_t>(world_size));
  for (int q = 0; q < world_size; ++q) {
    const auto from = static_cast<size_t>(q);
    std::byte* at = received.message.bytes.data() + received.message.offset(q);
    auto available = static_cast<size_t>(received.message.counts[from]);
    std::vector<RequestSection>& sections = received.sections[from];
    sections.resize(mine.size());
    for (size_t k = 0; k < mine.size(); ++k) {
      if (q == rank_ && is_local_view(partition_.rank_parts(rank_)[mine[k].part])) {
        sections[k] = sent.sections[from][k];
        continue;
      }
      size_t bytes = 0;
      sections[k] = read_request_section(at, available, bytes);
      at += bytes;
      available -= bytes;
    }
    RECEMB_CHECK(available == 0);
  }
}

}  // namespace recemb::internal
