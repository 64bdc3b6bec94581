#include <string>
#include <utility>

#include "recemb/error.h"
#include "recemb/serving.h"

#include "batch/csr_feature.h"
#include "batch/lookup.h"
#include "format/checksum.h"
#include "format/file_io.h"
#include "format/json_reader.h"
#include "kernels/pool.h"
#include "serving/format.h"
#include "serving/key_rows.h"
#include "storage/float_buffer.h"

namespace recemb {
namespace {

// A damaged file (recemb/error.h: DataLoss).
[[noreturn]] void fail(const std::string& context, const std::string& problem) {
  throw DataLoss(context + ": " + problem);
}

// The whole file, read through the file system in use (format/file_system.h) into memory the
// model owns, so that nothing done to the file later (rewritten in place, truncated, deleted) can
// reach an open model (docs/serving.md, "What is safe to do with a served file"). The buffer is
// 64-byte aligned, as the blobs are in the file, and large ones are on huge pages
// (storage/float_buffer.h), which the random row reads of lookups benefit from.
class FileContents {
 public:
  FileContents(const std::filesystem::path& path, const std::string& context) {
    const format::InputFile file = format::InputFile::open(path);
    size_ = file.size();
    buffer_ = internal::FloatBuffer((size_ + sizeof(float) - 1) / sizeof(float));
    try {
      file.read_at(0, std::as_writable_bytes(buffer_.span()).first(size_));
    } catch (const DataLoss& error) {
      fail(context, std::string("it was truncated while being read: ") + error.what());
    }
  }

  std::span<const std::byte> bytes() const { return std::as_bytes(buffer_.span()).first(size_); }

 private:
  internal::FloatBuffer buffer_;
  size_t size_ = 0;
};

}  // namespace

struct ServingModel::State {
  State(const std::filesystem::path& file, const std::string& context)
      : path(file), contents(file, context) {}

  std::filesystem::path path;
  FileContents contents;
  internal::ServingManifest manifest;
  std::vector<size_t> feature_table;        // feature -> table index
  std::vector<internal::TableRows> tables;  // the rows of each table, inside `contents`
  std::vector<internal::KeyRows> key_rows;  // per table: a dynamic table's index, else empty

  size_t table_index(std::string_view name) const {
    std::string names;
    for (size_t t = 0; t < manifest.tables.size(); ++t) {
      if (manifest.tables[t].name == name) return t;
      names += (names.empty() ? "'" : ", '") + manifest.tables[t].name + "'";
    }
    throw InvalidArgument("serving model '" + path.string() + "' has no table '" +
                          format::truncated(name) + "' (it has " + names + ")");
  }
};

ServingModel ServingModel::open(const std::filesystem::path& path, const OpenOptions& options) {
  const std::string context = "serving model '" + path.string() + "'";
  auto state = std::make_shared<State>(path, context);
  const std::span<const std::byte> file = state->contents.bytes();
  const internal::ServingHeader header = internal::decode_header(file, context);
  const std::span<const std::byte> manifest =
      file.subspan(internal::kServingHeaderSize, header.manifest_size);
  if (format::checksum(manifest) != header.manifest_checksum) {
    fail(context, "the manifest checksum does not match: the manifest is damaged");
  }
  const std::span<const std::byte> data =
      file.subspan(internal::kServingHeaderSize + header.manifest_size);
  state->manifest = internal::decode_manifest(
      std::string_view(reinterpret_cast<const char*>(manifest.data()), manifest.size()),
      header.format_version, data.size(), context);

  internal::ServingManifest& parsed = state->manifest;
  // The bytes of `blob` (with its padding), checked against its checksum when options.verify.
  const auto blob_bytes = [&](const internal::TableBlob& blob, const std::string& owner) {
    const std::span<const std::byte> bytes =
        data.subspan(blob.offset, internal::padded_size(blob.size));
    if (options.verify && format::checksum(bytes) != blob.checksum) {
      const uint64_t begin = internal::kServingHeaderSize + header.manifest_size + blob.offset;
      fail(context, owner + ": the checksum does not match: its blob (file bytes [" +
                        std::to_string(begin) + ", " + std::to_string(begin + bytes.size()) +
                        ")) is damaged");
    }
    return bytes;
  };
  for (size_t t = 0; t < parsed.tables.size(); ++t) {
    const std::string owner = "table '" + parsed.tables[t].name + "'";
    state->key_rows.emplace_back();
    if (const std::optional<internal::TableBlob>& keys = parsed.key_blobs[t]) {
      const std::span<const std::byte> key_bytes = blob_bytes(*keys, owner + " keys");
      try {
        // 64-byte aligned in memory the model owns (FileContents), as every blob.
        state->key_rows.back() = internal::KeyRows(std::span(
            reinterpret_cast<const int64_t*>(key_bytes.data()), keys->size / sizeof(int64_t)));
      } catch (const InvalidArgument& error) {
        fail(context, owner + ": " + error.what());
      }
    }
    const std::span<const std::byte> bytes = blob_bytes(parsed.blobs[t], owner);
    switch (parsed.dtype) {
      case ServingDtype::kFloat32:
        state->tables.emplace_back(reinterpret_cast<const float*>(bytes.data()));
        break;
      case ServingDtype::kFloat16:
        state->tables.emplace_back(
            internal::Float16Rows{reinterpret_cast<const uint16_t*>(bytes.data())});
        break;
      case ServingDtype::kInt8:
        state->tables.emplace_back(
            internal::Int8Rows{reinterpret_cast<const uint8_t*>(bytes.data())});
        break;
    }
  }
  for (size_t a = 0; a < parsed.extra_arrays.size(); ++a) {
    ServingArray& array = parsed.extra_arrays[a];
    const internal::TableBlob& blob = parsed.extra_blobs[a];
    const std::span<const std::byte> bytes = blob_bytes(blob, "extra array '" + array.name + "'");
    // 64-byte aligned in memory the model owns (FileContents), as every blob.
    array.values =
        std::span(reinterpret_cast<const float*>(bytes.data()), blob.size / sizeof(float));
  }
  for (const FeatureConfig& feature : parsed.features) {
    size_t t = 0;
    while (parsed.tables[t].name != feature.table) ++t;  // validated: the table exists
    state->feature_table.push_back(t);
  }
  return ServingModel(std::move(state));
}

ServingModel::ServingModel(std::shared_ptr<const State> state) : state_(std::move(state)) {}
ServingModel::ServingModel(const ServingModel&) = default;
ServingModel& ServingModel::operator=(const ServingModel&) = default;
ServingModel::ServingModel(ServingModel&&) noexcept = default;
ServingModel& ServingModel::operator=(ServingModel&&) noexcept = default;
ServingModel::~ServingModel() = default;

const std::filesystem::path& ServingModel::path() const { return state_->path; }
ServingDtype ServingModel::dtype() const { return state_->manifest.dtype; }
const std::vector<TableConfig>& ServingModel::tables() const { return state_->manifest.tables; }
const std::vector<FeatureConfig>& ServingModel::features() const {
  return state_->manifest.features;
}

const std::vector<ServingArray>& ServingModel::extra_arrays() const {
  return state_->manifest.extra_arrays;
}
const std::map<std::string, std::string>& ServingModel::metadata() const {
  return state_->manifest.metadata;
}

const ServingArray& ServingModel::extra_array(std::string_view name) const {
  std::string names;
  for (const ServingArray& array : state_->manifest.extra_arrays) {
    if (array.name == name) return array;
    names += (names.empty() ? "'" : ", '") + format::truncated(array.name) + "'";
  }
  throw InvalidArgument("serving model '" + state_->path.string() + "' has no extra array '" +
                        format::truncated(name) + "' (" +
                        (names.empty() ? std::string("it has none") : "it has " + names) + ")");
}

bool ServingModel::is_dynamic(std::string_view table) const {
  const State& state = *state_;
  return state.manifest.tables[state.table_index(table)].dynamic_vocabulary.has_value();
}

int64_t ServingModel::num_keys(std::string_view table) const {
  const State& state = *state_;
  const size_t t = state.table_index(table);
  if (!state.manifest.tables[t].dynamic_vocabulary) {
    throw InvalidArgument("serving model '" + state.path.string() + "': table '" +
                          state.manifest.tables[t].name +
                          "' is not dynamic (its rows are its vocabulary_size " +
                          std::to_string(state.manifest.tables[t].vocabulary_size) + ")");
  }
  return state.key_rows[t].size();
}

std::vector<int64_t> ServingModel::activation_shape(size_t feature,
                                                    const FeatureInput& input) const {
  const State& state = *state_;
  if (feature >= state.manifest.features.size()) {
    throw InvalidArgument("feature index " + std::to_string(feature) + " is out of range [0, " +
                          std::to_string(state.manifest.features.size()) + ")");
  }
  return internal::activation_shape(state.manifest.features[feature],
                                    state.manifest.tables[state.feature_table[feature]], input);
}

void ServingModel::lookup(std::span<const FeatureInput> inputs,
                          std::span<const std::span<float>> activations) const {
  const State& state = *state_;
  const std::vector<FeatureConfig>& features = state.manifest.features;
  internal::check_feature_count(features.size(), inputs.size(), "lookup inputs");
  internal::check_feature_count(features.size(), activations.size(), "lookup activations");
  // Per thread, so that concurrent lookups share nothing mutable and a thread's lookups reuse
  // its buffers instead of allocating.
  thread_local std::vector<internal::CsrFeature> batch;
  if (batch.size() < features.size()) batch.resize(features.size());
  for (size_t f = 0; f < features.size(); ++f) {
    const TableConfig& table = state.manifest.tables[state.feature_table[f]];
    // As Embedding::lookup: the buffer is checked against the shape the input gives before
    // normalising sizes anything (ids of shape [2^40, 0] would allocate 2^40 bags first).
    internal::check_activation_buffer(features[f],
                                      internal::activation_shape(features[f], table, inputs[f]),
                                      activations[f].size());
    internal::normalize_feature(features[f], table, inputs[f], batch[f]);
  }
  // Validated.
  for (size_t f = 0; f < features.size(); ++f) {
    const size_t t = state.feature_table[f];
    // A dynamic table's keys become their rows (absent keys: the zero row after them).
    if (state.manifest.tables[t].dynamic_vocabulary) {
      state.key_rows[t].find(batch[f].ids, batch[f].ids.data());
    }
    internal::pool_bags(internal::pool_input(batch[f], state.manifest.tables[t], state.tables[t]),
                        0, batch[f].num_bags(), activations[f].data());
  }
}

}  // namespace recemb
