#include "kernels/half_precision.h"

#include <algorithm>

// foreach_target.h includes this file again for each target (kernels/simd_target.h): the rules of
// half_precision.h written with Highway's vectors, every case computed and the right one selected
// by masks, so each lane gives the same bits on every target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/half_precision.cc"
#include <hwy/foreach_target.h>  // before highway.h
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace recemb::internal::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The codes below take float32 bits in 32-bit unsigned lanes (DU) and leave the 16-bit code in the
// low half of each lane.

template <class DU>
HWY_INLINE hn::Vec<DU> hash32(DU du, hn::Vec<DU> x) {
  x = hn::Xor(x, hn::ShiftRight<16>(x));
  x = hn::Mul(x, hn::Set(du, 0x7feb352du));
  x = hn::Xor(x, hn::ShiftRight<15>(x));
  x = hn::Mul(x, hn::Set(du, 0x846ca68bu));
  return hn::Xor(x, hn::ShiftRight<16>(x));
}

// The stream's words (half_precision.h) in the lanes.
constexpr uint32_t kRoundingWordStep = 0x9e3779b9u;
template <class DU>
HWY_INLINE hn::Vec<DU> rounding_words(DU du, uint64_t stream, hn::Vec<DU> words) {
  const auto low = hn::Set(du, static_cast<uint32_t>(stream));
  return hash32(du, hn::Add(low, hn::Mul(words, hn::Set(du, kRoundingWordStep))));
}

// Whether the bits are a NaN, whose code is a quiet NaN of its sign.
template <class DU>
HWY_INLINE hn::Mask<DU> is_nan(DU du, hn::Vec<DU> bits) {
  return hn::Gt(hn::And(bits, hn::Set(du, 0x7fffffffu)), hn::Set(du, 0x7f800000u));
}

// bfloat16's `code` for the float32 bits, or a NaN's: a quiet NaN of its sign.
template <class DU>
HWY_INLINE hn::Vec<DU> bfloat16_or_nan(DU du, hn::Vec<DU> bits, hn::Vec<DU> code) {
  const auto nan = hn::Or(hn::ShiftRight<16>(bits), hn::Set(du, 0x0040u));
  return hn::IfThenElse(is_nan(du, bits), nan, code);
}

template <class DU>
HWY_INLINE hn::Vec<DU> bfloat16_nearest(DU du, hn::Vec<DU> bits) {
  const auto odd = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
  return bfloat16_or_nan(du, bits,
                         hn::ShiftRight<16>(hn::Add(hn::Add(bits, hn::Set(du, 0x7fffu)), odd)));
}

// float16, to nearest: NaN and infinity as above, infinity from 65520 on. Below 2^-14 the result
// is subnormal (or zero): adding 0.5, whose ulp is 2^-24 (the binary16 subnormal step), lets the
// FPU round to nearest even, and the code is left in the low mantissa bits. Normal: rebias the
// exponent and round the 23-bit mantissa to 10 bits, ties to even (adding 0xfff plus the lowest
// kept bit carries into it exactly when the dropped bits exceed half, or equal half with an odd
// kept bit; a carry out of the mantissa bumps the exponent); 0xc8000fff is (15 - 127) << 23,
// modulo 2^32, plus 0xfff.
template <class DU>
HWY_INLINE hn::Vec<DU> float16_nearest(DU du, hn::Vec<DU> bits) {
  const hn::Rebind<float, DU> df;
  const auto sign = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 0x8000u));
  const auto magnitude = hn::And(bits, hn::Set(du, 0x7fffffffu));
  const auto odd = hn::And(hn::ShiftRight<13>(magnitude), hn::Set(du, 1u));
  const auto normal =
      hn::ShiftRight<13>(hn::Add(hn::Add(magnitude, hn::Set(du, 0xc8000fffu)), odd));
  const auto shifted = hn::Add(hn::BitCast(df, magnitude), hn::Set(df, 0.5f));
  const auto subnormal = hn::Sub(hn::BitCast(du, shifted), hn::Set(du, 0x3f000000u));
  const auto special = hn::IfThenElse(is_nan(du, bits), hn::Set(du, 0x7e00u), hn::Set(du, 0x7c00u));
  const auto code = hn::IfThenElse(
      hn::Lt(magnitude, hn::Set(du, 0x477ff000u)),
      hn::IfThenElse(hn::Lt(magnitude, hn::Set(du, 0x38800000u)), subnormal, normal), special);
  return hn::Or(sign, code);
}

// Stochastic rounding (half_precision.h): lo is the top half (toward zero, as the sign is apart);
// p * 2^16 = the low half, and u < it exactly when adding 0xffff - u carries into the top half.
// Infinity's low half is 0, so it stays; the largest finite values carry into infinity.
template <class DU>
HWY_INLINE hn::Vec<DU> bfloat16_stochastic(DU du, hn::Vec<DU> bits, hn::Vec<DU> random) {
  return bfloat16_or_nan(du, bits,
                         hn::ShiftRight<16>(hn::Add(bits, hn::Sub(hn::Set(du, 0xffffu), random))));
}

// Normal (2^-14 <= |x| < 65536): rebias the exponent; the 13 dropped mantissa bits are p * 2^13, so
// u < p * 2^16 is u / 8 < them (a carry out of the mantissa bumps the exponent, up to infinity's
// code from 65504). Subnormal (|x| < 2^-14): steps of 2^-24; scaled = |x| 2^24 < 1024 is exact,
// and so are its whole part, its fraction p (an exact float subtraction) and p * 2^16; a larger
// magnitude (not selected) is clamped so that its conversion stays defined. From 65536 on, and
// for infinity: infinity; NaN: a quiet NaN.
template <class DU>
HWY_INLINE hn::Vec<DU> float16_stochastic(DU du, hn::Vec<DU> bits, hn::Vec<DU> random) {
  const hn::Rebind<float, DU> df;
  const hn::Rebind<int32_t, DU> di;
  const auto one = hn::Set(du, 1u);
  const auto sign = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 0x8000u));
  const auto magnitude = hn::And(bits, hn::Set(du, 0x7fffffffu));
  const auto rebased = hn::Sub(magnitude, hn::Set(du, (127u - 15u) << 23));
  const auto normal =
      hn::Add(hn::ShiftRight<13>(rebased),
              hn::IfThenElseZero(
                  hn::Lt(hn::ShiftRight<3>(random), hn::And(rebased, hn::Set(du, 0x1fffu))), one));
  const auto smallest_normal = hn::Set(du, 0x38800000u);
  const auto is_subnormal = hn::Lt(magnitude, smallest_normal);
  const auto scaled =
      hn::Mul(hn::BitCast(df, hn::IfThenElse(is_subnormal, magnitude, smallest_normal)),
              hn::Set(df, 0x1p24f));
  const auto whole = hn::ConvertTo(di, scaled);
  const auto fraction = hn::Sub(scaled, hn::ConvertTo(df, whole));
  const auto up =
      hn::Lt(hn::ConvertTo(df, hn::BitCast(di, random)), hn::Mul(fraction, hn::Set(df, 0x1p16f)));
  const auto subnormal =
      hn::Add(hn::BitCast(du, whole), hn::IfThenElseZero(hn::RebindMask(du, up), one));
  const auto special =
      hn::IfThenElseZero(hn::Gt(magnitude, hn::Set(du, 0x7f800000u)), hn::Set(du, 0x0200u));
  const auto code = hn::IfThenElse(hn::Lt(magnitude, hn::Set(du, 0x47800000u)),
                                   hn::IfThenElse(is_subnormal, subnormal, normal),
                                   hn::Or(special, hn::Set(du, 0x7c00u)));
  return hn::Or(sign, code);
}

// Lanes first, first + 1, ...: the sum of a broadcast and constant lanes (Highway's Iota builds its
// vector in memory a lane at a time, a store-to-load stall on every call).
template <class DU>
HWY_INLINE hn::Vec<DU> counting_from(DU du, uint32_t first) {
  alignas(64) static constexpr uint32_t kLanes[16] = {0, 1, 2,  3,  4,  5,  6,  7,
                                                      8, 9, 10, 11, 12, 13, 14, 15};
  return hn::Add(hn::Set(du, first), hn::LoadU(du, kLanes));
}

// Calls block(d, i) for the lanes of d from value i on, over [begin, end): vectors of `du`, then
// one value at a time.
template <class DU, class Block>
HWY_INLINE void for_each_block(DU du, int64_t begin, int64_t end, Block block) {
  const auto lanes = static_cast<int64_t>(hn::Lanes(du));
  int64_t i = begin;
  for (; i + lanes <= end; i += lanes) block(du, i);
  const hn::CappedTag<uint32_t, 1> d1;
  for (; i < end; ++i) block(d1, i);
}

template <class DU>
HWY_INLINE hn::Vec<DU> load_bits(DU du, const float* in) {
  return hn::LoadU(du, reinterpret_cast<const uint32_t*>(in));
}

// Stores the codes' low halves.
template <class DU>
HWY_INLINE void store_codes(DU /*du*/, hn::Vec<DU> codes, uint16_t* out) {
  const hn::Rebind<uint16_t, DU> d16;
  const hn::Rebind<int32_t, DU> di;
  hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, codes)), d16, out);  // codes < 2^16: exact
}

template <class Code>
HWY_INLINE void encode_nearest(const float* in, int64_t n, uint16_t* out, Code code) {
  for_each_block(hn::ScalableTag<uint32_t>(), 0, n, [&](auto du, int64_t i) {
    store_codes(du, code(du, load_bits(du, in + i)), out + i);
  });
}

template <class Code>
HWY_INLINE void round_with_bits(const float* in, const uint16_t* random, int64_t n, uint16_t* out,
                                Code code) {
  for_each_block(hn::ScalableTag<uint32_t>(), 0, n, [&](auto du, int64_t i) {
    const hn::Rebind<uint16_t, decltype(du)> d16;
    store_codes(du, code(du, load_bits(du, in + i), hn::PromoteTo(du, hn::LoadU(d16, random + i))),
                out + i);
  });
}

// Stochastic rounding with the bits of the stream's columns first_column + i (half_precision.h):
// a whole group of 32 columns takes each word once for its two columns 16 apart; other columns
// compute their own word and half.
template <class Code>
HWY_INLINE void encode_stochastic(const float* in, int64_t n, uint64_t stream, int64_t first_column,
                                  uint16_t* out, Code code) {
  // Vectors of at most 16 lanes, so that one vector's words lie in one group.
  const hn::CappedTag<uint32_t, 16> d;
  const auto lanes = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t begin = 0; begin < n;) {
    const int64_t column = first_column + begin;
    if ((column & 31) == 0 && n - begin >= 32) {
      const auto first_word = static_cast<uint32_t>(column >> 1);
      for (int64_t l = 0; l < 16; l += lanes) {
        const auto words =
            rounding_words(d, stream, counting_from(d, first_word + static_cast<uint32_t>(l)));
        const float* low = in + begin + l;
        const float* high = low + 16;
        store_codes(d, code(d, load_bits(d, low), hn::And(words, hn::Set(d, 0xffffu))),
                    out + begin + l);
        store_codes(d, code(d, load_bits(d, high), hn::ShiftRight<16>(words)),
                    out + begin + l + 16);
      }
      begin += 32;
      continue;
    }
    // Up to the next group's start (or the end).
    const int64_t stop = std::min(n, begin + 32 - (column & 31));
    for_each_block(d, begin, stop, [&](auto du, int64_t i) {
      const auto columns = counting_from(du, static_cast<uint32_t>(first_column + i));
      const auto words =
          hn::Or(hn::ShiftLeft<4>(hn::ShiftRight<5>(columns)), hn::And(columns, hn::Set(du, 15u)));
      // The half chosen by a select: Highway 1.0.3's variable shift of a one-lane vector takes its
      // count from two lanes.
      const auto all_words = rounding_words(du, stream, words);
      const auto sixteen = hn::Set(du, 16u);
      const auto random =
          hn::IfThenElse(hn::Eq(hn::And(columns, sixteen), sixteen), hn::ShiftRight<16>(all_words),
                         hn::And(all_words, hn::Set(du, 0xffffu)));
      store_codes(du, code(du, load_bits(du, in + i), random), out + i);
    });
    begin = stop;
  }
}

const auto kBFloat16Nearest = [](auto du, auto bits) { return bfloat16_nearest(du, bits); };
const auto kFloat16Nearest = [](auto du, auto bits) { return float16_nearest(du, bits); };
const auto kBFloat16Stochastic = [](auto du, auto bits, auto random) {
  return bfloat16_stochastic(du, bits, random);
};
const auto kFloat16Stochastic = [](auto du, auto bits, auto random) {
  return float16_stochastic(du, bits, random);
};

void encode_nearest_rows(DType dtype, const float* in, int64_t n, uint16_t* out) {
  if (dtype == DType::kBFloat16) {
    encode_nearest(in, n, out, kBFloat16Nearest);
  } else {
    encode_nearest(in, n, out, kFloat16Nearest);
  }
}

void round_rows_stochastic(DType dtype, const float* in, const uint16_t* random, int64_t n,
                           uint16_t* out) {
  if (dtype == DType::kBFloat16) {
    round_with_bits(in, random, n, out, kBFloat16Stochastic);
  } else {
    round_with_bits(in, random, n, out, kFloat16Stochastic);
  }
}

void encode_stochastic_rows(DType dtype, const float* in, int64_t n, uint64_t stream,
                            int64_t first_column, uint16_t* out) {
  if (dtype == DType::kBFloat16) {
    encode_stochastic(in, n, stream, first_column, out, kBFloat16Stochastic);
  } else {
    encode_stochastic(in, n, stream, first_column, out, kFloat16Stochastic);
  }
}

}  // namespace recemb::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace recemb::internal {

HWY_EXPORT(encode_nearest_rows);
HWY_EXPORT(round_rows_stochastic);
HWY_EXPORT(encode_stochastic_rows);

void encode_half_values_nearest(DType dtype, const float* in, int64_t n, uint16_t* out) {
  HWY_DYNAMIC_DISPATCH(encode_nearest_rows)(dtype, in, n, out);
}

void round_half_values_stochastic(DType dtype, const float* in, const uint16_t* random, int64_t n,
                                  uint16_t* out) {
  HWY_DYNAMIC_DISPATCH(round_rows_stochastic)(dtype, in, random, n, out);
}

void encode_half_values_stochastic(DType dtype, const float* in, int64_t n, uint64_t stream,
                                   int64_t first_column, uint16_t* out) {
  HWY_DYNAMIC_DISPATCH(encode_stochastic_rows)(dtype, in, n, stream, first_column, out);
}

}  // namespace recemb::internal
#endif  // HWY_ONCE
