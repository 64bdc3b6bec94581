#include "storage/key_index.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <gtest/gtest.h>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "recemb/error.h"

#include "testing/key_pool.h"

namespace recemb::internal {
namespace {

using test::KeyPool;

constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// The index written for clarity: every key's slot, last_seen and count, with the orders of the
// contract computed by sorting everything.
struct Reference {
  struct Entry {
    int64_t slot;
    int64_t last_seen;
    int64_t count;
  };
  std::map<int64_t, Entry> keys;

  std::vector<int64_t> victims(EvictionOrder order, int64_t n, int64_t pinned_from) const {
    std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>> ranked;  // order, key, slot
    for (const auto& [key, entry] : keys) {
      if (entry.last_seen >= pinned_from) continue;
      if (order == EvictionOrder::kLeastRecent) {
        ranked.emplace_back(entry.last_seen, entry.count, key, entry.slot);
      } else {
        ranked.emplace_back(entry.count, entry.last_seen, key, entry.slot);
      }
    }
    std::sort(ranked.begin(), ranked.end());
    std::vector<int64_t> slots;
    for (size_t i = 0; i < ranked.size() && static_cast<int64_t>(i) < n; ++i) {
      slots.push_back(std::get<3>(ranked[i]));
    }
    return slots;
  }

  std::vector<int64_t> expired(int64_t before_step, int64_t pinned_from) const {
    std::vector<std::tuple<int64_t, int64_t, int64_t>> ranked;  // last_seen, key, slot
    for (const auto& [key, entry] : keys) {
      if (entry.last_seen < before_step && entry.last_seen < pinned_from) {
        ranked.emplace_back(entry.last_seen, key, entry.slot);
      }
    }
    std::sort(ranked.begin(), ranked.end());
    std::vector<int64_t> slots;
    for (const auto& ranked_entry : ranked) slots.push_back(std::get<2>(ranked_entry));
    return slots;
  }

  void erase_slot(int64_t slot) {
    for (auto it = keys.begin(); it != keys.end(); ++it) {
      if (it->second.slot == slot) {
        keys.erase(it);
        return;
      }
    }
    FAIL() << "slot " << slot << " is not in the reference";
  }
};

std::vector<int64_t> to_vector(std::span<const int64_t> slots) {
  return {slots.begin(), slots.end()};
}

void expect_same(const KeyIndex& index, const Reference& reference, const KeyPool& pool) {
  ASSERT_EQ(index.size(), static_cast<int64_t>(reference.keys.size()));
  std::set<int64_t> slots;
  std::vector<int64_t> slots_in_key_order;
  for (const auto& [key, entry] : reference.keys) {
    ASSERT_EQ(index.find(key), entry.slot) << "key " << key;
    ASSERT_TRUE(index.occupied(entry.slot));
    EXPECT_EQ(index.key_of(entry.slot), key);
    EXPECT_EQ(index.last_seen(entry.slot), entry.last_seen) << "key " << key;
    EXPECT_EQ(index.count(entry.slot), entry.count) << "key " << key;
    slots.insert(entry.slot);
    slots_in_key_order.push_back(entry.slot);
  }
  for (const int64_t key : pool.keys()) {
    if (!reference.keys.contains(key)) {
      ASSERT_EQ(index.find(key), KeyIndex::kAbsent) << key;
    }
  }
  int64_t occupied = 0;
  for (int64_t slot = 0; slot < index.capacity(); ++slot) {
    occupied += index.occupied(slot);
    EXPECT_EQ(index.occupied(slot), slots.contains(slot)) << "slot " << slot;
  }
  EXPECT_EQ(occupied, index.size());
  EXPECT_EQ(index.slots_by_key(), slots_in_key_order);
}

struct RandomRun {
  int64_t capacity;
  int64_t pool_keys;  // random keys per kind in the key pool
  int64_t operations;
  uint64_t seed;
};

// Random inserts, erases, touches at increasing steps, finds, evictions when full (either order,
// random pins) and TTL sweeps, applied to the index and the reference alike.
void run_random_operations(const RandomRun& run) {
  SCOPED_TRACE(testing::Message() << "capacity " << run.capacity << " seed " << run.seed);
  std::mt19937_64 random(run.seed);
  const KeyPool pool(run.seed + 1, run.pool_keys);
  KeyIndex index(run.capacity);
  Reference reference;
  int64_t step = 0;
  const auto chance = [&](double p) { return std::bernoulli_distribution(p)(random); };
  const auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(random);
  };
  const auto random_present = [&]() {
    auto it = reference.keys.begin();
    std::advance(it, uniform(0, static_cast<int64_t>(reference.keys.size()) - 1));
    return it;
  };
  for (int64_t operation = 0; operation < run.operations; ++operation) {
    if (chance(0.1)) step += uniform(1, 3);
    const int kind = static_cast<int>(uniform(0, 9));
    if (kind <= 3) {  // insert, evicting first when full
      const int64_t key = pool.pick(random);
      if (reference.keys.contains(key)) {
        ASSERT_NE(index.find(key), KeyIndex::kAbsent);
        continue;
      }
      ASSERT_EQ(index.find(key), KeyIndex::kAbsent) << key;
      if (index.size() == index.capacity()) {
        const EvictionOrder order =
            chance(0.5) ? EvictionOrder::kLeastRecent : EvictionOrder::kLeastFrequent;
        const int64_t n = uniform(1, 3);
        const int64_t pinned_from = step - uniform(0, 4);
        const std::vector<int64_t> victims = to_vector(index.choose_victims(order, n, pinned_from));
        ASSERT_EQ(victims, reference.victims(order, n, pinned_from));
        if (victims.empty()) continue;
        for (const int64_t slot : victims) {
          index.erase(slot);
          reference.erase_slot(slot);
        }
      }
      const int64_t count = uniform(1, 4);
      const int64_t slot = index.insert(key, step, count);
      ASSERT_GE(slot, 0);
      ASSERT_LT(slot, run.capacity);
      reference.keys[key] = {slot, step, count};
    } else if (kind == 4 && !reference.keys.empty()) {  // erase
      const auto it = random_present();
      index.erase(it->second.slot);
      reference.keys.erase(it);
    } else if (kind <= 6 && !reference.keys.empty()) {  // touch
      const auto it = random_present();
      const int64_t occurrences = uniform(0, 5);
      index.touch(it->second.slot, step, occurrences);
      it->second.last_seen = step;
      it->second.count += occurrences;
    } else if (kind == 7) {  // TTL sweep, erasing what expired, as the caller does
      const int64_t before_step = step - uniform(0, 6);
      const int64_t pinned_from = chance(0.5) ? step + 1 : step - uniform(0, 8);
      const std::vector<int64_t> expired = to_vector(index.expired(before_step, pinned_from));
      ASSERT_EQ(expired, reference.expired(before_step, pinned_from));
      if (chance(0.8)) {
        for (const int64_t slot : expired) {
          index.erase(slot);
          reference.erase_slot(slot);
        }
      }
    } else if (kind == 8) {  // victims asked for without evicting
      const EvictionOrder order =
          chance(0.5) ? EvictionOrder::kLeastRecent : EvictionOrder::kLeastFrequent;
      const int64_t n = uniform(0, run.capacity + 2);
      const int64_t pinned_from = step + 1 - uniform(0, 6);
      ASSERT_EQ(to_vector(index.choose_victims(order, n, pinned_from)),
                reference.victims(order, n, pinned_from));
    } else {  // find
      const int64_t key = pool.pick(random);
      index.prefetch(key);
      const auto it = reference.keys.find(key);
      ASSERT_EQ(index.find(key), it == reference.keys.end() ? KeyIndex::kAbsent : it->second.slot);
    }
    if (operation % 997 == 0) {
      expect_same(index, reference, pool);
      if (testing::Test::HasFatalFailure()) return;
    }
  }
  expect_same(index, reference, pool);
}

TEST(KeyIndexTest, RandomOperationsMatchTheReference) {
  run_random_operations({.capacity = 64, .pool_keys = 40, .operations = 40000, .seed = 1});
  run_random_operations({.capacity = 1000, .pool_keys = 600, .operations = 60000, .seed = 2});
  run_random_operations({.capacity = 5, .pool_keys = 4, .operations = 20000, .seed = 3});
}

// Few buckets, kept full: most keys live past their home bucket, runs wrap around the table's end,
// and erases must unwind the counts of the buckets the keys passed.
TEST(KeyIndexTest, CrowdedSmallTablesMatchTheReference) {
  for (const int64_t capacity : {2, 3, 4, 7, 12, 20, 33}) {
    run_random_operations({.capacity = capacity,
                           .pool_keys = capacity,
                           .operations = 8000,
                           .seed = 100 + static_cast<uint64_t>(capacity)});
  }
}

// keys_by_slot (kept only when asked for): each occupied slot's key, through inserts, erases and
// slots taken again, against key_of and a map of the keys inserted.
TEST(KeyIndexTest, KeysBySlotFollowInsertsAndErases) {
  EXPECT_EQ(KeyIndex(8).keys_by_slot(), nullptr);
  KeyIndex index(50, /*keys_by_slot=*/true);
  ASSERT_NE(index.keys_by_slot(), nullptr);
  std::mt19937_64 rng(31);
  std::map<int64_t, int64_t> key_of_slot;
  for (int round = 0; round < 2000; ++round) {
    if (!key_of_slot.empty() && (index.size() == index.capacity() || rng() % 3 == 0)) {
      auto victim = key_of_slot.begin();
      std::advance(victim, static_cast<int64_t>(rng() % key_of_slot.size()));
      index.erase(victim->first);
      key_of_slot.erase(victim);
    } else {
      const auto key = static_cast<int64_t>(rng());
      if (index.find(key) == KeyIndex::kAbsent) key_of_slot[index.insert(key, round, 1)] = key;
    }
    for (const auto& [slot, key] : key_of_slot) {
      ASSERT_EQ(index.keys_by_slot()[slot], key) << "round " << round;
      ASSERT_EQ(index.key_of(slot), key);
    }
  }
}

TEST(KeyIndexTest, CapacityOneHoldsOneKey) {
  run_random_operations({.capacity = 1, .pool_keys = 2, .operations = 5000, .seed = 4});
  KeyIndex index(1);
  EXPECT_EQ(index.insert(kMin, 3, 1), 0);
  EXPECT_EQ(index.find(kMin), 0);
  EXPECT_EQ(index.find(kMax), KeyIndex::kAbsent);
  EXPECT_EQ(to_vector(index.choose_victims(EvictionOrder::kLeastRecent, 1, 4)),
            std::vector<int64_t>{0});
  EXPECT_TRUE(index.choose_victims(EvictionOrder::kLeastRecent, 1, 3).empty());  // pinned
  index.erase(0);
  EXPECT_EQ(index.size(), 0);
  EXPECT_EQ(index.find(kMin), KeyIndex::kAbsent);
  EXPECT_EQ(index.insert(kMax, 5, 2), 0);
  EXPECT_EQ(index.key_of(0), kMax);
}

// TTL sweeps over many steps: every step touches or admits a random batch of keys and erases what
// has not been seen for `ttl` steps, as the trainer will.
TEST(KeyIndexTest, TtlSweepsOverManyStepsMatchTheReference) {
  std::mt19937_64 random(5);
  const int64_t capacity = 3000;
  const int64_t ttl = 7;
  KeyIndex index(capacity);
  Reference reference;
  for (int64_t step = 0; step < 400; ++step) {
    for (int i = 0; i < 40; ++i) {
      // Zipf-like: low keys come back often, high keys rarely.
      const int64_t key = static_cast<int64_t>(std::exp(std::uniform_real_distribution<double>(
                              0.0, std::log(20000.0))(random))) -
                          10000;
      const auto it = reference.keys.find(key);
      if (it != reference.keys.end()) {
        index.touch(it->second.slot, step, 1);
        it->second.last_seen = step;
        ++it->second.count;
      } else if (index.size() < capacity) {
        reference.keys[key] = {index.insert(key, step, 1), step, 1};
      }
    }
    const int64_t before_step = step - ttl + 1;
    const std::vector<int64_t> expired = to_vector(index.expired(before_step, step + 1));
    ASSERT_EQ(expired, reference.expired(before_step, step + 1)) << "step " << step;
    for (const int64_t slot : expired) {
      index.erase(slot);
      reference.erase_slot(slot);
    }
    ASSERT_EQ(index.size(), static_cast<int64_t>(reference.keys.size()));
  }
  EXPECT_GT(reference.keys.size(), 100u);
  for (const auto& [key, entry] : reference.keys) EXPECT_EQ(index.find(key), entry.slot);
}

// A restore inserts keys in key order with their saved last_seen: steps out of order.
TEST(KeyIndexTest, InsertsOutOfStepOrderAreOrderedByLastSeen) {
  std::mt19937_64 random(6);
  KeyIndex index(500);
  Reference reference;
  for (int64_t key = -250; key < 250; ++key) {
    const int64_t last_seen = std::uniform_int_distribution<int64_t>(0, 40)(random);
    const int64_t count = std::uniform_int_distribution<int64_t>(1, 9)(random);
    reference.keys[key * 7919] = {index.insert(key * 7919, last_seen, count), last_seen, count};
  }
  for (const EvictionOrder order : {EvictionOrder::kLeastRecent, EvictionOrder::kLeastFrequent}) {
    for (const int64_t n : {1, 10, 77, 500, 501}) {
      EXPECT_EQ(to_vector(index.choose_victims(order, n, 35)), reference.victims(order, n, 35));
    }
  }
  // Touches after the restore keep working from the sorted order.
  for (auto& [key, entry] : reference.keys) {
    if (key % 3 == 0) {
      index.touch(entry.slot, 41, 2);
      entry.last_seen = 41;
      entry.count += 2;
    }
  }
  EXPECT_EQ(to_vector(index.choose_victims(EvictionOrder::kLeastRecent, 100, 100)),
            reference.victims(EvictionOrder::kLeastRecent, 100, 100));
  EXPECT_EQ(to_vector(index.expired(20, 100)), reference.expired(20, 100));
  EXPECT_EQ(to_vector(index.expired(42, 41)), reference.expired(42, 41));
}

// Which free slot an insert takes depends only on the inserts and erases before it: two indexes
// fed the same operations (their steps and counts different) agree; freed slots are reused last
// freed first, then never-used slots in increasing order.
TEST(KeyIndexTest, SlotAssignmentIsDeterministicAndReusesFreedSlots) {
  std::mt19937_64 random(7);
  KeyIndex first(200), second(200);
  std::vector<int64_t> held;
  for (int i = 0; i < 5000; ++i) {
    if (held.size() < 200 && (held.empty() || random() % 3 != 0)) {
      const auto key = static_cast<int64_t>(random());
      const int64_t slot = first.insert(key, i, 1);
      ASSERT_EQ(second.insert(key, 2 * i, 5), slot);
      held.push_back(key);
    } else {
      const size_t which = random() % held.size();
      const int64_t slot = first.find(held[which]);
      ASSERT_EQ(second.find(held[which]), slot);
      first.erase(slot);
      second.erase(slot);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(which));
    }
  }

  KeyIndex index(10);
  for (int64_t key = 0; key < 6; ++key) EXPECT_EQ(index.insert(key * 100, 0, 1), key);
  index.erase(index.find(200));
  index.erase(index.find(400));
  EXPECT_EQ(index.insert(-1, 0, 1), 4);  // last freed first
  EXPECT_EQ(index.insert(-2, 0, 1), 2);
  EXPECT_EQ(index.insert(-3, 0, 1), 6);  // then never used
  EXPECT_EQ(index.insert(-4, 0, 1), 7);
}

// clear() leaves an index that behaves as a new one: no keys, and the same slots for the same
// inserts.
TEST(KeyIndexTest, ClearedIndexBehavesAsANewOne) {
  std::mt19937_64 random(12);
  KeyIndex used(50);
  for (int i = 0; i < 400; ++i) {
    const auto key = static_cast<int64_t>(random() % 1000);
    const int64_t slot = used.find(key);
    if (slot != KeyIndex::kAbsent) {
      used.erase(slot);
    } else if (used.size() < used.capacity()) {
      used.insert(key, i, 1);
    }
  }
  ASSERT_GT(used.size(), 0);
  const std::vector<int64_t> held = used.slots_by_key();
  std::vector<int64_t> held_keys;
  for (const int64_t slot : held) held_keys.push_back(used.key_of(slot));
  used.clear();
  EXPECT_EQ(used.size(), 0);
  EXPECT_TRUE(used.slots_by_key().empty());
  for (const int64_t key : held_keys) EXPECT_EQ(used.find(key), KeyIndex::kAbsent);
  KeyIndex fresh(50);
  for (int i = 0; i < 300; ++i) {
    const auto key = static_cast<int64_t>(random() % 1000);
    const int64_t slot = fresh.find(key);
    ASSERT_EQ(used.find(key), slot);
    if (slot != KeyIndex::kAbsent) {
      fresh.erase(slot);
      used.erase(slot);
    } else if (fresh.size() < fresh.capacity()) {
      ASSERT_EQ(used.insert(key, 400 - i, 1 + i % 3), fresh.insert(key, 400 - i, 1 + i % 3));
    }
  }
  const std::span<const int64_t> expected =
      fresh.choose_victims(EvictionOrder::kLeastRecent, 10, kMax);
  const std::vector<int64_t> fresh_victims(expected.begin(), expected.end());
  const std::span<const int64_t> victims =
      used.choose_victims(EvictionOrder::kLeastRecent, 10, kMax);
  EXPECT_EQ(std::vector<int64_t>(victims.begin(), victims.end()), fresh_victims);
}

TEST(KeyIndexTest, TouchAccumulatesAndSaturatesCounts) {
  KeyIndex index(4);
  const int64_t slot = index.insert(kMax, 1, 3);
  index.touch(slot, 1, 2);
  EXPECT_EQ(index.count(slot), 5);
  EXPECT_EQ(index.last_seen(slot), 1);
  index.touch(slot, 9, kMax);
  EXPECT_EQ(index.count(slot), kMax);
  EXPECT_EQ(index.last_seen(slot), 9);
  index.touch(slot, 9, 0);
  EXPECT_EQ(index.count(slot), kMax);
}

// touch_range over split slot ranges counts every in-range occurrence once, as a plain count per
// key over the whole batch does, and leaves slots outside its range alone.
TEST(KeyIndexTest, TouchRangesCountWhatAPlainCountCounts) {
  std::mt19937_64 random(21);
  KeyIndex index(500);
  std::map<int64_t, int64_t> count_of;  // slot -> count
  for (int64_t key = 0; key < 400; ++key) {
    const int64_t slot = index.insert(key * 7919 - 1000, 1, static_cast<int64_t>(key % 3));
    count_of[slot] = key % 3;
  }
  for (int64_t slot = 0; slot < 400; slot += 5) {
    index.erase(slot);
    count_of.erase(slot);
  }
  std::vector<int64_t> slots(3000);
  for (int64_t& slot : slots) {
    const auto it = std::next(count_of.begin(), static_cast<int64_t>(random() % count_of.size()));
    slot = random() % 10 == 0 ? KeyIndex::kAbsent : it->first;
  }
  const int64_t end = index.slot_end();
  ASSERT_EQ(end, 400);
  const int64_t split = 123;
  index.touch_range(slots, 0, split, 7);
  std::map<int64_t, int64_t> expected = count_of;
  for (const int64_t slot : slots) {
    if (slot != KeyIndex::kAbsent && slot < split) ++expected[slot];
  }
  for (const auto& [slot, count] : expected) {
    ASSERT_EQ(index.count(slot), count) << "slot " << slot;
    ASSERT_EQ(index.last_seen(slot), slot < split && count != count_of[slot] ? 7 : 1);
  }
  index.touch_range(slots, split, end, 7);
  for (const int64_t slot : slots) {
    if (slot != KeyIndex::kAbsent && slot >= split) ++expected[slot];
  }
  for (const auto& [slot, count] : expected) ASSERT_EQ(index.count(slot), count) << "slot " << slot;
}

TEST(KeyIndexTest, MemoryIsBoundedPerSlot) {
  const int64_t capacity = 100000;
  KeyIndex index(capacity);
  // 24 bytes of slot metadata and 64 / 5 * 1.25 of hash table a slot.
  const int64_t empty = capacity * 24 + (capacity + capacity / 4) / 5 * 64;
  EXPECT_EQ(index.memory_bytes(), empty);
  for (int64_t key = 0; key < capacity; ++key) index.insert(key * 977, key / 100, 1);
  // One recency entry of 8 bytes a key (vectors grown by doubling: at most 16), and a list for
  // each of the 1000 steps inserted at.
  const int64_t most = empty + capacity * 16 + 1000 * 128;
  EXPECT_GT(index.memory_bytes(), empty + capacity * 8);
  EXPECT_LE(index.memory_bytes(), most);
  for (int round = 0; round < 5; ++round) {
    for (int64_t key = 0; key < capacity; ++key) {
      index.touch(index.find(key * 977), 1000 + round, 1);
    }
    // Visits every entry: each is re-filed under its key's last_seen, none is copied.
    EXPECT_TRUE(index.expired(1000 + round, kMax).empty());
    EXPECT_LE(index.memory_bytes(), most);
  }
}

// Least-frequent victims come from a pool of the keys that may be smallest (bounded when the
// index holds more keys than the pool): over many steps of sightings, pins, evictions and
// admissions, they are the reference's, and the pool is filled again as it runs out.
TEST(KeyIndexTest, LeastFrequentVictimsFromThePoolMatchTheReference) {
  const int64_t capacity = 8000;
  KeyIndex index(capacity);
  Reference reference;
  std::mt19937_64 random(77);
  const auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(random);
  };
  int64_t step = 0;
  int64_t next_key = -500;
  const auto admit = [&](int64_t count) {
    const int64_t key = next_key;
    next_key += uniform(1, 1000);
    reference.keys[key] = {index.insert(key, step, count), step, count};
  };
  while (index.size() < capacity) admit(uniform(1, 6));
  std::vector<int64_t> held;
  for (int round = 0; round < 200; ++round) {
    ++step;
    held.clear();
    for (const auto& [key, entry] : reference.keys) held.push_back(key);
    for (int t = 0; t < 300; ++t) {  // sightings: counts grow, some past the pool's bound
      auto& entry = reference.keys[held[static_cast<size_t>(uniform(0, std::ssize(held) - 1))]];
      const int64_t occurrences = uniform(0, 3);
      index.touch(entry.slot, step, occurrences);
      entry.last_seen = step;
      entry.count += occurrences;
    }
    const int64_t n = round % 50 == 49 ? uniform(300, 1500) : uniform(1, 60);
    const int64_t pinned_from = step - uniform(0, 2);
    const std::vector<int64_t> victims =
        to_vector(index.choose_victims(EvictionOrder::kLeastFrequent, n, pinned_from));
    ASSERT_EQ(victims, reference.victims(EvictionOrder::kLeastFrequent, n, pinned_from))
        << "round " << round;
    for (const int64_t slot : victims) {
      index.erase(slot);
      reference.erase_slot(slot);
    }
    while (index.size() < capacity) admit(uniform(1, 3));
  }
}

// An index whose recency entries are never scanned (least-frequent eviction, no TTL) still drops
// the dead ones: churning keys through it for many steps keeps its memory bounded.
TEST(KeyIndexTest, RecencyEntriesOfEvictedKeysDoNotAccumulate) {
  const int64_t capacity = 1000;
  KeyIndex index(capacity);
  const int64_t empty = index.memory_bytes();
  int64_t key = 0;
  for (; key < capacity; ++key) index.insert(key, key, 1);
  for (int64_t step = capacity; step < 100 * capacity; ++step, ++key) {
    const std::span<const int64_t> victims =
        index.choose_victims(EvictionOrder::kLeastFrequent, 1, kMax);
    ASSERT_EQ(victims.size(), 1u);
    index.erase(victims[0]);
    index.insert(key, step, 1);  // a step of its own: one list a key, at worst
  }
  EXPECT_EQ(index.size(), capacity);
  // At most 2 * capacity + 64 entries, each in a list of its own (~100 bytes), and the scratch.
  EXPECT_LT(index.memory_bytes(), empty + (2 * capacity + 64) * 160);
}

// Every int64 is a key, the one empty entries hold included; find_all agrees with find.
TEST(KeyIndexTest, FindAllFindsWhatFindFinds) {
  std::mt19937_64 random(7);
  KeyIndex index(300);
  std::vector<int64_t> keys = {0, -1, kMin, 0x5eed0f0e0e0e7e11LL, kMax};
  while (keys.size() < 280) keys.push_back(static_cast<int64_t>(random()));
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i % 3 != 1) index.insert(keys[i], 1, 1);  // a third of them stay absent
  }
  std::vector<int64_t> queries;
  for (int i = 0; i < 5000; ++i) {
    queries.push_back(keys[std::uniform_int_distribution<size_t>(0, keys.size() - 1)(random)]);
  }
  for (const int64_t absent_value : {KeyIndex::kAbsent, int64_t{300}}) {
    std::vector<int64_t> slots(queries.size(), -7);
    index.find_all(queries.data(), std::ssize(queries), slots.data(), absent_value);
    for (size_t j = 0; j < queries.size(); ++j) {
      const int64_t slot = index.find(queries[j]);
      ASSERT_EQ(slots[j], slot == KeyIndex::kAbsent ? absent_value : slot) << queries[j];
    }
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(index.find(keys[i]) != KeyIndex::kAbsent, i % 3 != 1) << keys[i];
  }
  // Erasing the key empty entries hold leaves it absent and the others found.
  index.erase(index.find(0x5eed0f0e0e0e7e11LL));
  EXPECT_EQ(index.find(0x5eed0f0e0e0e7e11LL), KeyIndex::kAbsent);
  EXPECT_NE(index.find(kMin), KeyIndex::kAbsent);
}

TEST(KeyIndexTest, CapacityAboveTheMaximumIsRejected) {
  EXPECT_THROW(KeyIndex(KeyIndex::kMaxCapacity + 1), InvalidArgument);
}

}  // namespace
}  // namespace recemb::internal
