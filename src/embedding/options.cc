// The names of EmbeddingOptions' enums (recemb/embedding.h).
#include <span>
#include <string>
#include <string_view>

#include "recemb/embedding.h"
#include "recemb/error.h"

#include "util/enum_names.h"

namespace recemb {

std::string_view non_finite_gradients_name(NonFiniteGradients value) {
  switch (value) {
    case NonFiniteGradients::kReject:
      return "reject";
    case NonFiniteGradients::kSkipRows:
      return "skip_rows";
  }
  throw InvalidArgument("NonFiniteGradients value " + std::to_string(static_cast<int>(value)) +
                        " is not one of kReject, kSkipRows");
}

NonFiniteGradients parse_non_finite_gradients(std::string_view name) {
  constexpr NonFiniteGradients kValues[] = {NonFiniteGradients::kReject,
                                            NonFiniteGradients::kSkipRows};
  return internal::parse_by_name(name, std::span<const NonFiniteGradients>(kValues),
                                 non_finite_gradients_name, "non_finite_gradients");
}

std::string_view pipeline_staleness_name(PipelineStaleness value) {
  switch (value) {
    case PipelineStaleness::kNone:
      return "none";
    case PipelineStaleness::kOneStep:
      return "one_step";
  }
  throw InvalidArgument("PipelineStaleness value " + std::to_string(static_cast<int>(value)) +
                        " is not one of kNone, kOneStep");
}

PipelineStaleness parse_pipeline_staleness(std::string_view name) {
  constexpr PipelineStaleness kValues[] = {PipelineStaleness::kNone, PipelineStaleness::kOneStep};
  return internal::parse_by_name(name, std::span<const PipelineStaleness>(kValues),
                                 pipeline_staleness_name, "pipeline_staleness");
}

}  // namespace recemb
