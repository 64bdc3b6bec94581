#include "dlrm/criteo_reader.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <random>
#include <string>
#include <sys/stat.h>
#include <vector>
#include <zlib.h>

#include "recemb/error.h"
#include "recemb/string_key.h"

#include "dlrm/criteo_profile.h"
#include "testing/temporary_directory.h"

namespace recemb::dlrm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// --- References, written independently of the reader ---------------------------------------

// SplitMix64's output function, step by step as in Vigna's splitmix64.c.
uint64_t reference_mix(uint64_t x) {
  uint64_t z = x;
  z ^= z >> 30;
  z *= 0xbf58476d1ce4e5b9ULL;
  z ^= z >> 27;
  z *= 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return z;
}

int64_t reference_id(int feature, uint64_t value, int64_t vocabulary_size) {
  if (vocabulary_size == 1) return 0;
  uint64_t salt_input = 0;
  for (int k = 0; k <= feature; ++k) salt_input += 0x9e3779b97f4a7c15ULL;  // (f + 1) * gamma
  const uint64_t hashed = reference_mix(value ^ reference_mix(salt_input));
  return 1 + static_cast<int64_t>(hashed % static_cast<uint64_t>(vocabulary_size - 1));
}

float reference_dense(int64_t x) {
  const long double clamped = x < 0 ? 0.0L : static_cast<long double>(x);
  return static_cast<float>(std::log1p(clamped));
}

// --- Files ----------------------------------------------------------------------------------

// Files in a fresh directory, removed with it.
class TempFiles {
 public:
  std::string write(const std::string& name, const std::string& contents) const {
    const std::string file = path(name);
    std::ofstream(file, std::ios::binary) << contents;
    return file;
  }
  std::string path(const std::string& name) const { return (directory_.path() / name).string(); }

 private:
  test::TemporaryDirectory directory_;
};

std::vector<int64_t> test_vocabulary() {
  // Small and large tables, a table of one row and one of two.
  std::vector<int64_t> sizes = preset_vocabulary_sizes("small");
  sizes[8] = 1;
  sizes[19] = 2;
  return sizes;
}

struct Example {
  float label = 0.0f;
  std::array<float, kNumDenseFeatures> dense{};
  std::array<int64_t, kNumCategoricalFeatures> ids{};
  bool operator==(const Example&) const = default;
};

std::ostream& operator<<(std::ostream& out, const Example& e) {
  out << "label " << e.label << " dense";
  for (const float d : e.dense) out << " " << d;
  out << " ids";
  for (const int64_t id : e.ids) out << " " << id;
  return out;
}

std::vector<Example> unpack(const ExampleBatch& batch) {
  std::vector<Example> examples(static_cast<size_t>(batch.size));
  for (int64_t i = 0; i < batch.size; ++i) {
    Example& e = examples[static_cast<size_t>(i)];
    e.label = batch.labels[static_cast<size_t>(i)];
    for (int j = 0; j < kNumDenseFeatures; ++j) {
      e.dense[static_cast<size_t>(j)] = batch.dense[static_cast<size_t>(i * kNumDenseFeatures + j)];
    }
    for (int f = 0; f < kNumCategoricalFeatures; ++f) {
      e.ids[static_cast<size_t>(f)] = batch.categorical_ids(f)[static_cast<size_t>(i)];
    }
  }
  return examples;
}

// Everything the source yields from where it stands, max_examples at a time.
std::vector<Example> read_all(ExampleSource& source, int64_t max_examples) {
  std::vector<Example> all;
  ExampleBatch batch;
  while (source.next(batch, max_examples) > 0) {
    EXPECT_LE(batch.size, max_examples);
    const std::vector<Example> examples = unpack(batch);
    all.insert(all.end(), examples.begin(), examples.end());
  }
  EXPECT_EQ(batch.size, 0);
  return all;
}

// Reads `stops` batches of `batch_size` from a reader of `paths`, seeks `resumed` (a fresh reader
// of the same files) to its position, and expects it to read the rest as the first does; returns
// the position.
std::string expect_exact_resume(const std::vector<std::string>& paths, const ReaderOptions& options,
                                int stops, int64_t batch_size, CriteoReader& resumed) {
  CriteoReader first(paths, options);
  ExampleBatch batch;
  for (int k = 0; k < stops; ++k) first.next(batch, batch_size);
  const std::string position = first.position();
  const std::vector<Example> rest = read_all(first, batch_size);
  resumed.seek(position);
  EXPECT_EQ(resumed.position(), position);
  EXPECT_EQ(read_all(resumed, batch_size), rest);
  return position;
}

// A random valid line and the example it must give: empty fields, negative, zero-padded and
// extreme integers, 1 to 16 hexadecimal digits of mixed case.
std::string random_line(std::mt19937_64& random, const std::vector<int64_t>& vocabulary,
                        Example& expected) {
  std::uniform_int_distribution<int> percent(0, 99);
  const bool click = percent(random) < 25;
  std::string line = click ? "1" : "0";
  expected.label = click ? 1.0f : 0.0f;
  for (int j = 0; j < kNumDenseFeatures; ++j) {
    line += '\t';
    int64_t x = 0;
    const int kind = percent(random);
    if (kind < 20) {
      // empty: 0
    } else if (kind < 30) {
      x = -1 - percent(random) % 2;
      line += std::to_string(x);
    } else if (kind < 35) {
      x = std::uniform_int_distribution<int64_t>(std::numeric_limits<int64_t>::min(), -3)(random);
      line += std::to_string(x);
    } else if (kind < 40) {
      x = std::uniform_int_distribution<int64_t>(0, std::numeric_limits<int64_t>::max())(random);
      line += std::to_string(x);
    } else if (kind < 45) {
      x = percent(random);
      line += "000" + std::to_string(x);
    } else {
      x = std::uniform_int_distribution<int64_t>(0, 5000)(random);
      line += std::to_string(x);
    }
    expected.dense[static_cast<size_t>(j)] = reference_dense(x);
  }
  for (int f = 0; f < kNumCategoricalFeatures; ++f) {
    line += '\t';
    if (percent(random) < 15) {
      expected.ids[static_cast<size_t>(f)] = 0;
      continue;
    }
    const int digits = percent(random) < 70 ? 8 : 1 + percent(random) % 16;
    uint64_t value = 0;
    for (int d = 0; d < digits; ++d) {
      const int digit = percent(random) % 16;
      value = value * 16 + static_cast<uint64_t>(digit);
      line += (percent(random) < 50 ? "0123456789abcdef" : "0123456789ABCDEF")[digit];
    }
    expected.ids[static_cast<size_t>(f)] =
        reference_id(f, value, vocabulary[static_cast<size_t>(f)]);
  }
  return line;
}

std::string valid_line(const std::string& label = "1") {
  std::string line = label;
  for (int j = 0; j < kNumDenseFeatures; ++j) line += "\t" + std::to_string(j);
  for (int f = 0; f < kNumCategoricalFeatures; ++f) line += "\t68fd1e64";
  return line;
}

// valid_line() with field `field` (0 = label, 1..13 = I1..I13, 14..39 = C1..C26) replaced.
std::string line_with(int field, const std::string& text) {
  std::string line;
  for (int k = 0; k < 40; ++k) {
    if (k > 0) line += '\t';
    line += k == field ? text : k == 0 ? "1" : k <= 13 ? std::to_string(k - 1) : "68fd1e64";
  }
  return line;
}

// --- Tests ----------------------------------------------------------------------------------

// Hashed ids are part of the data format: these values are fixed forever (computed once, with a
// separate Python implementation), on every platform.
TEST(CategoricalIdTest, GoldenValues) {
  struct Golden {
    int feature;
    uint64_t value;
    int64_t vocabulary_size;
    int64_t id;
  };
  constexpr std::array<Golden, 9> kGolden = {{
      {0, 0x68fd1e64, 1460, 1197},
      {2, 0x80e26c9b, 129719, 33209},
      {8, 0xa73ee510, 3, 2},
      {19, 0x5bb5ffa8, 4, 1},
      {20, 0xffffffffffffffff, 7046547, 2099965},
      {25, 0, 142572, 103904},
      {13, 1, 2, 1},
      {5, 1, 1, 0},
      {11, 0xdeadbeef, 40000000, 14254123},
  }};
  static_assert(categorical_id(0, 0x68fd1e64, 1460) == 1197);  // usable at compile time
  for (const Golden& g : kGolden) {
    EXPECT_EQ(categorical_id(g.feature, g.value, g.vocabulary_size), g.id)
        << "C" << g.feature + 1 << " value " << g.value;
    EXPECT_EQ(reference_id(g.feature, g.value, g.vocabulary_size), g.id);
  }
  // SplitMix64 seeded with 0: the published first output.
  EXPECT_EQ(SplitMix64(0).next(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(reference_mix(kGoldenGamma), 0xe220a8397b1dcdafULL);
}

TEST(CategoricalIdTest, MatchesTheReferenceAndNeverUsesTheMissingRow) {
  const uint64_t seed = 11;
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 random(seed);
  for (int trial = 0; trial < 20000; ++trial) {
    const int feature = static_cast<int>(random() % kNumCategoricalFeatures);
    const uint64_t value = random() >> (random() % 64);
    const int64_t size = 1 + static_cast<int64_t>(random() % (trial % 2 == 0 ? 5 : 50'000'000));
    const int64_t id = categorical_id(feature, value, size);
    ASSERT_EQ(id, reference_id(feature, value, size));
    ASSERT_LT(id, size);
    ASSERT_GE(id, size == 1 ? 0 : 1);
  }
}

TEST(CriteoReaderTest, ReadsRandomValidLinesInAnyBatchSize) {
  const uint64_t seed = 42;
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 random(seed);
  const std::vector<int64_t> vocabulary = test_vocabulary();
  TempFiles files;
  std::vector<Example> expected;
  std::vector<std::string> paths;
  // Two files of several buffers each (lines straddle buffer boundaries), CRLF in part, the last
  // line of the second file without a newline.
  for (const int lines : {4000, 2500}) {
    std::string contents;
    for (int i = 0; i < lines; ++i) {
      Example example;
      contents += random_line(random, vocabulary, example);
      expected.push_back(example);
      const bool last = i + 1 == lines && paths.size() == 1;
      if (!last) contents += random() % 4 == 0 ? "\r\n" : "\n";
    }
    paths.push_back(files.write("part" + std::to_string(paths.size()), contents));
  }
  ASSERT_GT(std::filesystem::file_size(paths[0]), 1u << 20);
  for (const int64_t max_examples : {1, 7, 1000, 4000, 10000}) {
    SCOPED_TRACE(::testing::Message() << "max_examples " << max_examples);
    CriteoReader reader(paths, {.vocabulary_sizes = vocabulary});
    const std::vector<Example> examples = read_all(reader, max_examples);
    ASSERT_EQ(examples.size(), expected.size());
    for (size_t i = 0; i < examples.size(); ++i) {
      // dense: float(log1p) of the count; the long double reference may differ by rounding
      for (int j = 0; j < kNumDenseFeatures; ++j) {
        ASSERT_FLOAT_EQ(examples[i].dense[static_cast<size_t>(j)],
                        expected[i].dense[static_cast<size_t>(j)])
            << "example " << i << " I" << j + 1;
      }
      ASSERT_EQ(examples[i].label, expected[i].label) << "example " << i;
      ASSERT_EQ(examples[i].ids, expected[i].ids) << "example " << i;
    }
    EXPECT_EQ(reader.malformed_lines(), 0);
    EXPECT_EQ(reader.position(), "criteo:2:0:0");
  }
}

TEST(CriteoReaderTest, EmptyFieldsAndEdgeValues) {
  std::vector<int64_t> vocabulary(kNumCategoricalFeatures, 1000);
  std::string all_empty = "0" + std::string(39, '\t');
  std::string extremes = "1\t9223372036854775807\t-9223372036854775808\t-1\t-2\t0\t-0\t007";
  for (int j = 7; j < kNumDenseFeatures; ++j) extremes += "\t";
  const std::vector<std::string> hex = {"ffffffffffffffff", "FFFFFFFFFFFFFFFF", "0",
                                        "0000000000000000", "0000000000000001", "1",
                                        "AbCdEf12",         "abcdef12"};
  for (int f = 0; f < kNumCategoricalFeatures; ++f) {
    extremes += "\t" + (f < static_cast<int>(hex.size()) ? hex[static_cast<size_t>(f)] : "");
  }
  TempFiles files;
  CriteoReader reader({files.write("edge", all_empty + "\n" + extremes + "\n")},
                      {.vocabulary_sizes = vocabulary});
  ExampleBatch batch;
  ASSERT_EQ(reader.next(batch, 10), 2);
  const std::vector<Example> examples = unpack(batch);
  EXPECT_EQ(examples[0], Example{});  // label 0, every value 0, every id the missing row 0
  EXPECT_EQ(examples[1].label, 1.0f);
  EXPECT_FLOAT_EQ(examples[1].dense[0], reference_dense(std::numeric_limits<int64_t>::max()));
  for (int j = 1; j < kNumDenseFeatures; ++j) {
    const float expected = j == 6 ? reference_dense(7) : 0.0f;  // "007"; negatives clamp to 0
    EXPECT_EQ(examples[1].dense[static_cast<size_t>(j)], expected) << "I" << j + 1;
  }
  const auto& ids = examples[1].ids;
  EXPECT_EQ(ids[0], reference_id(0, ~uint64_t{0}, 1000));
  EXPECT_EQ(ids[1], reference_id(1, ~uint64_t{0}, 1000));  // either case
  EXPECT_EQ(ids[2], reference_id(2, 0, 1000));
  EXPECT_EQ(ids[3], reference_id(3, 0, 1000));
  EXPECT_EQ(ids[4], reference_id(4, 1, 1000));
  EXPECT_EQ(ids[5], reference_id(5, 1, 1000));
  EXPECT_EQ(ids[6], reference_id(6, 0xabcdef12, 1000));
  EXPECT_EQ(ids[7], reference_id(7, 0xabcdef12, 1000));
  EXPECT_NE(ids[2], 0);  // the value 0 is not "missing"
  for (int f = 8; f < kNumCategoricalFeatures; ++f) EXPECT_EQ(ids[static_cast<size_t>(f)], 0);
  EXPECT_EQ(reader.malformed_lines(), 0);
}

TEST(CriteoReaderTest, MalformedLinesAreSkippedCountedAndReportedWithLineNumbers) {
  const std::vector<std::pair<std::string, std::string>> lines = {
      {valid_line("0"), ""},
      {valid_line() + "\t1", "expected 40 tab-separated fields, found 41"},
      {line_with(0, "0").substr(0, line_with(0, "0").size() - 9), ""},  // short: C26 empty
      {"", "empty line"},
      {valid_line("1"), ""},
      {line_with(0, "2"), "label '2' is not 0 or 1"},
      {line_with(0, ""), "label '' is not 0 or 1"},
      {line_with(0, "01"), "label '01' is not 0 or 1"},
      {line_with(1, "abc"), "I1 'abc' is not a decimal integer in int64 range"},
      {line_with(5, "1.5"), "I5 '1.5' is not a decimal integer in int64 range"},
      {line_with(13, "9223372036854775808"),
       "I13 '9223372036854775808' is not a decimal integer in int64 range"},
      {line_with(2, "+3"), "I2 '+3' is not a decimal integer in int64 range"},
      {line_with(3, " 3"), "I3 ' 3' is not a decimal integer in int64 range"},
      {line_with(4, "-"), "I4 '-' is not a decimal integer in int64 range"},
      {valid_line("0"), ""},
      {line_with(14, "xyz"), "C1 'xyz' is not 1 to 16 hexadecimal digits"},
      {line_with(16, "00000000000000001"), "C3 '00000000000000001' is not 1 to 16 hexadecimal"},
      {line_with(39, "-1a"), "C26 '-1a' is not 1 to 16 hexadecimal digits"},
      {line_with(17, "0x1f"), "C4 '0x1f' is not 1 to 16 hexadecimal digits"},
      {line_with(15, "ab\x01"), "C2 'ab?' is not 1 to 16 hexadecimal digits"},
      {valid_line("1") + std::string(5000, 'x'), "line longer than 4096 bytes"},
      {line_with(1, std::string(40, '9')),
       "I1 '99999999999999999999999999999999...' is not a decimal integer"},
      {valid_line("1"), ""},
  };
  std::string contents;
  for (const auto& [line, reason] : lines) contents += line + "\n";
  TempFiles files;
  const std::string path = files.write("mixed.tsv", contents);
  CriteoReader reader({path}, {.vocabulary_sizes = test_vocabulary(), .max_malformed = 100});
  ExampleBatch batch;
  ASSERT_EQ(reader.next(batch, 100), 5);
  EXPECT_THAT(batch.labels, ElementsAre(0.0f, 0.0f, 1.0f, 0.0f, 1.0f));
  EXPECT_EQ(reader.short_lines(), 1);
  std::vector<std::string> expected_messages;
  int64_t malformed = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].second.empty()) continue;
    ++malformed;
    if (expected_messages.size() < kMaxMalformedMessages) {
      expected_messages.push_back(path + ":" + std::to_string(i + 1) + ": " + lines[i].second);
    }
  }
  EXPECT_EQ(reader.malformed_lines(), malformed);
  const std::span<const std::string> messages = reader.malformed_messages();
  ASSERT_EQ(messages.size(), kMaxMalformedMessages);
  for (size_t i = 0; i < messages.size(); ++i) {
    EXPECT_THAT(messages[i], ::testing::StartsWith(expected_messages[i])) << i;
  }
  // The messages after the first ten are counted, not kept; check the late reasons directly.
  CriteoReader late({path}, {.vocabulary_sizes = test_vocabulary()});
  late.seek("criteo:0:" + std::to_string(contents.find(lines[15].first + "\n")) + ":15");
  late.next(batch, 100);
  const std::span<const std::string> late_messages = late.malformed_messages();
  size_t k = 0;
  for (size_t i = 15; i < lines.size(); ++i) {
    if (lines[i].second.empty()) continue;
    ASSERT_LT(k, late_messages.size());
    EXPECT_THAT(late_messages[k++],
                ::testing::StartsWith(path + ":" + std::to_string(i + 1) + ": " + lines[i].second));
  }
  EXPECT_EQ(k, late_messages.size());
}

// Malformed lines are counted once each, however many epochs read them, and readers sharing a
// MalformedLines count against one max_malformed; a call that throws forgets what it noted.
TEST(CriteoReaderTest, MaxMalformedCountsEachLineOnceAcrossEpochsAndReaders) {
  const std::string contents = valid_line("0") + "\n" + line_with(0, "x") + "\n" + valid_line("1") +
                               "\n\n" + valid_line("1") + "\n";
  TempFiles files;
  const std::string path = files.write("epochs.tsv", contents);
  ExampleBatch batch;
  CriteoReader epochs({path},
                      {.vocabulary_sizes = test_vocabulary(), .max_malformed = 2, .epochs = 5});
  EXPECT_EQ(epochs.next(batch, 100), 15);
  EXPECT_EQ(epochs.malformed_lines(), 2);
  EXPECT_THAT(
      epochs.malformed_messages(),
      ::testing::ElementsAre(path + ":2: label 'x' is not 0 or 1", path + ":4: empty line"));

  const auto shared = std::make_shared<MalformedLines>();
  const ReaderOptions options{
      .vocabulary_sizes = test_vocabulary(), .max_malformed = 3, .malformed = shared};
  CriteoReader first({path}, options);
  EXPECT_EQ(first.next(batch, 100), 3);
  const std::string other = files.write("other.tsv", contents);
  CriteoReader second({other}, options);
  EXPECT_EQ(second.next(batch, 2), 2);  // past other.tsv:2, the third
  EXPECT_EQ(shared->count(), 3);
  try {
    second.next(batch, 100);
    FAIL() << "no exception";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), HasSubstr("4 malformed lines, more than max_malformed = 3"));
  }
  EXPECT_EQ(shared->count(), 3);
  EXPECT_EQ(first.malformed_lines(), 3);
  EXPECT_EQ(shared->messages().back(), other + ":2: label 'x' is not 0 or 1");
}

TEST(CriteoReaderTest, MaxMalformedExceededThrowsAndChangesNothing) {
  const std::string contents = valid_line("0") + "\n" + line_with(0, "x") + "\n" + valid_line("1") +
                               "\n" + line_with(20, "q") + "\n" + "\n" + valid_line("1") + "\n";
  TempFiles files;
  const std::string path = files.write("bad.tsv", contents);
  const ReaderOptions options{.vocabulary_sizes = test_vocabulary(), .max_malformed = 2};
  CriteoReader reader({path}, options);
  ExampleBatch batch;
  ASSERT_EQ(reader.next(batch, 1), 1);
  const std::string position = reader.position();
  EXPECT_EQ(position, "criteo:0:" + std::to_string(valid_line().size() + 1) + ":1");
  try {
    reader.next(batch, 10);
    FAIL() << "no exception";
  } catch (const InvalidArgument& error) {
    const std::string message = error.what();
    EXPECT_THAT(message,
                HasSubstr("'" + path + "': 3 malformed lines, more than max_malformed = 2"));
    EXPECT_THAT(message, HasSubstr(path + ":2: label 'x' is not 0 or 1"));
    EXPECT_THAT(message, HasSubstr(path + ":4: C7 'q' is not 1 to 16 hexadecimal digits"));
    EXPECT_THAT(message, HasSubstr(path + ":5: empty line"));
  }
  // As before the call: position, counts, messages; the batch empty.
  EXPECT_EQ(reader.position(), position);
  EXPECT_EQ(reader.malformed_lines(), 0);
  EXPECT_TRUE(reader.malformed_messages().empty());
  EXPECT_EQ(batch.size, 0);
  EXPECT_TRUE(batch.labels.empty());
  // The same call fails the same way again (the state really is unchanged).
  EXPECT_THROW(reader.next(batch, 10), InvalidArgument);
  // Two malformed lines are tolerated: everything valid is read.
  CriteoReader tolerant({path}, {.vocabulary_sizes = test_vocabulary(), .max_malformed = 3});
  EXPECT_EQ(read_all(tolerant, 10).size(), 3u);
  EXPECT_EQ(tolerant.malformed_lines(), 3);
  // max_malformed = 0: the first malformed line fails, after the valid one before it.
  CriteoReader strict({path}, {.vocabulary_sizes = test_vocabulary(), .max_malformed = 0});
  EXPECT_EQ(strict.next(batch, 1), 1);
  EXPECT_THROW(strict.next(batch, 1), InvalidArgument);
}

TEST(CriteoReaderTest, LastLineWithoutNewlineAndCarriageReturns) {
  TempFiles files;
  const std::string contents = valid_line("0") + "\r\n" + valid_line("1");
  const std::string path = files.write("crlf", contents);
  CriteoReader reader({path}, {.vocabulary_sizes = test_vocabulary()});
  ExampleBatch batch;
  ASSERT_EQ(reader.next(batch, 2), 2);
  EXPECT_THAT(batch.labels, ElementsAre(0.0f, 1.0f));
  // A '\r' is not part of the last field: the ids of both lines agree.
  EXPECT_EQ(unpack(batch)[0].ids, unpack(batch)[1].ids);
  EXPECT_EQ(reader.position(), "criteo:0:" + std::to_string(contents.size()) + ":2");
  EXPECT_EQ(reader.next(batch, 5), 0);
  EXPECT_EQ(reader.position(), "criteo:1:0:0");
  EXPECT_EQ(reader.next(batch, 5), 0);  // stays exhausted
}

TEST(CriteoReaderTest, EmptyFilesAndALineLargerThanTheBuffer) {
  TempFiles files;
  const std::string huge(3 << 20, '7');  // no newline for 3 MiB
  const std::vector<std::string> paths = {
      files.write("empty0", ""),
      files.write("huge", valid_line("0") + "\n" + huge + "\n" + valid_line("1") + "\n" + huge),
      files.write("empty1", ""),
      files.write("one", valid_line("1")),
  };
  CriteoReader reader(paths, {.vocabulary_sizes = test_vocabulary()});
  ExampleBatch batch;
  ASSERT_EQ(reader.next(batch, 10), 3);
  EXPECT_THAT(batch.labels, ElementsAre(0.0f, 1.0f, 1.0f));
  EXPECT_EQ(reader.malformed_lines(), 2);
  EXPECT_THAT(reader.malformed_messages(),
              ElementsAre(paths[1] + ":2: line longer than 4096 bytes",
                          paths[1] + ":4: line longer than 4096 bytes"));
  EXPECT_EQ(reader.position(), "criteo:4:0:0");
}

TEST(CriteoReaderTest, PositionAndSeekResumeExactly) {
  const uint64_t seed = 5;
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 random(seed);
  const std::vector<int64_t> vocabulary = test_vocabulary();
  TempFiles files;
  std::vector<std::string> paths;
  for (int file = 0; file < 3; ++file) {
    std::string contents;
    for (int i = 0; i < 300; ++i) {
      Example unused;
      // One malformed line in 50, so that resumed line numbers are checked too.
      contents +=
          (i % 50 == 49 ? line_with(0, "?") : random_line(random, vocabulary, unused)) + "\n";
    }
    paths.push_back(files.write("day_" + std::to_string(file), contents));
  }
  const ReaderOptions options{.vocabulary_sizes = vocabulary};
  // Stop after k batches of 130 (inside file 0, across the file boundary, at the very end).
  for (const int stops : {0, 1, 2, 3, 7, 8}) {
    SCOPED_TRACE(::testing::Message() << "stopped after " << stops << " batches");
    CriteoReader resumed(paths, options);
    const std::string position = expect_exact_resume(paths, options, stops, 130, resumed);
    // The malformed lines after the position, with their line numbers in their files.
    size_t file_index = 0;
    int64_t line_number = 0;
    ASSERT_EQ(std::sscanf(position.c_str(), "criteo:%zu:%*d:%ld", &file_index, &line_number), 2);
    std::vector<std::string> expected;
    for (size_t file = file_index; file < paths.size(); ++file) {
      for (int64_t line = 50; line <= 300; line += 50) {
        if ((file > file_index || line > line_number) && expected.size() < kMaxMalformedMessages) {
          expected.push_back(paths[file] + ":" + std::to_string(line) +
                             ": label '?' is not 0 or 1");
        }
      }
    }
    EXPECT_THAT(resumed.malformed_messages(), ::testing::ElementsAreArray(expected));
  }
}

TEST(CriteoReaderTest, SeekRejectsPositionsThatDoNotFitAndChangesNothing) {
  TempFiles files;
  const std::string line = valid_line("1");
  const std::vector<std::string> paths = {files.write("a", line + "\n" + line + "\n"),
                                          files.write("b", line + "\n")};
  CriteoReader reader(paths, {.vocabulary_sizes = test_vocabulary()});
  ExampleBatch batch;
  ASSERT_EQ(reader.next(batch, 1), 1);
  const std::string position = reader.position();
  const std::string line_start = std::to_string(line.size() + 1);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"", "malformed position"},
      {"criteo:", "malformed position"},
      {"criteo:0:0", "malformed position"},
      {"criteo:0:0:0:0", "malformed position"},
      {"criteo:0:-1:0", "malformed position"},
      {"criteo:a:0:0", "malformed position"},
      {"criteo:0::0", "malformed position"},
      {"synthetic:5", "malformed position"},
      {"criteo:3:0:0", "does not fit a reader of 2 files"},
      {"criteo:2:5:1", "does not fit a reader of 2 files"},
      {"criteo:0:0:4", "does not fit"},
      {"criteo:0:" + line_start + ":0", "does not fit"},
      {"criteo:0:5:1", "is not the start of a line of '" + paths[0] + "'"},
      {"criteo:1:99999:1", "is not the start of a line of '" + paths[1] + "'"},
  };
  for (const auto& [text, message] : bad) {
    try {
      reader.seek(text);
      FAIL() << "no exception for '" << text << "'";
    } catch (const InvalidArgument& error) {
      EXPECT_THAT(error.what(), HasSubstr("'" + text + "'"));
      EXPECT_THAT(error.what(), HasSubstr(message));
    }
    EXPECT_EQ(reader.position(), position);
  }
  EXPECT_EQ(read_all(reader, 10).size(), 2u);  // the reader reads on from where it was
  // Valid ends: the end of a file, and past the last file.
  reader.seek("criteo:0:" + std::to_string(2 * (line.size() + 1)) + ":2");
  EXPECT_EQ(read_all(reader, 10).size(), 1u);
  reader.seek("criteo:2:0:0");
  EXPECT_EQ(read_all(reader, 10).size(), 0u);
}

TEST(CriteoReaderTest, ConstructorValidates) {
  TempFiles files;
  const std::string good = files.write("good", valid_line() + "\n");
  const auto expect_error = [](const std::vector<std::string>& paths, ReaderOptions options,
                               const std::string& message) {
    try {
      CriteoReader reader(paths, std::move(options));
      FAIL() << "no exception, expected: " << message;
    } catch (const InvalidArgument& error) {
      EXPECT_THAT(error.what(), HasSubstr(message));
    }
  };
  const std::vector<int64_t> vocabulary = test_vocabulary();
  expect_error({good, files.path("missing")}, {.vocabulary_sizes = vocabulary},
               "cannot open '" + files.path("missing") + "': No such file or directory");
  std::filesystem::create_directories(files.path("directory"));
  expect_error({files.path("directory")}, {.vocabulary_sizes = vocabulary},
               "'" + files.path("directory") + "' is not a regular file");
  // A FIFO is refused at once, without waiting for a writer.
  ASSERT_EQ(::mkfifo(files.path("fifo").c_str(), 0600), 0);
  expect_error({files.path("fifo")}, {.vocabulary_sizes = vocabulary},
               "'" + files.path("fifo") + "' is not a regular file");
  expect_error({}, {.vocabulary_sizes = vocabulary}, "no input files");
  expect_error({good}, {}, "CriteoReader: vocabulary_sizes has 0 sizes, expected 26");
  expect_error({good}, {.vocabulary_sizes = vocabulary, .max_malformed = -1},
               "max_malformed is -1, must be >= 0");
  CriteoReader reader({good}, {.vocabulary_sizes = vocabulary});
  ExampleBatch batch;
  EXPECT_THROW(reader.next(batch, 0), InvalidArgument);
  EXPECT_EQ(reader.position(), "criteo:0:0:0");
}

// CategoricalIds::kRawKeys (dynamic tables): a field of hexadecimal digits is its value as an
// int64, anything else (the empty field too) its string_key: every field is valid, no value
// collides.
TEST(CriteoReaderTest, RawKeysAreTheValuesThemselves) {
  EXPECT_EQ(categorical_key("68fd1e64"), 0x68fd1e64);
  EXPECT_EQ(categorical_key("0000000A"), 10);
  EXPECT_EQ(categorical_key("0"), 0);
  EXPECT_EQ(categorical_key("7fffffffffffffff"), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(categorical_key("8000000000000000"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(categorical_key("ffffffffffffffff"), -1);
  // string_key("") is XXH3-64 of no bytes (include/recemb/string_key.h).
  EXPECT_EQ(categorical_key(""), static_cast<int64_t>(0x2D06800538D394C2ULL));
  EXPECT_EQ(categorical_key("xyz"), string_key("xyz"));
  EXPECT_EQ(categorical_key("0x1f"), string_key("0x1f"));
  EXPECT_EQ(categorical_key("10000000000000000"), string_key("10000000000000000"));  // 17 digits

  TempFiles files;
  const std::string path = files.write(
      "raw_keys.tsv", line_with(14, "xyz") + "\n" + line_with(15, "") + "\n" + line_with(0, "2") +
                          "\n" + line_with(39, "ffffffffffffffff") + "\n");
  CriteoReader raw({path}, {.ids = CategoricalIds::kRawKeys});
  ExampleBatch batch;
  ASSERT_EQ(raw.next(batch, 10), 3);
  EXPECT_EQ(raw.malformed_lines(), 1);  // the label '2': the other rules stand
  const std::vector<Example> examples = unpack(batch);
  for (int f = 0; f < kNumCategoricalFeatures; ++f) {
    const auto k = static_cast<size_t>(f);
    EXPECT_EQ(examples[0].ids[k], f == 0 ? string_key("xyz") : 0x68fd1e64) << "C" << f + 1;
    EXPECT_EQ(examples[1].ids[k], f == 1 ? string_key("") : 0x68fd1e64) << "C" << f + 1;
    EXPECT_EQ(examples[2].ids[k], f == 25 ? -1 : 0x68fd1e64) << "C" << f + 1;
  }
  // The same file hashed: 'xyz' is malformed there.
  CriteoReader hashed({path}, {.vocabulary_sizes = test_vocabulary()});
  ASSERT_EQ(hashed.next(batch, 10), 2);
  EXPECT_EQ(hashed.malformed_lines(), 2);
  EXPECT_EQ(unpack(batch)[0].ids[1], kMissingCategoricalId);
}

// parse_criteo_line is the reader's parsing of one line: with the label field, and without it
// (39 fields) for lines to predict, each giving the reference example; malformed lines the
// reader's messages, counted in the layout they were given in.
TEST(ParseCriteoLineTest, ParsesLinesWithAndWithoutTheLabelAsTheReaderDoes) {
  std::mt19937_64 random(7);
  const std::vector<int64_t> vocabulary = test_vocabulary();
  for (int i = 0; i < 500; ++i) {
    Example expected;
    const std::string line = random_line(random, vocabulary, expected);
    for (const CriteoLabel label_field : {CriteoLabel::kPresent, CriteoLabel::kAbsent}) {
      const std::string_view text = label_field == CriteoLabel::kPresent
                                        ? std::string_view(line)
                                        : std::string_view(line).substr(2);  // "0\t" or "1\t"
      Example parsed;
      parsed.label = label_field == CriteoLabel::kPresent ? -1.0f : expected.label;
      ASSERT_EQ(parse_criteo_line(text, label_field, CategoricalIds::kHashedRows, vocabulary,
                                  parsed.label, parsed.dense, parsed.ids.data(), 1),
                std::nullopt)
          << line;
      EXPECT_EQ(parsed, expected) << line;
    }
  }
  const std::string good = valid_line();
  Example parsed;
  const auto error = [&](std::string_view text, CriteoLabel label_field) {
    return parse_criteo_line(text, label_field, CategoricalIds::kHashedRows, vocabulary,
                             parsed.label, parsed.dense, parsed.ids.data(), 1)
        .value_or("");
  };
  // As the keys of dynamic tables: a field that is no hexadecimal number is a string key.
  ASSERT_EQ(parse_criteo_line(line_with(14, "xyz"), CriteoLabel::kPresent, CategoricalIds::kRawKeys,
                              {}, parsed.label, parsed.dense, parsed.ids.data(), 1),
            std::nullopt);
  EXPECT_EQ(parsed.ids[0], string_key("xyz"));
  EXPECT_EQ(parsed.ids[1], 0x68fd1e64);
  // 39 fields: by the field count, ambiguous; read as labelled, a short line (its fields shifted,
  // so that C1 lands in I13); a labelled line that lost its empty C26 reads as the reader reads it.
  EXPECT_THAT(error(std::string_view(good).substr(2), CriteoLabel::kFromFieldCount),
              HasSubstr("39 tab-separated fields: a line without its label, or a labelled line"));
  EXPECT_EQ(error(std::string_view(good).substr(2), CriteoLabel::kPresent),
            "I13 '68fd1e64' is not a decimal integer in int64 range");
  EXPECT_EQ(error(line_with(39, ""), CriteoLabel::kFromFieldCount), "");
  EXPECT_THAT(error(line_with(39, "").substr(0, line_with(39, "").size() - 1),
                    CriteoLabel::kFromFieldCount),
              HasSubstr("39 tab-separated fields"));
  EXPECT_EQ(error(line_with(39, "").substr(0, line_with(39, "").size() - 1), CriteoLabel::kPresent),
            "");
  EXPECT_EQ(error(good, CriteoLabel::kFromFieldCount), "");
  EXPECT_EQ(error(good + "\t", CriteoLabel::kFromFieldCount),
            "expected 40 tab-separated fields, found 41");
  for (const CriteoLabel label_field :
       {CriteoLabel::kPresent, CriteoLabel::kAbsent, CriteoLabel::kFromFieldCount}) {
    EXPECT_EQ(error("", label_field), "empty line");
  }
  EXPECT_EQ(error(good, CriteoLabel::kAbsent), "expected 39 tab-separated fields, found 40");
  EXPECT_EQ(error(line_with(0, "2"), CriteoLabel::kPresent), "label '2' is not 0 or 1");
  EXPECT_EQ(error(line_with(20, "g"), CriteoLabel::kPresent),
            "C7 'g' is not 1 to 16 hexadecimal digits");
  EXPECT_EQ(error(good + std::string(kMaxLineBytes, ' '), CriteoLabel::kPresent),
            "line longer than 4096 bytes");
}

// --- Real files: short lines, CRLF, gzip, epochs --------------------------------------------

// `contents` gzip-compressed into `path` (zlib's gzip writer, as gzip(1) writes), in `members`
// gzip members one after the other (as `cat a.gz b.gz` makes).
void write_gzip(const std::string& path, const std::string& contents, int members = 1) {
  std::remove(path.c_str());
  const size_t part = contents.size() / static_cast<size_t>(members) + 1;
  for (int m = 0; m < members; ++m) {
    gzFile file = gzopen(path.c_str(), "ab");
    ASSERT_NE(file, nullptr);
    const std::string piece = contents.substr(std::min(contents.size(), m * part), part);
    if (!piece.empty()) {
      ASSERT_EQ(gzwrite(file, piece.data(), static_cast<unsigned>(piece.size())),
                static_cast<int>(piece.size()));
    }
    ASSERT_EQ(gzclose(file), Z_OK);
  }
}

std::string file_contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Random lines as people's files have them: some trimmed of their empty trailing fields (their
// tabs gone), some ended by "\r\n", the last without its '\n'. `expected` gets what each line
// must give (the reference of the canonical line), `short_lines` how many were trimmed.
std::string real_world_text(std::mt19937_64& random, int count,
                            const std::vector<int64_t>& vocabulary, std::vector<Example>& expected,
                            int64_t& short_lines) {
  std::string text;
  for (int i = 0; i < count; ++i) {
    Example example;
    std::string line = random_line(random, vocabulary, example);
    if (random() % 3 == 0) {
      // Empty last fields, then trimmed as an editor stripping trailing whitespace does.
      const int emptied = 1 + static_cast<int>(random() % 20);
      for (int k = 0; k < emptied; ++k) {
        line.erase(line.rfind('\t') + 1);
        line.pop_back();
        example.ids[static_cast<size_t>(kNumCategoricalFeatures - 1 - k)] = 0;
      }
      const size_t last = line.find_last_not_of('\t');
      if (last + 1 < line.size()) {
        // Earlier empty fields are trimmed too: their values stay missing.
        line.erase(last + 1);
      }
      ++short_lines;
    }
    expected.push_back(example);
    text += line + (i + 1 == count ? "" : random() % 4 == 0 ? "\r\n" : "\n");
  }
  return text;
}

TEST(CriteoReaderRealFilesTest, TrimmedLinesCrlfAndNoFinalNewlineReadAsTheCanonicalLines) {
  for (const uint64_t seed : {11u, 12u, 13u}) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    std::mt19937_64 random(seed);
    const std::vector<int64_t> vocabulary = test_vocabulary();
    std::vector<Example> expected;
    int64_t short_lines = 0;
    TempFiles files;
    const std::string path =
        files.write("trimmed.tsv", real_world_text(random, 700, vocabulary, expected, short_lines));
    ASSERT_GT(short_lines, 100);
    CriteoReader reader({path}, {.vocabulary_sizes = vocabulary, .max_malformed = 0});
    EXPECT_EQ(read_all(reader, 97), expected);
    EXPECT_EQ(reader.short_lines(), short_lines);
    EXPECT_EQ(reader.malformed_lines(), 0);
  }
}

TEST(CriteoReaderRealFilesTest, StrictRefusesEachNonCanonicalLineNamingFileAndLine) {
  const std::string canonical = valid_line("1") + "\n";
  const std::string trimmed = line_with(39, "").substr(0, line_with(39, "").size() - 1);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {canonical + trimmed + "\n", ":2: a short line"},
      {canonical + valid_line("0") + "\r\n", ":2: a line ended by \"\\r\\n\""},
      {canonical + valid_line("0"), ":2: the last line has no final '\\n'"},
      {canonical + line_with(14, "xyz") + "\n", ":2: C1 'xyz' is not 1 to 16 hexadecimal"},
  };
  TempFiles files;
  for (const auto& [contents, message] : cases) {
    const std::string path = files.write("strict.tsv", contents);
    CriteoReader reader({path}, {.vocabulary_sizes = test_vocabulary(), .strict = true});
    ExampleBatch batch;
    try {
      reader.next(batch, 10);
      FAIL() << "no error for " << message;
    } catch (const InvalidArgument& error) {
      EXPECT_THAT(error.what(), HasSubstr(path + message));
      EXPECT_THAT(error.what(), HasSubstr("data.strict"));
    }
    EXPECT_EQ(reader.position(), "criteo:0:0:0");  // all or nothing
    // Not strict: read, the short line counted.
    CriteoReader lenient({path}, {.vocabulary_sizes = test_vocabulary()});
    EXPECT_EQ(lenient.next(batch, 10), message.find("xyz") == std::string::npos ? 2 : 1);
  }
  const std::string path = files.write("canonical.tsv", canonical + canonical);
  CriteoReader reader({path}, {.vocabulary_sizes = test_vocabulary(), .strict = true});
  EXPECT_EQ(read_all(reader, 10).size(), 2u);
}

TEST(CriteoReaderRealFilesTest, GzipIsReadAsItsPlainTextWhateverItsName) {
  std::mt19937_64 random(21);
  const std::vector<int64_t> vocabulary = test_vocabulary();
  std::vector<Example> expected;
  int64_t short_lines = 0;
  const std::string text = real_world_text(random, 3000, vocabulary, expected, short_lines);
  TempFiles files;
  const std::string plain = files.write("day_0.tsv", text);
  write_gzip(files.path("day_0.gz"), text);
  write_gzip(files.path("day_0.txt"), text, 3);  // gzip by its magic bytes, in 3 members
  ReaderOptions options{.vocabulary_sizes = vocabulary};
  for (const bool ahead : {false, true})
    for (const std::string& path : {plain, files.path("day_0.gz"), files.path("day_0.txt")}) {
      SCOPED_TRACE(::testing::Message() << path << (ahead ? ", decompressed ahead" : ""));
      options.decompress_ahead = ahead;
      CriteoReader reader({path}, options);
      EXPECT_EQ(read_all(reader, 256), expected);
      EXPECT_EQ(reader.short_lines(), short_lines);
      EXPECT_EQ(reader.bytes_read(), static_cast<int64_t>(text.size()));
    }
  EXPECT_LT(std::filesystem::file_size(files.path("day_0.gz")), text.size());
  CriteoReader mixed({plain}, options);
  EXPECT_EQ(mixed.bytes_left(mixed.position()), static_cast<int64_t>(text.size()));
  CriteoReader compressed({files.path("day_0.gz")}, options);
  EXPECT_EQ(compressed.bytes_left(compressed.position()), std::nullopt);  // unknown size
}

TEST(CriteoReaderRealFilesTest, TruncatedOrCorruptGzipIsDataLossNamingFileAndLine) {
  std::mt19937_64 random(31);
  std::string text;
  for (int i = 0; i < 4000; ++i) {
    Example unused;
    text += random_line(random, test_vocabulary(), unused) + "\n";
  }
  TempFiles files;
  write_gzip(files.path("whole.gz"), text);
  const std::string compressed = file_contents(files.path("whole.gz"));
  const std::string truncated =
      files.write("truncated.gz", compressed.substr(0, compressed.size() * 3 / 5));
  std::string flipped = compressed;
  for (size_t k = flipped.size() / 2; k < flipped.size() / 2 + 64; ++k) flipped[k] ^= 0x5a;
  const std::string corrupt = files.write("corrupt.gz", flipped);
  // day0.gz + day1.gz whose second member's first magic byte is damaged, and a file with bytes
  // appended: the data does not end there without a word.
  std::string two_members = compressed + compressed;
  two_members[compressed.size()] ^= 0x01;
  const std::string damaged_member = files.write("damaged_member.gz", two_members);
  const std::string appended = files.write("appended.gz", compressed + "garbage\n");
  for (const auto& [path, what] :
       {std::pair{truncated, std::string("truncated")}, std::pair{corrupt, std::string("corrupt")},
        std::pair{damaged_member, "at byte " + std::to_string(compressed.size())},
        std::pair{appended, "at byte " + std::to_string(compressed.size())}}) {
    SCOPED_TRACE(path);
    // Corrupt data may decompress to garbage lines before zlib's checks find it: tolerate them.
    const ReaderOptions options{.vocabulary_sizes = test_vocabulary(), .max_malformed = 1 << 20};
    CriteoReader reader({path}, options);
    ExampleBatch batch;
    ASSERT_EQ(reader.next(batch, 100), 100);  // the head is intact
    std::string position = reader.position();
    try {
      for (;;) {
        ASSERT_GT(reader.next(batch, 100), 0);
        position = reader.position();
      }
    } catch (const DataLoss& error) {
      EXPECT_THAT(error.what(), HasSubstr(path + ":"));  // file:line
      EXPECT_THAT(error.what(), HasSubstr(what));
    }
    // The batch that failed left the reader where it was: a resumed run reads the same lines.
    EXPECT_EQ(reader.position(), position);
    CriteoReader again({path}, options);
    again.seek(position);
    EXPECT_EQ(again.position(), position);
  }
}

TEST(CriteoReaderRealFilesTest, EpochsRepeatTheFilesFromBeginToEnd) {
  std::mt19937_64 random(41);
  const std::vector<int64_t> vocabulary = test_vocabulary();
  TempFiles files;
  std::vector<std::string> paths;
  std::vector<Example> one_epoch;
  for (int f = 0; f < 3; ++f) {
    int64_t unused = 0;
    const std::string text = real_world_text(random, 50 + 10 * f, vocabulary, one_epoch, unused);
    paths.push_back(files.path("day_" + std::to_string(f) + (f == 1 ? ".gz" : ".tsv")));
    if (f == 1) {
      write_gzip(paths.back(), text);
    } else {
      files.write("day_" + std::to_string(f) + ".tsv", text);
    }
  }
  ReaderOptions options{.vocabulary_sizes = vocabulary, .epochs = 3};
  CriteoReader reader(paths, options);
  std::vector<Example> expected;
  for (int e = 0; e < 3; ++e) expected.insert(expected.end(), one_epoch.begin(), one_epoch.end());
  EXPECT_EQ(read_all(reader, 64), expected);
  EXPECT_EQ(reader.position(), "criteo:9:0:0");

  // begin and end: each epoch reads lines [20, 100) of the 180.
  CriteoReader marker(paths, {.vocabulary_sizes = vocabulary});
  EXPECT_EQ(marker.skip_lines(20), 20);
  options.begin = marker.position();
  EXPECT_EQ(marker.skip_lines(80), 80);
  options.end = marker.position();
  EXPECT_EQ(marker.skip_lines(1000), 80);
  CriteoReader part(paths, options);
  EXPECT_EQ(part.position(), options.begin);
  expected.clear();
  for (int e = 0; e < 3; ++e) {
    expected.insert(expected.end(), one_epoch.begin() + 20, one_epoch.begin() + 100);
  }
  EXPECT_EQ(read_all(part, 64), expected);
  EXPECT_EQ(options.epochs, 3);
  EXPECT_THROW(CriteoReader(paths, {.vocabulary_sizes = vocabulary, .epochs = 0}), InvalidArgument);
  ReaderOptions reversed = options;
  std::swap(reversed.begin, reversed.end);
  EXPECT_THROW(CriteoReader(paths, reversed), InvalidArgument);
}

TEST(CriteoReaderRealFilesTest, ResumesExactlyAcrossFilesGzipAndEpochs) {
  std::mt19937_64 random(51);
  const std::vector<int64_t> vocabulary = test_vocabulary();
  TempFiles files;
  std::vector<std::string> paths;
  for (int f = 0; f < 3; ++f) {
    std::vector<Example> unused;
    int64_t short_lines = 0;
    const std::string text = real_world_text(random, 120, vocabulary, unused, short_lines);
    paths.push_back(files.path("day_" + std::to_string(f)));
    if (f == 1) {
      files.write("day_1", text);
    } else {
      write_gzip(paths.back(), text, f + 1);
    }
  }
  CriteoReader marker(paths, {.vocabulary_sizes = vocabulary});
  marker.skip_lines(30);
  ReaderOptions options{.vocabulary_sizes = vocabulary, .epochs = 2, .begin = marker.position()};
  // Stop after k batches of 50: inside a gzip file, across files and epochs, at the end.
  for (const bool ahead : {false, true})
    for (const int stops : {0, 1, 3, 5, 6, 9, 12}) {
      SCOPED_TRACE(::testing::Message() << "stopped after " << stops << " batches"
                                        << (ahead ? ", decompressed ahead" : ""));
      options.decompress_ahead = ahead;
      CriteoReader resumed(paths, options);
      expect_exact_resume(paths, options, stops, 50, resumed);
    }
  CriteoReader reader(paths, options);
  EXPECT_THROW(reader.seek("criteo:2:7:1"), InvalidArgument);  // not a line start (gzip)
  EXPECT_THROW(reader.seek("criteo:7:0:0"), InvalidArgument);  // past 3 files x 2 epochs
  EXPECT_EQ(reader.position(), options.begin);
}

TEST(CriteoReaderRealFilesTest, BytesLeftCountsEpochsAndTheReadPart) {
  TempFiles files;
  const std::string line = valid_line("1") + "\n";
  const auto size = static_cast<int64_t>(line.size());
  const std::vector<std::string> paths = {files.write("a", line + line),
                                          files.write("b", line + line + line)};
  CriteoReader reader(paths, {.vocabulary_sizes = test_vocabulary(), .epochs = 2});
  EXPECT_EQ(reader.bytes_left(reader.position()), 10 * size);
  reader.skip_lines(3);
  EXPECT_EQ(reader.position(), "criteo:1:" + std::to_string(size) + ":1");
  EXPECT_EQ(reader.bytes_left(reader.position()), 7 * size);
  EXPECT_EQ(reader.bytes_read(), 3 * size);
  reader.skip_lines(100);
  EXPECT_EQ(reader.bytes_left(reader.position()), 0);
}

}  // namespace
}  // namespace recemb::dlrm
