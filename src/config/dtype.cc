// The names of DType and Rounding (recemb/config.h).
#include <span>
#include <string>
#include <string_view>

#include "recemb/config.h"
#include "recemb/error.h"

#include "util/enum_names.h"

namespace recemb {

std::string_view dtype_name(DType value) {
  switch (value) {
    case DType::kFloat32:
      return "float32";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat16:
      return "float16";
  }
  throw InvalidArgument("DType value " + std::to_string(static_cast<int>(value)) +
                        " is not one of kFloat32, kBFloat16, kFloat16");
}

DType parse_dtype(std::string_view name) {
  constexpr DType kValues[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
  return internal::parse_by_name(name, std::span<const DType>(kValues), dtype_name, "dtype");
}

std::string_view rounding_name(Rounding value) {
  switch (value) {
    case Rounding::kStochastic:
      return "stochastic";
    case Rounding::kNearest:
      return "nearest";
  }
  throw InvalidArgument("Rounding value " + std::to_string(static_cast<int>(value)) +
                        " is not one of kStochastic, kNearest");
}

Rounding parse_rounding(std::string_view name) {
  constexpr Rounding kValues[] = {Rounding::kStochastic, Rounding::kNearest};
  return internal::parse_by_name(name, std::span<const Rounding>(kValues), rounding_name,
                                 "rounding");
}

}  // namespace recemb
