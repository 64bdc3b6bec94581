#include "train/data/synthetic_criteo.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>

#include "recemb/error.h"

#include "dlrm/criteo_profile.h"
#include "dlrm/splitmix.h"

namespace recemb::train {
namespace {

// Keys of the independent streams derived from the seed (ASCII "model", "train", "eval"): the
// planted model is shared by both splits, the examples are not.
constexpr uint64_t kModelSalt = 0x6d6f64656cULL;
constexpr uint64_t kTrainSalt = 0x747261696eULL;
constexpr uint64_t kEvalSalt = 0x6576616cULL;

constexpr uint64_t kItemSalt = 0x6974656d73ULL;  // "items": the open vocabulary's keys

constexpr std::string_view kPositionPrefix = "synthetic:";

// The odd multiplier that scrambles item numbers into keys, and its inverse modulo 2^64 (Newton's
// iteration x <- x (2 - a x) doubles the correct low bits: 5 steps from a, right to 3 bits, give
// 96 > 64).
constexpr uint64_t kKeyMultiplier = dlrm::kGoldenGamma;
constexpr uint64_t inverse_modulo_2_64(uint64_t a) {
  uint64_t x = a;
  for (int i = 0; i < 5; ++i) x *= 2 - a * x;
  return x;
}
constexpr uint64_t kKeyMultiplierInverse = inverse_modulo_2_64(kKeyMultiplier);
static_assert(kKeyMultiplier * kKeyMultiplierInverse == 1);

// 2 * (top 53 bits of x) / 2^53 - 1: uniform in [-1, 1).
double signed_unit(uint64_t x) { return 2.0 * static_cast<double>(x >> 11) * 0x1.0p-53 - 1.0; }

// u_f(id): the planted weight of id `id` of a feature with key `weight_key`.
double categorical_weight(uint64_t weight_key, int64_t id) {
  return SyntheticCriteo::kCategoricalWeight *
         signed_unit(dlrm::splitmix64_mix(weight_key ^ static_cast<uint64_t>(id)));
}

// E[log(1 + c)] for c geometric on {0, 1, ...} with mean `mean`, summed until the terms left
// weigh less than 1e-15 of the first.
double mean_log1p_geometric(double mean) {
  const double p = 1.0 / (1.0 + mean);
  double sum = 0.0;
  double probability = p;  // P(c)
  for (int64_t c = 1; probability > 1e-15 * p; ++c) {
    probability *= 1.0 - p;
    sum += probability * std::log1p(static_cast<double>(c));
  }
  return sum;
}

// sum_{k = first..last} k^-s, approximated by the integral of x^-s over [first - 1/2, last + 1/2]
// (the midpoint rule; relative error below 1e-9 for first > 2^16).
double zipf_tail_mass(int64_t first, int64_t last, double s) {
  if (first > last) return 0.0;
  const double a = static_cast<double>(first) - 0.5, b = static_cast<double>(last) + 0.5;
  if (std::abs(1.0 - s) < 1e-12) return std::log(b / a);
  return (std::pow(b, 1.0 - s) - std::pow(a, 1.0 - s)) / (1.0 - s);
}

// (a * b + c) mod n without overflow for any a, b, c < n.
int64_t multiply_add_mod(int64_t a, int64_t b, int64_t c, int64_t n) {
  __extension__ using Wide = unsigned __int128;
  return static_cast<int64_t>((static_cast<Wide>(a) * static_cast<Wide>(b) + static_cast<Wide>(c)) %
                              static_cast<Wide>(n));
}

}  // namespace

SyntheticCriteo::SyntheticCriteo(SyntheticOptions options) : options_(std::move(options)) {
  dlrm::validate_vocabulary_sizes(options_.vocabulary_sizes, "SyntheticCriteo");
  if (!std::isfinite(options_.zipf_alpha) || options_.zipf_alpha <= 0.0) {
    throw InvalidArgument("SyntheticCriteo: zipf_alpha is " + std::to_string(options_.zipf_alpha) +
                          ", must be finite and > 0");
  }
  if (options_.item_lifetime < 1) {
    throw InvalidArgument("SyntheticCriteo: item_lifetime is " +
                          std::to_string(options_.item_lifetime) + ", must be >= 1");
  }
  if (options_.num_examples.has_value() && *options_.num_examples < 0) {
    throw InvalidArgument("SyntheticCriteo: num_examples is " +
                          std::to_string(*options_.num_examples) + ", must be >= 0");
  }
  stream_key_ = dlrm::splitmix64_mix(
      options_.seed ^ (options_.split == SyntheticSplit::kTrain ? kTrainSalt : kEvalSalt));
  dlrm::SplitMix64 model(dlrm::splitmix64_mix(options_.seed ^ kModelSalt));
  for (size_t j = 0; j < dlrm::kNumDenseFeatures; ++j) {
    dense_weights_[j] = kDenseWeight * signed_unit(model.next());
    dense_means_[j] = mean_log1p_geometric(kDenseMeans[j]);
    log_continue_[j] = std::log1p(-1.0 / (1.0 + kDenseMeans[j]));
  }
  features_.reserve(dlrm::kNumCategoricalFeatures);
  for (int f = 0; f < dlrm::kNumCategoricalFeatures; ++f) {
    const int64_t size = options_.vocabulary_sizes[static_cast<size_t>(f)];
    const auto n = static_cast<uint64_t>(size);
    // A multiplier coprime to n makes r -> a * r + b a permutation of [0, n); coprimes are dense
    // enough that the search takes a few steps.
    auto multiplier = static_cast<int64_t>(model.next() % n);
    while (std::gcd(multiplier, size) != 1) multiplier = (multiplier + 1) % size;
    Feature feature{
        .ranks = ZipfSampler(size, options_.zipf_alpha),
        .multiplier = multiplier,
        .offset = static_cast<int64_t>(model.next() % n),
        .weight_key = model.next(),
        .weight_mean = 0.0,
        // Not from `model`: the hashed ids' model stays what it was before keys.
        .item_salt = dlrm::splitmix64_mix(dlrm::splitmix64_mix(options_.seed ^ kItemSalt) +
                                          static_cast<uint64_t>(f))};
    if (carries_signal(f)) {
      // E[u_f] under the Zipf law, exact over the head; the tail ids' weights, independent and of
      // mean 0, add nothing in expectation (and very little in fact: they are many).
      const int64_t head = std::min(size, kMeanRanks);
      double weighted_sum = 0.0, head_mass = 0.0;
      for (int64_t rank = head; rank >= 1; --rank) {
        const double mass = std::pow(static_cast<double>(rank), -options_.zipf_alpha);
        weighted_sum += mass * categorical_weight(feature.weight_key, id_of_rank(feature, rank));
        head_mass += mass;
      }
      feature.weight_mean =
          weighted_sum / (head_mass + zipf_tail_mass(head + 1, size, options_.zipf_alpha));
    }
    features_.push_back(feature);
  }
}

int64_t SyntheticCriteo::id_of_rank(const Feature& feature, int64_t rank) {
  return multiply_add_mod(feature.multiplier, rank - 1, feature.offset,
                          feature.ranks.num_elements());
}

int64_t SyntheticCriteo::key_of_slot(const Feature& feature, int64_t slot, int64_t time) const {
  const auto lifetime = static_cast<uint64_t>(options_.item_lifetime);
  const uint64_t phase =
      dlrm::splitmix64_mix(feature.item_salt ^ static_cast<uint64_t>(slot)) % lifetime;
  const uint64_t generation = (static_cast<uint64_t>(time) + phase) / lifetime;
  const uint64_t item = static_cast<uint64_t>(slot) +
                        static_cast<uint64_t>(feature.ranks.num_elements()) * generation;
  return static_cast<int64_t>((item * kKeyMultiplier) ^ feature.item_salt);
}

int64_t SyntheticCriteo::slot_of_key(const Feature& feature, int64_t key) {
  const uint64_t item = (static_cast<uint64_t>(key) ^ feature.item_salt) * kKeyMultiplierInverse;
  return static_cast<int64_t>(item % static_cast<uint64_t>(feature.ranks.num_elements()));
}

void SyntheticCriteo::set_vocabulary_time(std::optional<int64_t> time) {
  if (time.has_value() && *time < 0) {
    throw InvalidArgument("SyntheticCriteo::set_vocabulary_time: " + std::to_string(*time) +
                          ", must be >= 0");
  }
  vocabulary_time_ = time;
}

int64_t SyntheticCriteo::next(dlrm::ExampleBatch& batch, int64_t max_examples) {
  dlrm::begin_batch(batch, max_examples);
  const int64_t count = options_.num_examples.has_value()
                            ? std::min(max_examples, *options_.num_examples - index_)
                            : max_examples;
  const auto stride = static_cast<size_t>(max_examples);
  for (int64_t k = 0; k < count; ++k) {
    const auto i = static_cast<size_t>(k);
    dlrm::SplitMix64 random(dlrm::splitmix64_mix(
        stream_key_ + dlrm::splitmix64_mix(static_cast<uint64_t>(index_ + k))));
    float* dense = batch.dense.data() + i * dlrm::kNumDenseFeatures;
    for (size_t j = 0; j < dlrm::kNumDenseFeatures; ++j) {
      // Inversion of the geometric distribution P(c) = p (1 - p)^c, p = 1 / (1 + mean); the
      // uniform is taken from (0, 1] so that the logarithm is finite.
      const double c = std::floor(std::log(1.0 - random.uniform()) / log_continue_[j]);
      dense[j] = dlrm::dense_value(static_cast<int64_t>(c));
    }
    int64_t* ids = batch.categorical.data() + i;
    const int64_t time = vocabulary_time_.value_or(index_ + k);
    for (size_t f = 0; f < dlrm::kNumCategoricalFeatures; ++f) {
      const Feature& feature = features_[f];
      const int64_t slot = id_of_rank(feature, feature.ranks.sample(random));
      ids[f * stride] =
          options_.ids == dlrm::CategoricalIds::kRawKeys ? key_of_slot(feature, slot, time) : slot;
    }
    const double click_probability = 1.0 / (1.0 + std::exp(-logit(dense, ids, stride)));
    batch.labels[i] = random.uniform() < click_probability ? 1.0f : 0.0f;
  }
  index_ += count;
  dlrm::finish_batch(batch, max_examples, count);
  return count;
}

double SyntheticCriteo::logit(const float* dense, const int64_t* ids, size_t stride) const {
  double z = kBias;
  for (size_t j = 0; j < dlrm::kNumDenseFeatures; ++j) {
    z += dense_weights_[j] * (static_cast<double>(dense[j]) - dense_means_[j]);
  }
  for (int f = 0; f < dlrm::kNumCategoricalFeatures; ++f) {
    if (!carries_signal(f)) continue;
    const Feature& feature = features_[static_cast<size_t>(f)];
    const int64_t id = ids[static_cast<size_t>(f) * stride];
    const int64_t slot =
        options_.ids == dlrm::CategoricalIds::kRawKeys ? slot_of_key(feature, id) : id;
    z += categorical_weight(feature.weight_key, slot) - feature.weight_mean;
  }
  return z;
}

double SyntheticCriteo::logit(const dlrm::ExampleBatch& batch, int64_t example) const {
  const auto i = static_cast<size_t>(example);
  return logit(batch.dense.data() + i * dlrm::kNumDenseFeatures, batch.categorical.data() + i,
               static_cast<size_t>(batch.size));
}

std::string SyntheticCriteo::position() const {
  return std::string(kPositionPrefix) + std::to_string(index_);
}

void SyntheticCriteo::seek(std::string_view position) {
  int64_t index = -1;
  const bool parsed = position.starts_with(kPositionPrefix) && [&] {
    const char* first = position.data() + kPositionPrefix.size();
    const char* last = position.data() + position.size();
    const auto [end, error] = std::from_chars(first, last, index);
    return error == std::errc() && end == last && first != last && *first != '-';
  }();
  if (!parsed) {
    throw InvalidArgument("SyntheticCriteo::seek: malformed position '" + std::string(position) +
                          "', expected synthetic:<example index>");
  }
  if (options_.num_examples.has_value() && index > *options_.num_examples) {
    throw InvalidArgument("SyntheticCriteo::seek: position '" + std::string(position) +
                          "' is past the " + std::to_string(*options_.num_examples) +
                          " examples of this data set");
  }
  index_ = index;
}

}  // namespace recemb::train
