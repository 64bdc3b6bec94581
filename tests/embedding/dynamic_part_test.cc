// DynamicPart (src/embedding/dynamic_part.cc) alone: the plan/commit halves of a training lookup,
// pure finds, TTL, the zero row and initial rows, and PendingLookups. The end-to-end behaviour
// against the dict reference is in dynamic_tables_test.cc.
#include "embedding/dynamic_part.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <memory>
#include <vector>

#include "recemb/error.h"

#include "optimizers/slot_spec.h"
#include "storage/initializer.h"
#include "testing/error_of.h"

namespace recemb::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kDim = 3;
constexpr int64_t kNone = std::numeric_limits<int64_t>::max();

struct Part {
  explicit Part(DynamicVocabulary vocabulary, int64_t first_column = 0, int64_t columns = kDim)
      : table{.name = "t",
              .dim = kDim,
              .initializer = TruncatedNormal{},
              .dynamic_vocabulary = vocabulary},
        part{.rows = vocabulary.capacity,
             .first_column = first_column,
             .num_columns = columns,
             .keyed = true},
        storage("t", part.rows + 1, columns, slot_specs(Adagrad{}, columns)),
        dynamic(table, part, 99) {}

  // One training lookup of `keys` (one run) for `step`: the slots it resolves to.
  std::vector<int64_t> train(std::vector<int64_t> keys, int64_t step, int64_t pinned_from = kNone) {
    std::vector<int64_t> slots(keys.size(), -7);
    const KeyRun run{
        .keys = keys.data(), .size = static_cast<int64_t>(keys.size()), .slots = slots.data()};
    dynamic.find(run, 0, run.size, KeyIndex::kAbsent);
    dynamic.plan({&run, 1}, step, pinned_from);
    // The sightings in three parts, as three threads would record them.
    for (int third = 0; third < 3; ++third) dynamic.touch_present({&run, 1}, step, third, 3);
    dynamic.commit({&run, 1}, step, changes);
    for (int third = 0; third < 3; ++third) dynamic.initialize_admitted(storage, changes, third, 3);
    return slots;
  }
  std::vector<int64_t> find(std::vector<int64_t> keys) const {
    std::vector<int64_t> slots(keys.size(), -7);
    const KeyRun run{
        .keys = keys.data(), .size = static_cast<int64_t>(keys.size()), .slots = slots.data()};
    dynamic.find(run, 0, run.size, dynamic.zero_row());
    return slots;
  }
  std::vector<int64_t> keys() const {
    std::vector<int64_t> held;
    for (const int64_t slot : dynamic.index().slots_by_key())
      held.push_back(dynamic.index().key_of(slot));
    return held;
  }

  TableConfig table;
  TablePart part;
  TableStorage storage;
  DynamicPart dynamic;
  ChangeLog changes;
};

TEST(DynamicPart, AdmitsAtMinCountAndResolvesEveryOccurrence) {
  Part p({.capacity = 4, .min_count = 3});
  const int64_t zero = p.dynamic.zero_row();
  EXPECT_EQ(zero, 4);
  // Key 5 seen twice: not yet (2 < 3); key 8 once.
  EXPECT_THAT(p.train({5, 8, 5}, 1), ElementsAre(zero, zero, zero));
  EXPECT_EQ(p.dynamic.counters().not_admitted_lookups, 3);
  // Its third occurrence admits it, and both occurrences of this lookup use the new row.
  const std::vector<int64_t> slots = p.train({5, 5}, 2);
  EXPECT_NE(slots[0], zero);
  EXPECT_EQ(slots[0], slots[1]);
  EXPECT_EQ(p.dynamic.index().count(slots[0]), 4);  // all occurrences, admission included
  EXPECT_EQ(p.dynamic.index().last_seen(slots[0]), 2);
  EXPECT_EQ(p.dynamic.counters().inserted, 1);
  EXPECT_EQ(p.find({5, 8}), (std::vector<int64_t>{slots[0], zero}));
}

TEST(DynamicPart, NewRowIsTheInitializersRowForTheKeyAndItsSlotsStartInitial) {
  // A column part (columns [1, 3)) of the table: its columns of the key's initial row.
  Part p({.capacity = 2}, 1, 2);
  const int64_t key = -123456789;
  const int64_t slot = p.train({key}, 1)[0];
  std::vector<float> row(kDim);
  initialize_rows(TruncatedNormal{}, 99, key, 1, kDim, row);
  EXPECT_EQ(p.storage.row(slot)[0], row[1]);
  EXPECT_EQ(p.storage.row(slot)[1], row[2]);
  EXPECT_EQ(p.storage.slot_bases()[0][slot * 2], Adagrad{}.initial_accumulator_value);
}

TEST(DynamicPart, EvictsTheLeastRecentThenLeastFrequentThenSmallestKey) {
  Part p({.capacity = 3, .when_full = WhenFull::kEvictLeastRecent});
  p.train({10, 20, 20}, 1);
  p.train({30}, 2);
  // 10 and 20 both last seen at 1; 10 has the smaller count: evicted first.
  p.train({40}, 3);
  EXPECT_THAT(p.keys(), ElementsAre(20, 30, 40));
  EXPECT_EQ(p.dynamic.counters().evicted, 1);

  Part q({.capacity = 3, .when_full = WhenFull::kEvictLeastFrequent});
  q.train({10, 10, 20, 30, 30}, 1);
  q.train({20, 20}, 2);  // counts: 10: 2, 20: 3, 30: 2
  // 10 and 30 have count 2 and were last seen at 1: the smaller key goes.
  q.train({40}, 3);
  EXPECT_THAT(q.keys(), ElementsAre(20, 30, 40));
}

TEST(DynamicPart, NeverEvictsTheLookupsOwnOrPinnedKeysAndFailsWithNothingChanged) {
  Part p({.capacity = 2});
  p.train({1}, 1);
  p.train({2}, 2);
  // Key 1 is in this lookup: key 2 makes room although 1 was seen longer ago.
  p.train({1, 3}, 3);
  EXPECT_THAT(p.keys(), ElementsAre(1, 3));
  // Keys seen at step >= 3 are pinned: no room for key 4.
  EXPECT_THAT(test::error_of<FailedPrecondition>([&] { p.train({4}, 4, 3); }),
              HasSubstr("training lookups not applied yet"));
  EXPECT_THAT(p.keys(), ElementsAre(1, 3));
  EXPECT_EQ(p.dynamic.counters().evicted, 1);
  // Three distinct keys can never fit in two slots.
  EXPECT_THAT(test::error_of<FailedPrecondition>([&] {
                p.train({5, 6, 7}, 4);
              }),
              HasSubstr("3 distinct keys that need a row"));
  EXPECT_EQ(p.dynamic.pending().count(5), 0);
}

TEST(DynamicPart, ExpiresKeysNotSeenWithinTheTtl) {
  Part p({.capacity = 8, .ttl_steps = 2});
  p.train({1, 2}, 1);
  p.train({2}, 2);
  EXPECT_EQ(p.dynamic.expire(2, kNone, p.changes), 0);  // keeps last seen >= 1
  EXPECT_EQ(p.dynamic.expire(3, kNone, p.changes), 1);  // keeps last seen >= 2: key 1 goes
  EXPECT_THAT(p.keys(), ElementsAre(2));
  EXPECT_EQ(p.dynamic.expire(4, 2, p.changes), 0);  // key 2 is pinned
  EXPECT_EQ(p.dynamic.counters().evicted, 1);
}

TEST(DynamicPart, RecordsRemovedKeysAndAdmittedRowsInTheChangeLogOnceStarted) {
  Part p({.capacity = 2, .ttl_steps = 3});
  p.train({1}, 1);
  p.train({2}, 2);
  p.train({3}, 3);  // evicts 1: not tracked yet
  EXPECT_TRUE(p.changes.removed_keys().empty());
  p.changes.start(p.storage.num_rows());
  const int64_t slot = p.train({4}, 4)[0];  // evicts 2, admits 4
  EXPECT_THAT(p.changes.removed_keys(), ElementsAre(2));
  std::vector<uint8_t> changed(p.changes.changed_rows().begin(), p.changes.changed_rows().end());
  std::vector<uint8_t> expected(3, 0);
  expected[static_cast<size_t>(slot)] = 1;
  EXPECT_EQ(changed, expected);                         // the admitted key's new row only
  EXPECT_EQ(p.dynamic.expire(6, kNone, p.changes), 1);  // 3, last seen at 3, expires; 4 stays
  EXPECT_THAT(p.changes.removed_keys(), ElementsAre(2, 3));
}

TEST(DynamicPart, ResetZeroRowClearsWhatAnUpdateWroteThere) {
  Part p({.capacity = 1});
  float* zero = p.storage.row(p.dynamic.zero_row());
  zero[0] = 3.0f;
  zero[2] = -1.0f;
  p.dynamic.reset_zero_row(p.storage);
  EXPECT_THAT(std::vector<float>(zero, zero + kDim), ElementsAre(0.0f, 0.0f, 0.0f));
}

// replace_keys (write_dynamic_table's share): exactly the given keys, each seen once at the step,
// no longer pending; other pending keys and the counters kept. restore: keys, sightings, counts,
// pending counts and counters exactly as given. Both checked through the part's const views.
TEST(DynamicPart, ReplaceKeysAndRestoreHoldExactlyWhatTheyAreGiven) {
  Part p({.capacity = 8, .min_count = 3});
  p.train({1, 2, 5}, 1);  // pending: 1, 2, 5 once each
  p.train({5, 6}, 2);
  const VocabularyCounters before = p.dynamic.counters();
  const std::vector<int64_t> keys = {-4, 2, 9};
  std::vector<int64_t> slots(3, -1);
  p.dynamic.replace_keys(keys, 7, slots);
  EXPECT_THAT(p.keys(), ElementsAre(-4, 2, 9));
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(p.dynamic.index().find(keys[i]), slots[i]);
    EXPECT_EQ(p.dynamic.index().last_seen(slots[i]), 7);
  }
  EXPECT_EQ(p.dynamic.pending().count(2), 0);  // held now: forgotten
  EXPECT_EQ(p.dynamic.pending().count(5), 2);  // kept
  EXPECT_EQ(p.dynamic.counters().inserted, before.inserted);

  const std::vector<int64_t> restored = {3, 8}, last_seen = {4, 6}, counts = {5, 9};
  const std::vector<int64_t> pending = {11}, pending_counts = {2};
  const VocabularyCounters counters{.inserted = 12, .evicted = 3, .not_admitted_lookups = 40};
  p.dynamic.restore(restored, last_seen, counts, pending, pending_counts, counters, slots);
  EXPECT_THAT(p.keys(), ElementsAre(3, 8));
  for (size_t i = 0; i < restored.size(); ++i) {
    EXPECT_EQ(p.dynamic.index().find(restored[i]), slots[i]);
    EXPECT_EQ(p.dynamic.index().last_seen(slots[i]), last_seen[i]);
    EXPECT_EQ(p.dynamic.index().count(slots[i]), counts[i]);
  }
  EXPECT_EQ(p.dynamic.pending().exact_entries(),
            (std::vector<std::pair<int64_t, int64_t>>{{11, 2}}));
  EXPECT_EQ(p.dynamic.counters().inserted, 12);
  EXPECT_EQ(p.dynamic.counters().evicted, 3);
  EXPECT_EQ(p.dynamic.counters().not_admitted_lookups, 40);
}

TEST(PendingLookups, OldestIsTheSmallestHeldStepUntilReleased) {
  auto lookups = std::make_shared<PendingLookups>();
  EXPECT_EQ(lookups->oldest(), kNone);
  {
    PendingLookup a;
    PendingLookup b;
    a.hold(lookups, 5);
    b.hold(lookups, 3);
    EXPECT_EQ(lookups->oldest(), 3);
    b.release();
    EXPECT_EQ(lookups->oldest(), 5);
    b.release();         // twice is harmless
    a.hold(lookups, 7);  // re-holding releases the old step
    EXPECT_EQ(lookups->oldest(), 7);
  }
  EXPECT_EQ(lookups->oldest(), kNone);  // released on destruction
  PendingLookup outlives;
  outlives.hold(lookups, 1);
  lookups.reset();  // the Embedding is gone first: releasing later is harmless
}

}  // namespace
}  // namespace recemb::internal
