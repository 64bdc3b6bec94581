#include "train/run/data_parallel.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "recemb/error.h"

#include "support/collectives.h"

namespace recemb::train {

Slice rank_slice(int64_t count, int rank, int num_ranks) {
  if (count < 0 || num_ranks < 1 || rank < 0 || rank >= num_ranks) {
    throw InvalidArgument("rank_slice: count " + std::to_string(count) + ", rank " +
                          std::to_string(rank) + " of " + std::to_string(num_ranks) +
                          " ranks (requires count >= 0 and 0 <= rank < ranks)");
  }
  // Counts stay far below 2^63 / num_ranks (a batch is held in memory).
  const int64_t begin = count * rank / num_ranks;
  const int64_t end = count * (rank + 1) / num_ranks;
  return {.begin = begin, .count = end - begin};
}

RankGroup::RankGroup(std::shared_ptr<Communicator> communicator)
    : communicator_(communicator != nullptr ? std::move(communicator) : local_communicator()),
      counts_(static_cast<size_t>(communicator_->size())) {}

std::shared_ptr<Communicator> RankGroup::embedding_communicator() const {
  return size() > 1 ? communicator_ : nullptr;
}

void RankGroup::agree(std::exception_ptr error) {
  agree_on_error(*communicator_, std::move(error));
}

std::vector<int64_t> RankGroup::all_gather(std::span<const int64_t> values) {
  return support::all_gather(*communicator_, values);
}

std::string RankGroup::broadcast(const std::string& text) {
  return support::broadcast(*communicator_, text);
}

void RankGroup::all_gather(std::span<const float> values, std::vector<float>& all) {
  support::all_gather(*communicator_, values, all, counts_, received_);
}

double RankGroup::average(int64_t count, double local_loss, std::span<const float> local_values,
                          std::span<float> mean) {
  if (size() == 1) {
    if (local_values.size() != mean.size()) {
      throw FailedPrecondition("average: " + std::to_string(local_values.size()) +
                               " local values for a mean of " + std::to_string(mean.size()));
    }
    std::copy(local_values.begin(), local_values.end(), mean.begin());
    return local_loss;
  }
  // A rank with examples sends its loss (a double) and then its values.
  const bool has_examples = slice(count).count > 0;
  send_.resize(has_examples ? sizeof(double) + local_values.size_bytes() : 0);
  if (has_examples) {
    std::memcpy(send_.data(), &local_loss, sizeof(double));
    std::memcpy(send_.data() + sizeof(double), local_values.data(), local_values.size_bytes());
  }
  communicator_->all_gather(send_, received_, counts_);

  const auto expected = static_cast<int64_t>(sizeof(double) + mean.size_bytes());
  for (int q = 0; q < size(); ++q) {
    const int64_t received = counts_[static_cast<size_t>(q)];
    if (received != 0 && received != expected) {
      throw FailedPrecondition("average: rank " + std::to_string(q) + " sent " +
                               std::to_string((received - static_cast<int64_t>(sizeof(double))) /
                                              static_cast<int64_t>(sizeof(float))) +
                               " values; expected " + std::to_string(mean.size()));
    }
  }
  // sum_q (count_q / count) x_q in double, in rank order (the order of the ranks' parts).
  const double total = static_cast<double>(count);
  double loss = 0.0;
  sums_.assign(mean.size(), 0.0);
  size_t offset = 0;
  for (int q = 0; q < size(); ++q) {
    if (counts_[static_cast<size_t>(q)] == 0) continue;
    const double weight = static_cast<double>(rank_slice(count, q, size()).count) / total;
    double rank_loss = 0.0;
    std::memcpy(&rank_loss, received_.data() + offset, sizeof(double));
    loss += weight * rank_loss;
    const std::byte* values = received_.data() + offset + sizeof(double);
    for (size_t i = 0; i < mean.size(); ++i) {
      float value = 0.0f;
      std::memcpy(&value, values + i * sizeof(float), sizeof(float));
      sums_[i] += weight * static_cast<double>(value);
    }
    offset += static_cast<size_t>(expected);
  }
  for (size_t i = 0; i < mean.size(); ++i) mean[i] = static_cast<float>(sums_[i]);
  return loss;
}

}  // namespace recemb::train
