#include <algorithm>
#include <array>
#include <cerrno>
#include <map>
#include <optional>
#include <stop_token>
#include <string>
#include <system_error>
#include <utility>

#include "recemb/error.h"
#include "recemb/serving.h"

#include "batch/csr_feature.h"
#include "batch/input_layout.h"
#include "batch/lookup.h"
#include "format/checksum.h"
#include "kernels/pool.h"
#include "serving/format.h"
#include "serving/key_rows.h"
#include "serving/model_access.h"
#include "storage/aligned_buffer.h"
#include "support/file_io.h"
#include "support/json.h"

namespace recemb {
namespace {

// A damaged file (recemb/error.h: DataLoss).
[[noreturn]] void fail(const std::string& context, const std::string& problem) {
  throw DataLoss(context + ": " + problem);
}

// The whole file, read through the file system in use (support/file_system.h) into memory the
// model owns, so that nothing done to the file later (rewritten in place, truncated, deleted) can
// reach an open model (docs/serving.md, "What is safe to do with a served file"). Its header is
// read and checked first (magic, format version, the size the header gives against the file's),
// so that a file of another kind is refused without reading more than 64 bytes. The rest is read
// in chunks, between which `stop` is looked at. The buffer is 64-byte aligned, as the blobs are
// in the file, and large ones are on huge pages (storage/aligned_buffer.h), which the random row
// reads of lookups benefit from.
class FileContents {
 public:
  FileContents(const std::filesystem::path& path, const std::string& context,
               const internal::ServingFileKind& kind, const std::stop_token& stop = {}) {
    const support::InputFile file = support::InputFile::open(path);
    size_ = file.size();
    const auto read = [&](size_t offset, std::span<std::byte> bytes) {
      try {
        file.read_at(offset, bytes);
      } catch (const DataLoss& error) {
        fail(context, std::string("it was truncated while being read: ") + error.what());
      }
    };
    std::array<std::byte, internal::kServingHeaderSize> start{};
    const std::span<std::byte> first = std::span(start).first(std::min(size_, start.size()));
    read(0, first);
    header_ = internal::decode_header(first, size_, context, kind);
    buffer_ = internal::FloatBuffer((size_ + sizeof(float) - 1) / sizeof(float));
    // Chunks of 64 MiB: a stop request waits for one at most (tens of ms).
    constexpr size_t kChunk = size_t{64} << 20;
    const std::span<std::byte> all = bytes();
    for (size_t offset = 0; offset < size_; offset += kChunk) {
      if (stop.stop_requested()) {
        throw std::system_error(ECANCELED, std::generic_category(),
                                context + ": reading it was stopped at byte " +
                                    std::to_string(offset) + " of " + std::to_string(size_));
      }
      read(offset, all.subspan(offset, std::min(kChunk, size_ - offset)));
    }
  }
  // A copy, in memory of its own.
  FileContents(const FileContents& other)
      : buffer_(other.buffer_.size()), size_(other.size_), header_(other.header_) {
    std::copy(other.buffer_.span().begin(), other.buffer_.span().end(), buffer_.span().begin());
  }
  FileContents& operator=(const FileContents&) = delete;

  std::span<const std::byte> bytes() const { return std::as_bytes(buffer_.span()).first(size_); }
  std::span<std::byte> bytes() { return std::as_writable_bytes(buffer_.span()).first(size_); }
  const internal::ServingHeader& header() const { return header_; }

 private:
  internal::FloatBuffer buffer_;
  size_t size_ = 0;
  internal::ServingHeader header_;
};

// A dynamic table rebuilt by a delta: its keys and rows (the zero row last), in memory of their
// own; its blobs in the file's contents are no longer read.
struct RebuiltTable {
  std::vector<int64_t> keys;
  internal::FloatBuffer rows;  // (keys + 1) rows, 64-byte aligned as the file's blobs
};

}  // namespace

struct ServingModel::State {
  State(const std::filesystem::path& file, const std::string& context, const std::stop_token& stop)
      : path(file), contents(file, context, internal::kModelFile, stop) {}
  // A deep copy (clone): the same model in memory of its own, its indexes rebuilt.
  State(const State& other)
      : path(other.path),
        contents(other.contents),
        data_offset(other.data_offset),
        base_id(other.base_id),
        delta_sequence(other.delta_sequence),
        manifest(other.manifest),
        feature_table(other.feature_table) {
    for (const std::optional<RebuiltTable>& table : other.rebuilt) {
      rebuilt.emplace_back();
      if (!table) continue;
      rebuilt.back() =
          RebuiltTable{.keys = table->keys, .rows = internal::FloatBuffer(table->rows.size())};
      std::copy(table->rows.span().begin(), table->rows.span().end(),
                rebuilt.back()->rows.span().begin());
    }
    bind();
    for (size_t t = 0; t < keys.size(); ++t) {
      key_rows.emplace_back();
      if (manifest.key_blobs[t]) key_rows.back() = internal::KeyRows(keys[t]);
    }
  }

  std::filesystem::path path;
  FileContents contents;
  uint64_t data_offset = 0;  // of the data section in `contents`
  // The file's manifest checksum: the identity deltas name as their base (docs/serving.md,
  // "Publishing deltas"), kept as deltas are applied.
  uint64_t base_id = 0;
  int64_t delta_sequence = 0;  // deltas applied
  // The file's manifest; apply_delta replaces the metadata (and the extra arrays' values, in
  // place).
  internal::ServingManifest manifest;
  std::vector<size_t> feature_table;                 // feature -> table index
  std::vector<std::optional<RebuiltTable>> rebuilt;  // per table
  // Where each table's rows (without padding; a dynamic table's zero row included) and a dynamic
  // table's keys are: in `contents`, or in its RebuiltTable. Set by bind.
  std::vector<std::span<std::byte>> rows;
  std::vector<std::span<const int64_t>> keys;
  std::vector<internal::TableRows> tables;  // the lookup kernels' view of `rows`
  std::vector<internal::KeyRows> key_rows;  // per table: a dynamic table's index, else empty

  std::span<std::byte> data() { return contents.bytes().subspan(data_offset); }

  // Points rows, keys, tables and the extra arrays' values at where they are (after open, a copy
  // or a rebuild). Allocates only the first time (a fixed number of entries).
  void bind() {
    const size_t n = manifest.tables.size();
    rows.resize(n);
    keys.resize(n);
    tables.resize(n);
    rebuilt.resize(n);
    const std::span<std::byte> file_data = data();
    for (size_t t = 0; t < n; ++t) {
      const internal::TableBlob& blob = manifest.blobs[t];
      if (rebuilt[t]) {
        rows[t] =
            std::as_writable_bytes(rebuilt[t]->rows.span())
                .first(*internal::serving_blob_size(
                    manifest.dtype, std::ssize(rebuilt[t]->keys) + 1, manifest.tables[t].dim));
        keys[t] = rebuilt[t]->keys;
      } else {
        rows[t] = file_data.subspan(blob.offset, blob.size);
        if (const std::optional<internal::TableBlob>& key_blob = manifest.key_blobs[t]) {
          // 64-byte aligned in memory the model owns (FileContents), as every blob.
          keys[t] = std::span(reinterpret_cast<const int64_t*>(file_data.data() + key_blob->offset),
                              key_blob->size / sizeof(int64_t));
        }
      }
      switch (manifest.dtype) {
        case ServingDtype::kFloat32:
          tables[t] = reinterpret_cast<const float*>(rows[t].data());
          break;
        case ServingDtype::kFloat16:
          tables[t] = internal::Float16Rows{reinterpret_cast<const uint16_t*>(rows[t].data())};
          break;
        case ServingDtype::kInt8:
          tables[t] = internal::Int8Rows{reinterpret_cast<const uint8_t*>(rows[t].data())};
          break;
      }
    }
    for (size_t a = 0; a < manifest.extra_arrays.size(); ++a) {
      const internal::TableBlob& blob = manifest.extra_blobs[a];
      manifest.extra_arrays[a].values =
          std::span(reinterpret_cast<const float*>(file_data.data() + blob.offset),
                    blob.size / sizeof(float));
    }
  }

  void apply_delta(const std::filesystem::path& delta);

  size_t table_index(std::string_view name) const {
    std::string names;
    for (size_t t = 0; t < manifest.tables.size(); ++t) {
      if (manifest.tables[t].name == name) return t;
      names += (names.empty() ? "'" : ", '") + manifest.tables[t].name + "'";
    }
    throw InvalidArgument("serving model '" + path.string() + "' has no table '" +
                          support::excerpt(name) + "' (it has " + names + ")");
  }
};

ServingModel ServingModel::open(const std::filesystem::path& path, const OpenOptions& options) {
  const std::string context = "serving model '" + path.string() + "'";
  auto state = std::make_shared<State>(path, context, options.stop);
  const std::span<const std::byte> file = state->contents.bytes();
  const internal::ServingHeader& header = state->contents.header();
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
    if (const std::optional<internal::TableBlob>& keys = parsed.key_blobs[t]) {
      blob_bytes(*keys, owner + " keys");
    }
    blob_bytes(parsed.blobs[t], owner);
  }
  for (size_t a = 0; a < parsed.extra_arrays.size(); ++a) {
    blob_bytes(parsed.extra_blobs[a], "extra array '" + parsed.extra_arrays[a].name + "'");
  }
  state->data_offset = internal::kServingHeaderSize + header.manifest_size;
  state->base_id = header.manifest_checksum;
  state->bind();
  for (size_t t = 0; t < parsed.tables.size(); ++t) {
    state->key_rows.emplace_back();
    if (!parsed.key_blobs[t]) continue;
    try {
      state->key_rows.back() = internal::KeyRows(state->keys[t]);
    } catch (const InvalidArgument& error) {
      fail(context, "table '" + parsed.tables[t].name + "': " + error.what());
    }
  }
  for (const FeatureConfig& feature : parsed.features) {
    size_t t = 0;
    while (parsed.tables[t].name != feature.table) ++t;  // validated: the table exists
    state->feature_table.push_back(t);
  }
  return ServingModel(std::move(state));
}

namespace {

// Throws DataLoss naming `owner` unless `values` are strictly increasing and, when `limit` is
// given, in [0, limit).
void check_increasing(std::span<const int64_t> values, std::optional<int64_t> limit,
                      const std::string& context, const std::string& owner) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0 && values[i] <= values[i - 1]) {
      fail(context, owner + ": position " + std::to_string(i) + " (" + std::to_string(values[i]) +
                        ") is not above the previous one (" + std::to_string(values[i - 1]) +
                        "): they must be strictly increasing");
    }
    if (limit && (values[i] < 0 || values[i] >= *limit)) {
      fail(context, owner + ": row " + std::to_string(values[i]) + " is outside [0, " +
                        std::to_string(*limit) + ")");
    }
  }
}

template <typename T>
std::span<const T> view(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const T*>(bytes.data()), bytes.size() / sizeof(T)};
}

}  // namespace

void ServingModel::State::apply_delta(const std::filesystem::path& delta) {
  const std::string context = "serving delta '" + delta.string() + "'";
  const FileContents contents_of_delta(delta, context, internal::kDeltaFile);
  const std::span<const std::byte> file = contents_of_delta.bytes();
  const internal::ServingHeader& header = contents_of_delta.header();
  const std::span<const std::byte> manifest_bytes =
      file.subspan(internal::kServingHeaderSize, header.manifest_size);
  if (format::checksum(manifest_bytes) != header.manifest_checksum) {
    fail(context, "the manifest checksum does not match: the manifest is damaged");
  }
  const std::span<const std::byte> delta_data =
      file.subspan(internal::kServingHeaderSize + header.manifest_size);
  const internal::DeltaManifest parsed = internal::decode_delta_manifest(
      std::string_view(reinterpret_cast<const char*>(manifest_bytes.data()), manifest_bytes.size()),
      delta_data.size(), context);
  const std::string model = "serving model '" + path.string() + "'";
  if (parsed.base != base_id) {
    throw FailedPrecondition(context + " applies to the base model whose manifest checksum is " +
                             format::checksum_to_hex(parsed.base) + ", but " + model + "'s is " +
                             format::checksum_to_hex(base_id) +
                             ": apply a model's deltas to that model only");
  }
  if (parsed.sequence != delta_sequence + 1) {
    throw FailedPrecondition(context + " has sequence " + std::to_string(parsed.sequence) +
                             ", but " + model + " has applied " + std::to_string(delta_sequence) +
                             " deltas and takes sequence " + std::to_string(delta_sequence + 1) +
                             " next: apply deltas in order, each once");
  }
  if (parsed.dtype != manifest.dtype || parsed.tables.size() != manifest.tables.size()) {
    fail(context, "its dtype or tables do not match " + model + "'s");
  }
  for (size_t t = 0; t < parsed.tables.size(); ++t) {
    const TableConfig& table = manifest.tables[t];
    const internal::DeltaTable& entry = parsed.tables[t];
    if (entry.name != table.name || entry.dim != table.dim ||
        entry.dynamic != table.dynamic_vocabulary.has_value()) {
      fail(context, "table " + std::to_string(t) + " '" + support::excerpt(entry.name) +
                        "' does not match " + model + "'s table '" + table.name + "'");
    }
  }
  const std::vector<ServingArray>& arrays = manifest.extra_arrays;
  bool same_arrays = parsed.extra_arrays.size() == arrays.size();
  for (size_t a = 0; same_arrays && a < arrays.size(); ++a) {
    same_arrays = parsed.extra_arrays[a].name == arrays[a].name &&
                  parsed.extra_arrays[a].shape == arrays[a].shape;
  }
  if (!same_arrays) {
    throw InvalidArgument(context + ": its extra arrays' names and shapes are not " + model +
                          "'s (a delta replaces the values of the base's arrays only)");
  }
  // Every blob's checksum, before anything is read from it.
  const auto blob_bytes = [&](const internal::TableBlob& blob, const std::string& owner) {
    const std::span<const std::byte> bytes =
        delta_data.subspan(blob.offset, internal::padded_size(blob.size));
    if (format::checksum(bytes) != blob.checksum) {
      fail(context, owner + ": the checksum does not match: its blob is damaged");
    }
    return bytes.first(blob.size);
  };
  struct TableChange {
    std::span<const int64_t> ids;  // static: row ids; dynamic: upserted keys
    std::span<const std::byte> rows;
    std::span<const int64_t> removed;
  };
  std::vector<TableChange> changes;
  for (size_t t = 0; t < parsed.tables.size(); ++t) {
    const internal::DeltaTable& entry = parsed.tables[t];
    const std::string owner = "table '" + entry.name + "'";
    TableChange& change = changes.emplace_back();
    change.ids = view<int64_t>(blob_bytes(entry.ids, owner + (entry.dynamic ? " keys" : " ids")));
    change.rows = blob_bytes(entry.rows, owner + " rows");
    if (entry.removed)
      change.removed = view<int64_t>(blob_bytes(*entry.removed, owner + " removed keys"));
    check_increasing(
        change.ids,
        entry.dynamic ? std::nullopt : std::optional(manifest.tables[t].vocabulary_size), context,
        owner + (entry.dynamic ? " keys" : " ids"));
    check_increasing(change.removed, std::nullopt, context, owner + " removed keys");
  }
  std::vector<std::span<const std::byte>> array_values;
  for (size_t a = 0; a < parsed.extra_arrays.size(); ++a) {
    array_values.push_back(
        blob_bytes(parsed.extra_blobs[a], "extra array '" + parsed.extra_arrays[a].name + "'"));
  }

  // Verified. The dynamic tables that change are rebuilt aside (the only allocations), then
  // everything is committed without a throw.
  std::vector<std::optional<RebuiltTable>> rebuilds(parsed.tables.size());
  std::vector<internal::KeyRows> indexes(parsed.tables.size());
  for (size_t t = 0; t < parsed.tables.size(); ++t) {
    const TableChange& change = changes[t];
    if (!parsed.tables[t].dynamic || (change.ids.empty() && change.removed.empty())) continue;
    const uint64_t row_bytes =
        *internal::serving_blob_size(manifest.dtype, 1, manifest.tables[t].dim);
    const std::span<const int64_t> old_keys = keys[t];
    const std::span<const std::byte> old_rows = rows[t];
    std::vector<int64_t> new_keys;
    new_keys.reserve(old_keys.size() + change.ids.size());
    // Merged: (key, where its row is) in increasing key order; upserts win, removed keys go.
    std::vector<const std::byte*> sources;
    sources.reserve(old_keys.size() + change.ids.size() + 1);
    size_t i = 0;
    size_t j = 0;
    size_t r = 0;
    while (i < old_keys.size() || j < change.ids.size()) {
      if (j == change.ids.size() || (i < old_keys.size() && old_keys[i] < change.ids[j])) {
        const int64_t key = old_keys[i];
        while (r < change.removed.size() && change.removed[r] < key) ++r;
        if (r == change.removed.size() || change.removed[r] != key) {
          new_keys.push_back(key);
          sources.push_back(old_rows.data() + i * row_bytes);
        }
        ++i;
      } else {
        if (i < old_keys.size() && old_keys[i] == change.ids[j]) ++i;
        new_keys.push_back(change.ids[j]);
        sources.push_back(change.rows.data() + j * row_bytes);
        ++j;
      }
    }
    sources.push_back(old_rows.data() + old_keys.size() * row_bytes);  // the zero row
    const uint64_t bytes = sources.size() * row_bytes;
    RebuiltTable rebuilt_table{
        .keys = std::move(new_keys),
        .rows = internal::FloatBuffer((bytes + sizeof(float) - 1) / sizeof(float))};
    std::byte* out = reinterpret_cast<std::byte*>(rebuilt_table.rows.data());
    for (const std::byte* source : sources) {
      out = std::copy_n(source, row_bytes, out);
    }
    try {
      indexes[t] = internal::KeyRows(rebuilt_table.keys);
    } catch (const InvalidArgument& error) {
      throw InvalidArgument(context + ": table '" + manifest.tables[t].name + "': " + error.what());
    }
    rebuilds[t] = std::move(rebuilt_table);
  }
  std::map<std::string, std::string> metadata = parsed.metadata;

  for (size_t t = 0; t < parsed.tables.size(); ++t) {
    const TableChange& change = changes[t];
    if (rebuilds[t]) {
      rebuilt[t] = std::move(rebuilds[t]);
      key_rows[t] = std::move(indexes[t]);
    } else if (!parsed.tables[t].dynamic) {
      const uint64_t row_bytes =
          *internal::serving_blob_size(manifest.dtype, 1, manifest.tables[t].dim);
      for (size_t k = 0; k < change.ids.size(); ++k) {
        std::copy_n(change.rows.data() + k * row_bytes, row_bytes,
                    rows[t].data() + static_cast<uint64_t>(change.ids[k]) * row_bytes);
      }
    }
  }
  const std::span<std::byte> file_data = data();
  for (size_t a = 0; a < array_values.size(); ++a) {
    std::copy(array_values[a].begin(), array_values[a].end(),
              file_data.data() + manifest.extra_blobs[a].offset);
  }
  manifest.metadata.swap(metadata);
  ++delta_sequence;
  bind();
}

ServingModel::ServingModel(std::shared_ptr<State> state) : state_(std::move(state)) {}
ServingModel::ServingModel(const ServingModel&) = default;
ServingModel& ServingModel::operator=(const ServingModel&) = default;
ServingModel::ServingModel(ServingModel&&) noexcept = default;
ServingModel& ServingModel::operator=(ServingModel&&) noexcept = default;
ServingModel::~ServingModel() = default;

ServingModel ServingModel::clone() const { return ServingModel(std::make_shared<State>(*state_)); }

void ServingModel::apply_delta(const std::filesystem::path& delta) {
  if (state_.use_count() != 1) {
    throw FailedPrecondition("serving model '" + state_->path.string() + "': apply_delta '" +
                             delta.string() + "' needs the only handle of the model (it has " +
                             std::to_string(state_.use_count()) +
                             " copies sharing it, whose lookups would see the change): apply "
                             "deltas to a clone() no lookup holds");
  }
  state_->apply_delta(delta);
}

int64_t ServingModel::delta_sequence() const { return state_->delta_sequence; }

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
    names += (names.empty() ? "'" : ", '") + support::excerpt(array.name) + "'";
  }
  throw InvalidArgument("serving model '" + state_->path.string() + "' has no extra array '" +
                        support::excerpt(name) + "' (" +
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

namespace internal {

std::span<const std::byte> ServingModelAccess::table_rows(const ServingModel& model, size_t table) {
  return model.state_->rows[table];
}

std::span<const int64_t> ServingModelAccess::table_keys(const ServingModel& model, size_t table) {
  return model.state_->keys[table];
}

}  // namespace internal

}  // namespace recemb
