#include "embedding/exchange.h"

#include <cstring>
#include <utility>

#include "util/check.h"

namespace recemb::internal {
namespace {

constexpr size_t kHeaderBytes = 3 * sizeof(int64_t);

size_t padded(size_t bytes) { return (bytes + 7) / 8 * 8; }

// The arrays of a section whose header is at `at`, laid out as the file comment says.
RequestSection arrays(std::byte* at, int64_t num_bags, int64_t num_ids, bool has_weights) {
  RequestSection section{.num_bags = num_bags, .num_ids = num_ids};
  std::byte* next = at + kHeaderBytes;
  auto take = [&next](size_t bytes) {
    std::byte* start = next;
    next += padded(bytes);
    return start;
  };
  const auto bags = static_cast<size_t>(num_bags);
  const auto ids = static_cast<size_t>(num_ids);
  section.bags = reinterpret_cast<int64_t*>(take(bags * sizeof(int64_t)));
  section.offsets = reinterpret_cast<int64_t*>(take((bags + 1) * sizeof(int64_t)));
  section.ids = reinterpret_cast<int64_t*>(take(ids * sizeof(int64_t)));
  if (has_weights) section.weights = reinterpret_cast<float*>(take(ids * sizeof(float)));
  section.scales = reinterpret_cast<float*>(take(bags * sizeof(float)));
  return section;
}

}  // namespace

size_t request_section_bytes(int64_t num_bags, int64_t num_ids, bool has_weights) {
  const auto bags = static_cast<size_t>(num_bags);
  const auto ids = static_cast<size_t>(num_ids);
  return kHeaderBytes + (2 * bags + 1 + ids) * sizeof(int64_t) +
         (has_weights ? padded(ids * sizeof(float)) : 0) + padded(bags * sizeof(float));
}

RequestSection start_request_section(std::byte* at, int64_t num_bags, int64_t num_ids,
                                     bool has_weights) {
  RECEMB_CHECK(reinterpret_cast<uintptr_t>(at) % 8 == 0);
  const int64_t header[3] = {num_bags, num_ids, has_weights ? 1 : 0};
  std::memcpy(at, header, sizeof(header));
  RequestSection section = arrays(at, num_bags, num_ids, has_weights);
  section.offsets[0] = 0;
  return section;
}

RequestSection read_request_section(std::byte* at, size_t available, size_t& bytes) {
  RECEMB_CHECK(available >= kHeaderBytes && reinterpret_cast<uintptr_t>(at) % 8 == 0);
  int64_t header[3];
  std::memcpy(header, at, sizeof(header));
  RECEMB_CHECK(header[0] >= 0 && header[1] >= 0 && (header[2] == 0 || header[2] == 1));
  bytes = request_section_bytes(header[0], header[1], header[2] == 1);
  RECEMB_CHECK(bytes <= available);
  const RequestSection section = arrays(at, header[0], header[1], header[2] == 1);
  RECEMB_CHECK(section.offsets[0] == 0 && section.offsets[section.num_bags] == section.num_ids);
  for (int64_t i = 0; i < section.num_bags; ++i) {
    RECEMB_CHECK(section.offsets[i] <= section.offsets[i + 1]);
  }
  return section;
}

PoolInput pool_input(const RequestSection& section, TableRows rows, int64_t num_columns,
                     const QuantizationConfig* quantization) {
  return {.table = rows,
          .dim = num_columns,
          .offsets = section.offsets,
          .ids = section.ids,
          .weights = section.weights,
          .bag_scales = section.scales,
          .quantization = quantization};
}

RequestSection local_view(CsrFeature& csr) {
  return {.num_bags = csr.num_bags(),
          .num_ids = static_cast<int64_t>(csr.ids.size()),
          .bags = nullptr,
          .offsets = csr.offsets.data(),
          .ids = csr.ids.data(),
          .weights = csr.weights.empty() ? nullptr : csr.weights.data(),
          .scales = csr.bag_scales.data()};
}

void Message::resize(const std::vector<int64_t>& rank_bytes) {
  counts = rank_bytes;
  int64_t total = 0;
  for (const int64_t count : counts) total += count;
  bytes.resize(static_cast<size_t>(total));
}

size_t Message::offset(int rank) const {
  int64_t sum = 0;
  for (int q = 0; q < rank; ++q) sum += counts[static_cast<size_t>(q)];
  return static_cast<size_t>(sum);
}

Exchange::Exchange(std::shared_ptr<Communicator> communicator)
    : communicator_(std::move(communicator)),
      rank_(communicator_->rank()),
      world_size_(communicator_->size()) {}

void Exchange::all_to_all(const Message& send, Message& received) {
  received.counts.resize(send.counts.size());
  if (world_size_ == 1 && send.bytes.empty()) {
    received.counts[0] = 0;
    received.bytes.clear();
    return;
  }
  communicator_->all_to_all(send.bytes, send.counts, received.bytes, received.counts);
}

}  // namespace recemb::internal
