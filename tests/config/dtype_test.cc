#include <gtest/gtest.h>

#include "recemb/config.h"
#include "recemb/error.h"

namespace recemb {
namespace {

TEST(DType, NamesRoundTrip) {
  for (const DType value : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    EXPECT_EQ(parse_dtype(dtype_name(value)), value);
  }
  EXPECT_EQ(dtype_name(DType::kFloat32), "float32");
  EXPECT_EQ(dtype_name(DType::kBFloat16), "bfloat16");
  EXPECT_EQ(dtype_name(DType::kFloat16), "float16");
}

TEST(DType, UnknownNameListsTheValidOnes) {
  try {
    parse_dtype("float64");
    FAIL() << "no throw";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(),
                 "unknown dtype 'float64'; valid names are 'float32', 'bfloat16', 'float16'");
  }
  EXPECT_THROW(dtype_name(static_cast<DType>(7)), InvalidArgument);
}

TEST(Rounding, NamesRoundTrip) {
  for (const Rounding value : {Rounding::kStochastic, Rounding::kNearest}) {
    EXPECT_EQ(parse_rounding(rounding_name(value)), value);
  }
  EXPECT_EQ(rounding_name(Rounding::kStochastic), "stochastic");
  EXPECT_EQ(rounding_name(Rounding::kNearest), "nearest");
  EXPECT_THROW(parse_rounding("down"), InvalidArgument);
  EXPECT_THROW(rounding_name(static_cast<Rounding>(9)), InvalidArgument);
}

}  // namespace
}  // namespace recemb
