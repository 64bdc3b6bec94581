// The library and the float64 reference (tests/reference/) stepped together: the same lookups and
// gradients go into both, and every activation and variable is compared within a stated tolerance.
#ifndef RECEMB_TESTS_TESTING_REFERENCE_STEPS_H_
#define RECEMB_TESTS_TESTING_REFERENCE_STEPS_H_

#include <gtest/gtest.h>
#include <random>
#include <span>
#include <vector>

#include "recemb/embedding.h"

#include "reference/reference_embedding.h"
#include "testing/random_batches.h"

namespace recemb::test {

// Tolerance of float32 results against the float64 reference: |a - b| <= 1e-5 * max(1, |b|).
// Relative 1e-5 for values >= 1; below 1 this becomes an absolute floor of 1e-5. The floor is
// needed because the library's errors are relative to the magnitudes that went *into* a value,
// not to the value: a row or activation near 0 is typically a difference of O(0.1..1) terms
// (w - lr * g, sums of mixed-sign weights, FTRL's z), each rounded at float32's unit roundoff
// 6e-8, and these errors random-walk over the 100 steps. Measured worst case over all the
// parameterized runs: 4.7e-6, in FTRL's "linears", where (n'^p - n^p) / lr * w amplifies float32
// cancellation by 1/lr = 10 (activations and parameters stay below 3.5e-6). All tables, slots and
// activations here are O(0.01..10), so 1e-5 is still ~100x smaller than one optimizer step
// (lr * g >= ~1e-3): dropping weight decay, clipping, bias correction, Nesterov, FTRL's beta, the
// zero-sum rule or the no-accumulation order each fails dozens of these tests.
inline constexpr double kTolerance = 1e-5;

// Success when `actual` has the size of `expected` and every value is within `tolerance` (scaled
// as kTolerance); otherwise the number of mismatches, the first and the worst.
::testing::AssertionResult near_reference(std::span<const float> actual,
                                          std::span<const double> expected,
                                          double tolerance = kTolerance);

// Expects the step, the skipped-row count and every variable of every table of `layer` to match
// `reference`.
void expect_matches_reference(const Embedding& layer,
                              const reference::ReferenceEmbedding& reference,
                              double tolerance = kTolerance);

// One training lookup recorded in both: the library's LookupBatch and the reference's Batch.
struct BatchPair {
  LookupBatch layer;
  reference::ReferenceEmbedding::Batch reference;
};

// Looks `inputs` up in both, a training lookup into `batch` or (null) a pure lookup; checks shapes
// and activations; returns the library's activations.
std::vector<std::vector<float>> lookup_both(Embedding& layer,
                                            reference::ReferenceEmbedding& reference,
                                            const std::vector<OwnedInput>& inputs,
                                            BatchPair* batch);

// A training lookup into `batch`.
std::vector<std::vector<float>> lookup_both(Embedding& layer,
                                            reference::ReferenceEmbedding& reference,
                                            const std::vector<OwnedInput>& inputs,
                                            BatchPair& batch);

// A pure lookup.
std::vector<std::vector<float>> lookup_both(Embedding& layer,
                                            reference::ReferenceEmbedding& reference,
                                            const std::vector<OwnedInput>& inputs);

// Applies `gradients` to `batch` in both; expects the library's batch to be spent afterwards.
void apply_both(Embedding& layer, reference::ReferenceEmbedding& reference, BatchPair& batch,
                const std::vector<std::vector<float>>& gradients);

// Random gradients shaped as the activations (never zero); sometimes one feature gets an empty
// span (= zeros, rows still touched).
std::vector<std::vector<float>> random_gradients(std::mt19937_64& rng,
                                                 const std::vector<std::vector<float>>& shapes);

}  // namespace recemb::test

#endif  // RECEMB_TESTS_TESTING_REFERENCE_STEPS_H_
