#include "train/report/run_summary.h"

#include <cinttypes>
#include <cstdio>

#include "dlrm/criteo_reader.h"

namespace recemb::train {

bool learned(double final_auc, double final_log_loss, double initial_log_loss) {
  return final_auc >= kLearnedAuc && !(final_log_loss >= initial_log_loss);
}

std::string run_description(const TrainConfig& config, const std::vector<TableConfig>& tables,
                            int64_t embedding_bytes, size_t dense_parameters,
                            dlrm::DenseIsa dense_isa, const std::string& data_description) {
  int64_t rows = 0;
  for (const TableConfig& table : tables) {
    rows += table.dynamic_vocabulary ? table.dynamic_vocabulary->capacity : table.vocabulary_size;
  }
  const bool dynamic = dynamic_vocabulary(config);
  char line[320];
  std::snprintf(line, sizeof line,
                "recemb train: 26 %s, %" PRId64 " %s x %" PRId64
                " dims, %.1f MiB with optimizer slots%s; %zu dense parameters (%s); data: %s",
                dynamic ? "dynamic tables" : "tables", rows, dynamic ? "keys at most" : "rows",
                config.model.embedding_dim, static_cast<double>(embedding_bytes) / (1 << 20),
                dynamic ? " when full" : "", dense_parameters,
                std::string(dlrm::dense_isa_name(dense_isa)).c_str(), data_description.c_str());
  return line;
}

void add_malformed_lines(const TrainingData& data, TrainSummary& summary) {
  for (const dlrm::CriteoReader* reader : {data.train_reader, data.eval_reader.get()}) {
    if (reader != nullptr) summary.short_lines += reader->short_lines();
  }
  if (data.malformed == nullptr) return;
  summary.malformed_lines += data.malformed->count();
  const auto messages = data.malformed->messages();
  summary.malformed_messages.insert(summary.malformed_messages.end(), messages.begin(),
                                    messages.end());
}

std::vector<TableVocabulary> table_vocabularies(const Embedding& embedding) {
  std::vector<TableVocabulary> vocabularies;
  for (const TableConfig& table : embedding.tables()) {
    if (!table.dynamic_vocabulary) continue;
    vocabularies.push_back({.table = table.name,
                            .capacity = table.dynamic_vocabulary->capacity,
                            .stats = embedding.vocabulary_stats(table.name)});
  }
  return vocabularies;
}

}  // namespace recemb::train
