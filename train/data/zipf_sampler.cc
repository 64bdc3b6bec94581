#include "train/data/zipf_sampler.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "recemb/error.h"

namespace recemb::train {
namespace {

// log1p(x) / x and expm1(x) / x, continued to x = 0 by their Taylor series (so that H and its
// inverse stay accurate for s close to 1, where 1 - s multiplies log x).
double log1p_over_x(double x) {
  if (std::abs(x) > 1e-8) return std::log1p(x) / x;
  return 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}

double expm1_over_x(double x) {
  if (std::abs(x) > 1e-8) return std::expm1(x) / x;
  return 1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x));
}

}  // namespace

ZipfSampler::ZipfSampler(int64_t num_elements, double exponent)
    : num_elements_(num_elements), exponent_(exponent) {
  if (num_elements < 1) {
    throw InvalidArgument("ZipfSampler: num_elements is " + std::to_string(num_elements) +
                          ", must be >= 1");
  }
  if (!std::isfinite(exponent) || exponent <= 0.0) {
    throw InvalidArgument("ZipfSampler: exponent is " + std::to_string(exponent) +
                          ", must be finite and > 0");
  }
  integral_x1_ = integral_h(1.5) - 1.0;
  integral_n_ = integral_h(static_cast<double>(num_elements) + 0.5);
  squeeze_ = 2.0 - integral_h_inverse(integral_h(2.5) - h(2.0));
}

double ZipfSampler::h(double x) const { return std::exp(-exponent_ * std::log(x)); }

double ZipfSampler::integral_h(double x) const {
  const double log_x = std::log(x);
  return expm1_over_x((1.0 - exponent_) * log_x) * log_x;
}

double ZipfSampler::integral_h_inverse(double y) const {
  // t >= -1 holds in exact arithmetic for every y in (H(3/2) - 1, H(n + 1/2)]; the clamp keeps a
  // rounding error from taking log1p outside its domain.
  const double t = std::max(y * (1.0 - exponent_), -1.0);
  return std::exp(log1p_over_x(t) * y);
}

int64_t ZipfSampler::sample(dlrm::SplitMix64& random) const {
  for (;;) {
    const double u = integral_n_ + random.uniform() * (integral_x1_ - integral_n_);
    const double x = integral_h_inverse(u);
    const auto k = std::clamp(static_cast<int64_t>(x + 0.5), int64_t{1}, num_elements_);
    const auto k_double = static_cast<double>(k);
    if (k_double - x <= squeeze_ || u >= integral_h(k_double + 0.5) - h(k_double)) return k;
  }
}

}  // namespace recemb::train
