// The request sections of the id exchange (src/embedding/exchange.h): their size and layout, a
// round trip of random sections packed back to back in one buffer, gain(), pooling a received
// section against a float64 plain-loop reference, local views, messages and the exchange. A
// malformed section aborts (RECEMB_CHECK); the project has no death tests, so that path is not
// exercised here.
#include "embedding/exchange.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <gtest/gtest.h>
#include <memory>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "recemb/communicator.h"

#include "batch/csr_feature.h"
#include "kernels/pool.h"

namespace recemb::internal {
namespace {

size_t round_up_8(size_t bytes) { return (bytes + 7) / 8 * 8; }

// The layout of exchange.h, written out: a header of three int64, then each array at a multiple of
// 8 bytes. Offsets of each array from the section's start, and the total.
struct Layout {
  size_t bags, offsets, ids, weights, scales, total;
};

Layout layout_of(int64_t num_bags, int64_t num_ids, bool has_weights) {
  const auto b = static_cast<size_t>(num_bags);
  const auto n = static_cast<size_t>(num_ids);
  Layout l{};
  l.bags = 24;
  l.offsets = l.bags + 8 * b;
  l.ids = l.offsets + 8 * (b + 1);
  l.weights = l.ids + 8 * n;
  l.scales = l.weights + (has_weights ? round_up_8(4 * n) : 0);
  l.total = l.scales + round_up_8(4 * b);
  return l;
}

// One section's contents, as a sender has them.
struct SectionData {
  std::vector<int64_t> bags;
  std::vector<int64_t> offsets;  // num_bags + 1 entries
  std::vector<int64_t> ids;
  std::vector<float> weights;  // empty: unweighted
  std::vector<float> scales;
  bool has_weights = false;

  int64_t num_bags() const { return static_cast<int64_t>(bags.size()); }
  int64_t num_ids() const { return static_cast<int64_t>(ids.size()); }
};

// Random bags (some empty) of ids in [0, num_rows); the bag indices increase with gaps.
SectionData random_section(std::mt19937_64& rng, int64_t num_bags, int64_t max_bag_length,
                           bool has_weights, int64_t num_rows) {
  SectionData s;
  s.has_weights = has_weights;
  std::uniform_int_distribution<int64_t> gap(1, 4), length(0, max_bag_length), row(0, num_rows - 1);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  int64_t bag = -1;
  s.offsets.push_back(0);
  for (int64_t i = 0; i < num_bags; ++i) {
    bag += gap(rng);
    s.bags.push_back(bag);
    const int64_t n = length(rng);
    for (int64_t j = 0; j < n; ++j) {
      s.ids.push_back(row(rng));
      if (has_weights) s.weights.push_back(value(rng));
    }
    s.offsets.push_back(static_cast<int64_t>(s.ids.size()));
    s.scales.push_back(value(rng));
  }
  return s;
}

void fill(const RequestSection& section, const SectionData& data) {
  for (int64_t i = 0; i < data.num_bags(); ++i) {
    const auto b = static_cast<size_t>(i);
    section.bags[b] = data.bags[b];
    section.offsets[b + 1] = data.offsets[b + 1];
    section.scales[b] = data.scales[b];
  }
  for (int64_t j = 0; j < data.num_ids(); ++j) {
    const auto k = static_cast<size_t>(j);
    section.ids[k] = data.ids[k];
    if (data.has_weights) section.weights[k] = data.weights[k];
  }
}

::testing::AssertionResult holds(const RequestSection& section, const SectionData& data) {
  if (section.num_bags != data.num_bags() || section.num_ids != data.num_ids()) {
    return ::testing::AssertionFailure()
           << section.num_bags << " bags, " << section.num_ids << " ids; expected "
           << data.num_bags() << ", " << data.num_ids();
  }
  if ((section.weights != nullptr) != data.has_weights) {
    return ::testing::AssertionFailure() << "weights " << (section.weights ? "present" : "absent");
  }
  for (size_t b = 0; b < data.bags.size(); ++b) {
    if (section.bags[b] != data.bags[b] || section.scales[b] != data.scales[b]) {
      return ::testing::AssertionFailure() << "bag " << b;
    }
  }
  for (size_t b = 0; b < data.offsets.size(); ++b) {
    if (section.offsets[b] != data.offsets[b]) {
      return ::testing::AssertionFailure() << "offset " << b << ": " << section.offsets[b];
    }
  }
  for (size_t j = 0; j < data.ids.size(); ++j) {
    if (section.ids[j] != data.ids[j]) return ::testing::AssertionFailure() << "id " << j;
    if (data.has_weights && section.weights[j] != data.weights[j]) {
      return ::testing::AssertionFailure() << "weight " << j;
    }
  }
  return ::testing::AssertionSuccess();
}

// An 8-aligned buffer of `bytes` bytes (a multiple of 8).
std::vector<int64_t> aligned_buffer(size_t bytes) {
  EXPECT_EQ(bytes % 8, 0u);
  return std::vector<int64_t>(bytes / 8, int64_t{-0x5a5a5a5a5a5a5a5a});  // not zero: catches unset
}

std::byte* bytes_of(std::vector<int64_t>& buffer) {
  return reinterpret_cast<std::byte*>(buffer.data());
}

TEST(RequestSectionBytes, IsAMultipleOf8AndMatchesTheLayout) {
  for (const bool weighted : {false, true}) {
    for (int64_t num_bags = 0; num_bags <= 9; ++num_bags) {
      for (int64_t num_ids = 0; num_ids <= 9; ++num_ids) {
        const size_t bytes = request_section_bytes(num_bags, num_ids, weighted);
        EXPECT_EQ(bytes % 8, 0u) << num_bags << " bags, " << num_ids << " ids";
        EXPECT_EQ(bytes, layout_of(num_bags, num_ids, weighted).total)
            << num_bags << " bags, " << num_ids << " ids, weighted " << weighted;
      }
    }
  }
  // The smallest: the header and offsets[0] (and nothing else).
  EXPECT_EQ(request_section_bytes(0, 0, false), 32u);
  EXPECT_EQ(request_section_bytes(0, 0, true), 32u);
}

TEST(StartRequestSection, WritesTheHeaderAndPlacesTheArraysAsTheLayoutSays) {
  for (const bool weighted : {false, true}) {
    for (const auto& [num_bags, num_ids] : std::vector<std::pair<int64_t, int64_t>>{
             {0, 0}, {1, 0}, {3, 0}, {1, 1}, {2, 3}, {5, 7}, {4, 8}}) {
      SCOPED_TRACE(::testing::Message()
                   << num_bags << " bags, " << num_ids << " ids, weighted " << weighted);
      const Layout l = layout_of(num_bags, num_ids, weighted);
      std::vector<int64_t> buffer = aligned_buffer(l.total);
      std::byte* at = bytes_of(buffer);
      const RequestSection s = start_request_section(at, num_bags, num_ids, weighted);
      EXPECT_EQ(buffer[0], num_bags);
      EXPECT_EQ(buffer[1], num_ids);
      EXPECT_EQ(buffer[2], weighted ? 1 : 0);
      EXPECT_EQ(s.num_bags, num_bags);
      EXPECT_EQ(s.num_ids, num_ids);
      EXPECT_EQ(reinterpret_cast<std::byte*>(s.bags), at + l.bags);
      EXPECT_EQ(reinterpret_cast<std::byte*>(s.offsets), at + l.offsets);
      EXPECT_EQ(reinterpret_cast<std::byte*>(s.ids), at + l.ids);
      if (weighted) {
        EXPECT_EQ(reinterpret_cast<std::byte*>(s.weights), at + l.weights);
      } else {
        EXPECT_EQ(s.weights, nullptr);
      }
      EXPECT_EQ(reinterpret_cast<std::byte*>(s.scales), at + l.scales);
      EXPECT_EQ(s.offsets[0], 0);
    }
  }
}

struct Shape {
  int64_t num_bags;
  int64_t max_bag_length;  // 0: every bag empty
  bool weighted;
};

TEST(ReadRequestSection, RoundTripsRandomSectionsPackedBackToBack) {
  const uint64_t seed = 2024;
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  // Named corner cases first (no bags; bags but no ids; one id), then random shapes.
  std::vector<Shape> shapes = {{0, 0, false}, {0, 0, true}, {3, 0, false},
                               {3, 0, true},  {1, 1, true}, {1, 1, false}};
  std::uniform_int_distribution<int64_t> bags(0, 7), length(0, 5);
  std::bernoulli_distribution weighted(0.5);
  for (int i = 0; i < 40; ++i) shapes.push_back({bags(rng), length(rng), weighted(rng)});

  std::vector<SectionData> data;
  size_t total = 0;
  for (const Shape& shape : shapes) {
    data.push_back(random_section(rng, shape.num_bags, shape.max_bag_length, shape.weighted, 100));
    total += request_section_bytes(data.back().num_bags(), data.back().num_ids(), shape.weighted);
  }
  std::vector<int64_t> buffer = aligned_buffer(total);
  // Write every section, then read them all: a section written past its size would clobber the
  // next one's header or arrays.
  size_t written = 0;
  for (const SectionData& d : data) {
    const RequestSection s =
        start_request_section(bytes_of(buffer) + written, d.num_bags(), d.num_ids(), d.has_weights);
    fill(s, d);
    written += request_section_bytes(d.num_bags(), d.num_ids(), d.has_weights);
  }
  ASSERT_EQ(written, total);
  size_t read = 0;
  for (size_t k = 0; k < data.size(); ++k) {
    size_t bytes = 0;
    const RequestSection s = read_request_section(bytes_of(buffer) + read, total - read, bytes);
    EXPECT_EQ(bytes,
              request_section_bytes(data[k].num_bags(), data[k].num_ids(), data[k].has_weights))
        << "section " << k;
    EXPECT_TRUE(holds(s, data[k])) << "section " << k;
    read += bytes;
  }
  EXPECT_EQ(read, total);
}

TEST(ReadRequestSection, ReadsASectionThatFillsTheMessageExactly) {
  std::mt19937_64 rng(7);
  const SectionData d = random_section(rng, 5, 3, true, 10);
  const size_t bytes = request_section_bytes(d.num_bags(), d.num_ids(), true);
  std::vector<int64_t> buffer = aligned_buffer(bytes);
  fill(start_request_section(bytes_of(buffer), d.num_bags(), d.num_ids(), true), d);
  size_t read = 0;
  EXPECT_TRUE(holds(read_request_section(bytes_of(buffer), bytes, read), d));
  EXPECT_EQ(read, bytes);
}

TEST(RequestSection, GainIsTheWeightTimesTheBagScale) {
  std::mt19937_64 rng(11);
  for (const bool weighted : {false, true}) {
    const SectionData d = random_section(rng, 6, 4, weighted, 10);
    std::vector<int64_t> buffer =
        aligned_buffer(request_section_bytes(d.num_bags(), d.num_ids(), weighted));
    const RequestSection s =
        start_request_section(bytes_of(buffer), d.num_bags(), d.num_ids(), weighted);
    fill(s, d);
    for (int64_t i = 0; i < d.num_bags(); ++i) {
      for (int64_t j = d.offsets[static_cast<size_t>(i)]; j < d.offsets[static_cast<size_t>(i) + 1];
           ++j) {
        // A product of two floats is exact in double; rounding it once gives float's product.
        const double weight = weighted ? double{d.weights[static_cast<size_t>(j)]} : 1.0;
        const auto expected = static_cast<float>(weight * double{d.scales[static_cast<size_t>(i)]});
        EXPECT_EQ(s.gain(i, j), expected) << "bag " << i << " id " << j << " weighted " << weighted;
      }
    }
  }
}

// Plain float64 reference of pooling `d` over rows [num_rows, num_columns]: per bag, the scale
// times the weighted sum of the rows of its ids.
std::vector<double> reference_pool(const SectionData& d, const std::vector<float>& rows,
                                   int64_t num_columns) {
  const auto columns = static_cast<size_t>(num_columns);
  std::vector<double> out(d.bags.size() * columns, 0.0);
  for (size_t b = 0; b < d.bags.size(); ++b) {
    for (auto j = static_cast<size_t>(d.offsets[b]); j < static_cast<size_t>(d.offsets[b + 1]);
         ++j) {
      const double weight = d.has_weights ? d.weights[j] : 1.0;
      for (size_t c = 0; c < columns; ++c) {
        out[b * columns + c] += weight * rows[static_cast<size_t>(d.ids[j]) * columns + c];
      }
    }
    for (size_t c = 0; c < columns; ++c) out[b * columns + c] *= d.scales[b];
  }
  return out;
}

TEST(PoolInput, PoolingAReceivedSectionMatchesAFloat64Reference) {
  for (const int64_t num_columns : {1, 3, 8, 17}) {
    for (const bool weighted : {false, true}) {
      const uint64_t seed = 100 + static_cast<uint64_t>(num_columns) * 2 + (weighted ? 1 : 0);
      SCOPED_TRACE(::testing::Message()
                   << "seed " << seed << ", " << num_columns << " columns, weighted " << weighted);
      std::mt19937_64 rng(seed);
      const int64_t num_rows = 13;
      std::vector<float> rows(static_cast<size_t>(num_rows * num_columns));
      std::uniform_real_distribution<float> value(-1.0f, 1.0f);
      for (float& x : rows) x = value(rng);
      const SectionData d = random_section(rng, 9, 6, weighted, num_rows);
      // Through the wire form: the section the receiver reads, not the sender's arrays.
      std::vector<int64_t> buffer =
          aligned_buffer(request_section_bytes(d.num_bags(), d.num_ids(), weighted));
      fill(start_request_section(bytes_of(buffer), d.num_bags(), d.num_ids(), weighted), d);
      size_t bytes = 0;
      const RequestSection received =
          read_request_section(bytes_of(buffer), buffer.size() * 8, bytes);

      const PoolInput input = pool_input(received, rows.data(), num_columns, nullptr);
      EXPECT_EQ(input.dim, num_columns);
      EXPECT_EQ(input.quantization, nullptr);
      std::vector<float> out(static_cast<size_t>(d.num_bags() * num_columns), 99.0f);
      pool_bags(input, 0, d.num_bags(), out.data());
      const std::vector<double> expected = reference_pool(d, rows, num_columns);
      ASSERT_EQ(out.size(), expected.size());
      for (size_t i = 0; i < out.size(); ++i) {
        EXPECT_NEAR(out[i], expected[i], 1e-5 * (1.0 + std::abs(expected[i]))) << "index " << i;
      }
    }
  }
}

TEST(PoolInput, PassesTheQuantizationConfigThrough) {
  std::mt19937_64 rng(5);
  const SectionData d = random_section(rng, 4, 3, false, 6);
  std::vector<int64_t> buffer =
      aligned_buffer(request_section_bytes(d.num_bags(), d.num_ids(), false));
  const RequestSection s =
      start_request_section(bytes_of(buffer), d.num_bags(), d.num_ids(), false);
  fill(s, d);
  // Rows far outside [lower, upper]: quantized, every value is clipped to upper.
  const std::vector<float> rows(6 * 2, 5.0f);
  const QuantizationConfig quantization{.num_buckets = 4, .lower = -1.0f, .upper = 1.0f};
  const PoolInput input = pool_input(s, rows.data(), 2, &quantization);
  EXPECT_EQ(input.quantization, &quantization);
  std::vector<float> out(static_cast<size_t>(d.num_bags() * 2));
  pool_bags(input, 0, d.num_bags(), out.data());
  for (size_t b = 0; b < d.bags.size(); ++b) {
    const double expected =
        static_cast<double>(d.offsets[b + 1] - d.offsets[b]) * 1.0 * double{d.scales[b]};
    for (size_t c = 0; c < 2; ++c) {
      EXPECT_NEAR(out[b * 2 + c], expected, 1e-5 * (1.0 + std::abs(expected))) << "bag " << b;
    }
  }
}

TEST(LocalView, BorrowsEveryBagOfTheFeatureWithItsIdsUnchanged) {
  CsrFeature csr{.activation_shape = {3, 2},
                 .offsets = {0, 2, 2, 3},
                 .ids = {4, 1, 7},
                 .weights = {0.5f, 2.0f, 3.0f},
                 .bag_scales = {1.0f, 0.25f, 0.5f}};
  const RequestSection view = local_view(csr);
  EXPECT_EQ(view.num_bags, 3);
  EXPECT_EQ(view.num_ids, 3);
  EXPECT_EQ(view.bags, nullptr);
  EXPECT_EQ(view.offsets, csr.offsets.data());
  EXPECT_EQ(view.ids, csr.ids.data());
  EXPECT_EQ(view.weights, csr.weights.data());
  EXPECT_EQ(view.scales, csr.bag_scales.data());
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(view.bag(i), i);
  EXPECT_EQ(view.gain(2, 2), 1.5f);
  csr.weights.clear();
  EXPECT_EQ(local_view(csr).weights, nullptr);
  EXPECT_EQ(local_view(csr).gain(0, 1), 1.0f);
}

TEST(Message, ResizeKeepsTheCountsAndOffsetSumsThePartsBefore) {
  Message message;
  message.resize({16, 0, 40});
  EXPECT_EQ(message.bytes.size(), 56u);
  EXPECT_EQ(message.offset(0), 0u);
  EXPECT_EQ(message.offset(1), 16u);
  EXPECT_EQ(message.offset(2), 16u);
  EXPECT_EQ(message.offset(3), 56u);
}

TEST(Exchange, DeliversEachRanksPartAndSkipsNothingToSendAlone) {
  // Two ranks in one process: rank q receives part q of each rank's message, in rank order.
  const std::vector<std::shared_ptr<Communicator>> communicators = in_process_communicators(2);
  std::vector<Message> received(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      Exchange exchange(communicators[static_cast<size_t>(rank)]);
      Message send;
      send.resize({8, 16});
      for (size_t i = 0; i < send.bytes.size(); ++i) {
        send.bytes[i] = static_cast<std::byte>(100 * rank + static_cast<int>(i));
      }
      exchange.all_to_all(send, received[static_cast<size_t>(rank)]);
    });
  }
  for (std::thread& rank : ranks) rank.join();
  EXPECT_EQ(received[0].counts, (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(received[1].counts, (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(received[0].bytes[8], static_cast<std::byte>(100));  // rank 1's byte 0
  EXPECT_EQ(received[1].bytes[0], static_cast<std::byte>(8));    // rank 0's byte 8
  EXPECT_EQ(received[1].bytes[16], static_cast<std::byte>(108));

  // Alone with nothing to send: an empty message, whatever was there before.
  Exchange alone(local_communicator());
  Message empty;
  empty.resize({0});
  Message stale;
  stale.resize({24});
  alone.all_to_all(empty, stale);
  EXPECT_EQ(stale.counts, (std::vector<int64_t>{0}));
  EXPECT_TRUE(stale.bytes.empty());
  Message send;
  send.resize({8});
  send.bytes[3] = std::byte{42};
  alone.all_to_all(send, stale);
  EXPECT_EQ(stale.counts, (std::vector<int64_t>{8}));
  EXPECT_EQ(stale.bytes[3], std::byte{42});
}

}  // namespace
}  // namespace recemb::internal
