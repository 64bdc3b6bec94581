// The dense layers' instruction set: the sets found against the CPU's own feature flags, the
// default is the widest unless RECEMB_DENSE_ISA asks for another, and a set the CPU lacks or an
// unknown name is refused, naming what the CPU has.
#include "dlrm/dense_isa.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <initializer_list>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "recemb/error.h"

namespace recemb::dlrm {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

// The sets this CPU runs by the feature flags Linux lists in /proc/cpuinfo: a second reading of
// what supported_dense_isas() asks the CPU.
std::vector<DenseIsa> sets_by_cpu_flags() {
  std::vector<DenseIsa> sets = {DenseIsa::kBaseline};
#if defined(__x86_64__)
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line) && line.rfind("flags", 0) != 0) {
  }
  std::set<std::string> flags;
  std::istringstream words(line);
  for (std::string word; words >> word;) flags.insert(word);
  const auto has = [&](std::initializer_list<const char*> names) {
    return std::all_of(names.begin(), names.end(),
                       [&](const char* name) { return flags.count(name) != 0; });
  };
  if (has({"avx2", "fma"})) sets.push_back(DenseIsa::kAvx2);
  if (has({"avx2", "fma", "avx512f", "avx512vl", "avx512dq", "avx512bw"})) {
    sets.push_back(DenseIsa::kAvx512);
  }
#endif
  return sets;
}

// Sets RECEMB_DENSE_ISA for the scope of a test, unsetting it after.
class ScopedDenseIsaVariable {
 public:
  explicit ScopedDenseIsaVariable(const char* value) { setenv("RECEMB_DENSE_ISA", value, 1); }
  ~ScopedDenseIsaVariable() { unsetenv("RECEMB_DENSE_ISA"); }
  ScopedDenseIsaVariable(const ScopedDenseIsaVariable&) = delete;
  ScopedDenseIsaVariable& operator=(const ScopedDenseIsaVariable&) = delete;
};

TEST(DenseIsaTest, SupportedSetsAreThoseOfTheCpuNarrowestFirst) {
  EXPECT_EQ(supported_dense_isas(), sets_by_cpu_flags());
  EXPECT_EQ(widest_dense_isa(), sets_by_cpu_flags().back());
}

TEST(DenseIsaTest, DefaultIsTheWidestUnlessTheEnvironmentAsks) {
  unsetenv("RECEMB_DENSE_ISA");
  EXPECT_EQ(default_dense_isa(), widest_dense_isa());
  {
    const ScopedDenseIsaVariable empty("");
    EXPECT_EQ(default_dense_isa(), widest_dense_isa());
  }
  for (const DenseIsa isa : supported_dense_isas()) {
    const ScopedDenseIsaVariable variable(std::string(dense_isa_name(isa)).c_str());
    EXPECT_EQ(default_dense_isa(), isa);
  }
}

TEST(DenseIsaTest, ChoosingPicksTheWidestOrTheNamedSet) {
  const std::vector<DenseIsa> all = {DenseIsa::kBaseline, DenseIsa::kAvx2, DenseIsa::kAvx512};
  EXPECT_EQ(choose_dense_isa(nullptr, all), DenseIsa::kAvx512);
  EXPECT_EQ(choose_dense_isa("", all), DenseIsa::kAvx512);
  EXPECT_EQ(choose_dense_isa("avx2", all), DenseIsa::kAvx2);
  EXPECT_EQ(choose_dense_isa("baseline", all), DenseIsa::kBaseline);
  const std::vector<DenseIsa> avx2_cpu = {DenseIsa::kBaseline, DenseIsa::kAvx2};
  EXPECT_EQ(choose_dense_isa(nullptr, avx2_cpu), DenseIsa::kAvx2);
}

TEST(DenseIsaTest, ASetTheCpuLacksIsRefusedNamingWhatItHas) {
  const std::vector<DenseIsa> avx2_cpu = {DenseIsa::kBaseline, DenseIsa::kAvx2};
  EXPECT_THAT(
      [&] { choose_dense_isa("avx512", avx2_cpu); },
      ThrowsMessage<InvalidArgument>(AllOf(HasSubstr("RECEMB_DENSE_ISA = 'avx512'"),
                                           HasSubstr("lacks"), HasSubstr("runs baseline, avx2"))));
  const std::vector<DenseIsa> old_cpu = {DenseIsa::kBaseline};
  EXPECT_THAT([&] { choose_dense_isa("avx2", old_cpu); },
              ThrowsMessage<InvalidArgument>(HasSubstr("it runs baseline")));
  // On this CPU, through the environment and through the kernels' lookup.
  for (const DenseIsa isa : {DenseIsa::kAvx2, DenseIsa::kAvx512}) {
    if (isa <= widest_dense_isa()) continue;
    const std::string name(dense_isa_name(isa));
    const ScopedDenseIsaVariable variable(name.c_str());
    EXPECT_THAT([] { default_dense_isa(); },
                ThrowsMessage<InvalidArgument>(HasSubstr("RECEMB_DENSE_ISA = '" + name + "'")));
    EXPECT_THAT([&] { dense_kernels(isa); },
                ThrowsMessage<InvalidArgument>(HasSubstr(name + " is not available")));
  }
}

TEST(DenseIsaTest, UnknownNameIsRefusedListingTheNames) {
  const std::vector<DenseIsa> all = {DenseIsa::kBaseline, DenseIsa::kAvx2, DenseIsa::kAvx512};
  EXPECT_THAT([&] { choose_dense_isa("AVX512", all); },
              ThrowsMessage<InvalidArgument>(
                  AllOf(HasSubstr("RECEMB_DENSE_ISA = 'AVX512' is not an instruction set"),
                        HasSubstr("avx512, avx2, baseline"))));
  const ScopedDenseIsaVariable variable("sse2");
  EXPECT_THROW(default_dense_isa(), InvalidArgument);
}

TEST(DenseIsaTest, EachSupportedSetHasItsOwnKernels) {
  const std::vector<DenseIsa> sets = supported_dense_isas();
  for (size_t i = 0; i < sets.size(); ++i) {
    SCOPED_TRACE(dense_isa_name(sets[i]));
    const DenseKernels& kernels = dense_kernels(sets[i]);
    // 16 lanes with AVX-512's registers, 8 otherwise (dense_kernels.cc).
    EXPECT_EQ(kernels.interaction_lanes, sets[i] == DenseIsa::kAvx512 ? 16 : 8);
    for (size_t j = 0; j < i; ++j) {
      EXPECT_NE(&dense_kernels(sets[j]), &kernels);
      EXPECT_NE(dense_kernels(sets[j]).affine_forward, kernels.affine_forward);
    }
  }
}

}  // namespace
}  // namespace recemb::dlrm
