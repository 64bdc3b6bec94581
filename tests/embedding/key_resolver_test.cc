// KeyResolver (embedding/key_resolver.h) against DynamicPart's own calls made one by one, in the
// order its header gives: the same slots, keys, rows and change logs, on random runs of keys over
// several parts; a refusal on one part changes no part.
#include "embedding/key_resolver.h"

#include <cstdint>
#include <gtest/gtest.h>
#include <random>
#include <vector>

#include "recemb/communicator.h"
#include "recemb/error.h"

#include "optimizers/slot_spec.h"

namespace recemb::internal {
namespace {

constexpr int64_t kDim = 3;

std::vector<TableState> make_states(int64_t capacity, int64_t min_count) {
  std::vector<TableState> states;
  for (int p = 0; p < 3; ++p) {
    const TableConfig table{.name = "t" + std::to_string(p),
                            .dim = kDim,
                            .initializer = TruncatedNormal{},
                            .dynamic_vocabulary = DynamicVocabulary{
                                .capacity = capacity, .min_count = min_count, .ttl_steps = {}}};
    states.emplace_back(table,
                        TablePart{.table = static_cast<size_t>(p),
                                  .rows = capacity,
                                  .num_columns = kDim,
                                  .whole = true,
                                  .keyed = true},
                        Adagrad{}, 7 + static_cast<uint64_t>(p));
    states.back().changes().start(states.back().rows());
  }
  return states;
}

// Random keys for each part: two runs each, some keys repeated.
std::vector<std::vector<std::vector<int64_t>>> random_keys(std::mt19937_64& rng) {
  std::vector<std::vector<std::vector<int64_t>>> keys(3);
  for (auto& part : keys) {
    for (int run = 0; run < 2; ++run) {
      std::vector<int64_t>& ids = part.emplace_back();
      for (uint64_t n = 1 + rng() % 5; n > 0; --n)
        ids.push_back(static_cast<int64_t>(rng() % 30) - 15);
    }
  }
  return keys;
}

TEST(KeyResolverTest, ResolvesAsDynamicPartsProtocolStepByStep) {
  const std::shared_ptr<Communicator> alone = local_communicator();
  support::ThreadPool pool(2);
  std::mt19937_64 rng(29);
  std::vector<TableState> resolved = make_states(10, 2);
  std::vector<TableState> reference = make_states(10, 2);
  KeyResolver resolver;
  for (int64_t step = 1; step <= 20; ++step) {
    const auto keys = random_keys(rng);
    std::vector<std::vector<std::vector<int64_t>>> slots(3), expected(3);
    std::vector<std::vector<KeyRun>> reference_runs(3);
    resolver.begin(3);
    for (size_t p = 0; p < 3; ++p) {
      for (const std::vector<int64_t>& run : keys[p]) {
        std::vector<int64_t>& out = slots[p].emplace_back(run.size(), -9);
        resolver.add_run(p, {.keys = run.data(), .size = std::ssize(run), .slots = out.data()});
        std::vector<int64_t>& ref = expected[p].emplace_back(run.size(), -9);
        reference_runs[p].push_back(
            {.keys = run.data(), .size = std::ssize(run), .slots = ref.data()});
      }
    }
    const bool training = step % 4 != 0;  // every fourth a pure lookup
    resolver.find(resolved, !training, pool);
    if (training) resolver.admit(resolved, step, step, *alone, pool);
    for (size_t p = 0; p < 3; ++p) {
      DynamicPart& dynamic = *reference[p].dynamic();
      for (const KeyRun& run : reference_runs[p]) {
        dynamic.find(run, 0, run.size, training ? KeyIndex::kAbsent : dynamic.zero_row());
      }
      if (!training) continue;
      dynamic.plan(reference_runs[p], step, step);
      dynamic.touch_present(reference_runs[p], step, 0, 1);
      dynamic.commit(reference_runs[p], step, reference[p].changes());
      dynamic.initialize_admitted(reference[p].training_storage(), reference[p].changes(), 0, 1);
    }
    for (size_t p = 0; p < 3; ++p) {
      ASSERT_EQ(slots[p], expected[p]) << "step " << step << " part " << p;
      const TableStorage& a = resolved[p].storage();
      const TableStorage& b = reference[p].storage();
      ASSERT_EQ(std::vector<float>(a.row(0), a.row(0) + a.num_rows() * kDim),
                std::vector<float>(b.row(0), b.row(0) + b.num_rows() * kDim));
      const auto log = [](const TableState& s) {
        return std::pair(std::vector<uint8_t>(s.changes().changed_rows().begin(),
                                              s.changes().changed_rows().end()),
                         std::vector<int64_t>(s.changes().removed_keys().begin(),
                                              s.changes().removed_keys().end()));
      };
      ASSERT_EQ(log(resolved[p]), log(reference[p]));
    }
  }
  // The runs admitted keys and, the parts being full, evicted others.
  for (const TableState& state : resolved) {
    EXPECT_GT(state.dynamic()->counters().inserted, 0);
    EXPECT_GT(state.dynamic()->counters().evicted, 0);
  }
}

// A part that must refuse (more distinct keys than it holds) makes admit throw before any part
// changed: the parts' keys stay as they were.
TEST(KeyResolverTest, ARefusalChangesNoPart) {
  const std::shared_ptr<Communicator> alone = local_communicator();
  support::ThreadPool pool(2);
  std::vector<TableState> states = make_states(2, 1);
  const std::vector<int64_t> fits = {1, 2};
  const std::vector<int64_t> too_many = {1, 2, 3};
  std::vector<int64_t> slots_a(2), slots_b(3);
  KeyResolver resolver;
  resolver.begin(3);
  resolver.add_run(0, {.keys = fits.data(), .size = 2, .slots = slots_a.data()});
  resolver.add_run(1, {.keys = too_many.data(), .size = 3, .slots = slots_b.data()});
  resolver.find(states, false, pool);
  EXPECT_THROW(resolver.admit(states, 1, 1, *alone, pool), FailedPrecondition);
  for (const TableState& state : states) EXPECT_EQ(state.dynamic()->index().size(), 0);
}

}  // namespace
}  // namespace recemb::internal
