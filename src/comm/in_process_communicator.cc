// The communicators that never leave this process: a group of one (local_communicator) and a
// group of threads (in_process_communicators), where each collective is two barriers: every rank
// publishes its send buffer, copies what is addressed to it from the others' buffers, and waits
// until all have copied before its buffer may change.
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>

#include "recemb/communicator.h"
#include "recemb/error.h"

#include "util/check.h"

namespace recemb {

Communicator::~Communicator() = default;

namespace {

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string_view name() const override { return "local"; }

  void all_to_all(std::span<const std::byte> send, std::span<const int64_t> send_counts,
                  std::vector<std::byte>& recv, std::span<int64_t> recv_counts) override {
    RECEMB_CHECK(send_counts.size() == 1 && recv_counts.size() == 1);
    RECEMB_CHECK(send_counts[0] == static_cast<int64_t>(send.size()));
    recv.assign(send.begin(), send.end());
    recv_counts[0] = send_counts[0];
  }

  void all_gather(std::span<const std::byte> send, std::vector<std::byte>& recv,
                  std::span<int64_t> recv_counts) override {
    RECEMB_CHECK(recv_counts.size() == 1);
    recv.assign(send.begin(), send.end());
    recv_counts[0] = static_cast<int64_t>(send.size());
  }
};

// What the ranks of one in-process group share.
class Group {
 public:
  explicit Group(int size) : posted_(static_cast<size_t>(size)) {}

  int size() const { return static_cast<int>(posted_.size()); }

  // Rank `rank`'s contribution to the current collective: its send buffer and, for all_to_all,
  // the byte count of each destination's part.
  struct Posted {
    std::span<const std::byte> data;
    std::span<const int64_t> counts;
  };

  void post(int rank, Posted posted) {
    posted_[static_cast<size_t>(rank)] = posted;
    arrive_and_wait();
  }
  const Posted& posted(int rank) const { return posted_[static_cast<size_t>(rank)]; }
  // Called once every rank has read what it needs from the posted buffers.
  void done() { arrive_and_wait(); }

 private:
  // A reusable barrier (std::barrier would do, but this one is visible to ThreadSanitizer).
  void arrive_and_wait() {
    std::unique_lock lock(mutex_);
    const uint64_t generation = generation_;
    if (++arrived_ == size()) {
      arrived_ = 0;
      ++generation_;
      all_arrived_.notify_all();
      return;
    }
    all_arrived_.wait(lock, [&] { return generation_ != generation; });
  }

  std::vector<Posted> posted_;
  std::mutex mutex_;
  std::condition_variable all_arrived_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
};

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<Group> group, int rank)
      : group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  std::string_view name() const override { return "in-process"; }

  void all_to_all(std::span<const std::byte> send, std::span<const int64_t> send_counts,
                  std::vector<std::byte>& recv, std::span<int64_t> recv_counts) override {
    const auto n = static_cast<size_t>(size());
    RECEMB_CHECK(send_counts.size() == n && recv_counts.size() == n);
    int64_t sent = 0;
    for (const int64_t count : send_counts) sent += count;
    RECEMB_CHECK(sent == static_cast<int64_t>(send.size()));
    group_->post(rank_, {send, send_counts});
    int64_t total = 0;
    for (int q = 0; q < size(); ++q) {
      recv_counts[static_cast<size_t>(q)] = group_->posted(q).counts[static_cast<size_t>(rank_)];
      total += recv_counts[static_cast<size_t>(q)];
    }
    recv.resize(static_cast<size_t>(total));
    size_t written = 0;
    for (int q = 0; q < size(); ++q) {
      const Group::Posted& from = group_->posted(q);
      int64_t offset = 0;
      for (int r = 0; r < rank_; ++r) offset += from.counts[static_cast<size_t>(r)];
      const auto count = static_cast<size_t>(from.counts[static_cast<size_t>(rank_)]);
      if (count != 0) std::memcpy(recv.data() + written, from.data.data() + offset, count);
      written += count;
    }
    group_->done();
  }

  void all_gather(std::span<const std::byte> send, std::vector<std::byte>& recv,
                  std::span<int64_t> recv_counts) override {
    RECEMB_CHECK(recv_counts.size() == static_cast<size_t>(size()));
    group_->post(rank_, {send, {}});
    size_t total = 0;
    for (int q = 0; q < size(); ++q) total += group_->posted(q).data.size();
    recv.resize(total);
    size_t written = 0;
    for (int q = 0; q < size(); ++q) {
      const std::span<const std::byte> data = group_->posted(q).data;
      if (!data.empty()) std::memcpy(recv.data() + written, data.data(), data.size());
      written += data.size();
      recv_counts[static_cast<size_t>(q)] = static_cast<int64_t>(data.size());
    }
    group_->done();
  }

 private:
  std::shared_ptr<Group> group_;
  int rank_;
};

}  // namespace

std::shared_ptr<Communicator> local_communicator() { return std::make_shared<LocalCommunicator>(); }

std::vector<std::shared_ptr<Communicator>> in_process_communicators(int size) {
  if (size < 1) {
    throw InvalidArgument("in_process_communicators: size must be >= 1, got " +
                          std::to_string(size));
  }
  auto group = std::make_shared<Group>(size);
  std::vector<std::shared_ptr<Communicator>> communicators;
  communicators.reserve(static_cast<size_t>(size));
  for (int rank = 0; rank < size; ++rank) {
    communicators.push_back(std::make_shared<InProcessCommunicator>(group, rank));
  }
  return communicators;
}

}  // namespace recemb
