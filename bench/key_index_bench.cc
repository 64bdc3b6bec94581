// Speed and memory of the dynamic table's key index (src/storage/key_index.h): KeyIndex::find of
// keys in random order, against a plain array read of the same slots (what a static table pays
// to turn an id into a row: nothing but the row itself, here an 8-byte entry per slot).
//
//   BM_Find/<keys>                  find() of present keys, one after another.
//   BM_FindAll/<keys>               find_all() of the same keys: the lookup's path (pipelined
//                                   hashing and prefetching).
//   BM_FindAbsent/<keys>            find() of keys that are not held (a zero row in a lookup).
//   BM_FindAllAbsent/<keys>         find_all() of those keys.
//   BM_ArrayRead/<keys>             array[slot] for the slots those keys hold.
//   BM_ArrayReadPrefetched/<keys>   the same with the line prefetched kPrefetchAhead ahead.
//
// Each index holds <keys> random 64-bit keys at full capacity (its hash table 80% full: the
// longest probes), inserted in random order, then churned: each key erased and replaced by a new
// one, as eviction at full capacity does. Counters: Mfinds/s, bytes/key (memory_bytes() /
// keys: hash table, slot metadata and recency FIFO). Sizes: 1e6 keys (70 MB), and 1e7 (0.7 GB)
// with RECEMB_BENCH_LARGE=1; RECEMB_BENCH_KEYS=1e6,1e8 sets others.
#include <algorithm>
#include <benchmark/benchmark.h>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "benchmark_main.h"
#include "kernels/prefetch.h"
#include "storage/key_index.h"
#include "workload.h"

namespace {

using recemb::internal::KeyIndex;

// As far ahead as the update kernels prefetch rows.
constexpr int64_t kPrefetchAhead = recemb::internal::kPrefetchDistance;
constexpr size_t kQueries = size_t{1} << 20;  // per pass; the index is far larger than the caches

struct Fixture {
  std::unique_ptr<KeyIndex> index;
  std::vector<int64_t> present;  // kQueries held keys, random order
  std::vector<int64_t> absent;   // kQueries keys not held
  std::vector<int64_t> slots;    // the slots of `present`
  std::vector<int64_t> array;    // one entry per slot: the static table's read
};

enum class Queries { kPresent, kAbsent };
enum class Prefetch { kNone, kAhead };

// One index alive at a time: the benchmarks of one size are registered together.
const Fixture& fixture(int64_t keys) {
  static int64_t built_keys = -1;
  static Fixture fixture;
  if (built_keys == keys) return fixture;
  fixture = Fixture{};
  built_keys = keys;
  std::mt19937_64 random(static_cast<uint64_t>(keys));
  std::vector<int64_t> held(static_cast<size_t>(keys));
  for (int64_t& key : held) key = static_cast<int64_t>(random());
  std::sort(held.begin(), held.end());
  held.erase(std::unique(held.begin(), held.end()), held.end());
  std::shuffle(held.begin(), held.end(), random);
  fixture.index = std::make_unique<KeyIndex>(static_cast<int64_t>(held.size()));
  for (const int64_t key : held) fixture.index->insert(key, 0, 1);
  // Churn, as eviction at full capacity does: as many erase-and-insert of random keys as keys.
  for (int64_t& key : held) {
    fixture.index->erase(fixture.index->find(key));
    do {
      key = static_cast<int64_t>(random());
    } while (fixture.index->find(key) != KeyIndex::kAbsent);
    fixture.index->insert(key, 0, 1);
  }
  std::uniform_int_distribution<size_t> pick(0, held.size() - 1);
  for (size_t i = 0; i < kQueries; ++i) {
    fixture.present.push_back(held[pick(random)]);
    fixture.slots.push_back(fixture.index->find(fixture.present.back()));
    int64_t key = static_cast<int64_t>(random());
    while (fixture.index->find(key) != KeyIndex::kAbsent) key = static_cast<int64_t>(random());
    fixture.absent.push_back(key);
  }
  fixture.array.resize(held.size());
  std::iota(fixture.array.begin(), fixture.array.end(), int64_t{0});
  return fixture;
}

void set_counters(benchmark::State& state, const Fixture& fixture) {
  const auto finds = static_cast<double>(state.iterations()) * static_cast<double>(kQueries);
  state.counters["Mfinds/s"] = benchmark::Counter(finds / 1e6, benchmark::Counter::kIsRate);
  state.counters["bytes/key"] = static_cast<double>(fixture.index->memory_bytes()) /
                                static_cast<double>(fixture.index->size());
}

void find_keys(benchmark::State& state, int64_t keys, Queries kind, Prefetch prefetch) {
  const Fixture& fixture = ::fixture(keys);
  const KeyIndex& index = *fixture.index;
  const std::vector<int64_t>& queries = kind == Queries::kAbsent ? fixture.absent : fixture.present;
  const auto n = static_cast<int64_t>(queries.size());
  std::vector<int64_t> slots(queries.size());
  for (auto _ : state) {
    if (prefetch == Prefetch::kAhead) {
      index.find_all(queries.data(), n, slots.data(), -1);
      benchmark::DoNotOptimize(slots.data());
      continue;
    }
    int64_t sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += index.find(queries[i]);
    benchmark::DoNotOptimize(sum);
  }
  set_counters(state, fixture);
}

void read_array(benchmark::State& state, int64_t keys, Prefetch prefetch) {
  const Fixture& fixture = ::fixture(keys);
  const std::vector<int64_t>& slots = fixture.slots;
  const int64_t* array = fixture.array.data();
  const auto n = static_cast<int64_t>(slots.size());
  for (auto _ : state) {
    int64_t sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (prefetch == Prefetch::kAhead && i + kPrefetchAhead < n) {
        recemb::internal::prefetch_line(array + slots[i + kPrefetchAhead]);
      }
      sum += array[slots[i]];
    }
    benchmark::DoNotOptimize(sum);
  }
  set_counters(state, fixture);
}

std::vector<int64_t> key_counts() {
  const std::string text = recemb_bench::env_string("RECEMB_BENCH_KEYS");
  if (text.empty()) {
    if (recemb_bench::env_flag("RECEMB_BENCH_LARGE")) return {1000000, 10000000};
    return {1000000};
  }
  std::vector<int64_t> counts;
  std::stringstream list(text);
  std::string item;
  while (std::getline(list, item, ',')) {
    if (!item.empty()) counts.push_back(recemb_bench::parse_count(item));
  }
  return counts;
}

void register_benchmarks() {
  for (const int64_t keys : key_counts()) {
    const std::string size = "/" + std::to_string(keys);
    const auto add = [](const std::string& name, auto... arguments) {
      benchmark::RegisterBenchmark(name.c_str(), arguments...)->Unit(benchmark::kMillisecond);
    };
    add("BM_Find" + size, find_keys, keys, Queries::kPresent, Prefetch::kNone);
    add("BM_FindAll" + size, find_keys, keys, Queries::kPresent, Prefetch::kAhead);
    add("BM_FindAbsent" + size, find_keys, keys, Queries::kAbsent, Prefetch::kNone);
    add("BM_FindAllAbsent" + size, find_keys, keys, Queries::kAbsent, Prefetch::kAhead);
    add("BM_ArrayRead" + size, read_array, keys, Prefetch::kNone);
    add("BM_ArrayReadPrefetched" + size, read_array, keys, Prefetch::kAhead);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return recemb_bench::run_benchmarks(argc, argv, register_benchmarks);
}
