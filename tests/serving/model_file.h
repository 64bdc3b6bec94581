// Test helpers for serving model files, written from docs/serving.md rather than from
// src/serving: a reader of the layout (header fields, manifest JSON, table blobs), the values a
// blob decodes to, and a writer that rebuilds a file with valid checksums around an edited
// manifest or data section.
#ifndef RECEMB_TESTS_SERVING_MODEL_FILE_H_
#define RECEMB_TESTS_SERVING_MODEL_FILE_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "format/checksum.h"
#include "support/json.h"
#include "testing/files.h"

namespace recemb::test {

template <typename T>
T load_le(const std::vector<std::byte>& bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

// The value of a binary16 bit pattern: (-1)^s 2^(e - 15) (1 + m / 1024), or 2^-14 m / 1024 when
// e = 0 (finite patterns only).
inline float half_value(uint16_t bits) {
  const int exponent = (bits >> 10) & 31;
  const int mantissa = bits & 1023;
  const double magnitude =
      exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
  return static_cast<float>((bits & 0x8000) != 0 ? -magnitude : magnitude);
}

// A serving model file as docs/serving.md lays it out.
struct ModelFile {
  struct Blob {
    std::string table;
    int64_t vocabulary_size = 0;  // rows in the blob: a dynamic table's keys + 1 (its zero row)
    int64_t dim = 0;
    uint64_t offset = 0;  // in the file
    uint64_t size = 0;    // without padding
    uint64_t checksum = 0;
    // A dynamic table's keys blob (in the file; size 0 for a static table).
    uint64_t keys_offset = 0;
    uint64_t keys_size = 0;
  };

  std::vector<std::byte> bytes;
  uint32_t format_version = 0;
  uint64_t manifest_size = 0;
  uint64_t manifest_checksum = 0;
  uint64_t file_size = 0;
  uint64_t header_checksum = 0;
  support::Json manifest;
  std::string dtype;
  std::vector<Blob> blobs;

  static ModelFile read(const std::filesystem::path& path) {
    ModelFile file;
    file.bytes = read_bytes(path);
    const std::vector<std::byte>& b = file.bytes;
    if (b.size() < 64 || std::memcmp(b.data(), "RECEMBSV", 8) != 0) {
      throw std::runtime_error(path.string() + " is not a serving model");
    }
    file.format_version = load_le<uint32_t>(b, 8);
    file.manifest_size = load_le<uint64_t>(b, 16);
    file.manifest_checksum = load_le<uint64_t>(b, 24);
    file.file_size = load_le<uint64_t>(b, 32);
    file.header_checksum = load_le<uint64_t>(b, 56);
    file.manifest = support::Json::parse(std::string(reinterpret_cast<const char*>(b.data()) + 64,
                                                     static_cast<size_t>(file.manifest_size)));
    file.dtype = file.manifest["dtype"].get<std::string>();
    for (const auto& entry : file.manifest["tables"]) {
      uint64_t checksum = 0;
      format::parse_checksum(entry["checksum"].get<std::string>(), checksum);
      file.blobs.push_back({.table = entry["config"]["name"].get<std::string>(),
                            .vocabulary_size = entry["config"]["vocabulary_size"].get<int64_t>(),
                            .dim = entry["config"]["dim"].get<int64_t>(),
                            .offset = file.data_offset() + entry["offset"].get<uint64_t>(),
                            .size = entry["size"].get<uint64_t>(),
                            .checksum = checksum});
      if (entry.contains("keys")) {
        Blob& blob = file.blobs.back();
        blob.keys_offset = file.data_offset() + entry["keys"]["offset"].get<uint64_t>();
        blob.keys_size = entry["keys"]["size"].get<uint64_t>();
        blob.vocabulary_size = static_cast<int64_t>(blob.keys_size / 8) + 1;
      }
    }
    return file;
  }

  uint64_t data_offset() const { return 64 + manifest_size; }
  static uint64_t padded(uint64_t size) { return (size + 63) / 64 * 64; }

  std::vector<std::byte> data_section() const {
    return {bytes.begin() + static_cast<std::ptrdiff_t>(data_offset()), bytes.end()};
  }

  // The blob's values as float32, decoded as the format defines them; for int8, code * scale +
  // bias evaluated in float32 as the lookup kernel does (two roundings).
  std::vector<float> decode(size_t table) const {
    const Blob& blob = blobs[table];
    const std::byte* data = bytes.data() + blob.offset;
    std::vector<float> values;
    for (int64_t r = 0; r < blob.vocabulary_size; ++r) {
      for (int64_t d = 0; d < blob.dim; ++d) {
        if (dtype == "float32") {
          float value;
          std::memcpy(&value, data + (r * blob.dim + d) * 4, 4);
          values.push_back(value);
        } else if (dtype == "float16") {
          uint16_t half;
          std::memcpy(&half, data + (r * blob.dim + d) * 2, 2);
          values.push_back(half_value(half));
        } else {
          const std::byte* row = data + r * (blob.dim + 8);
          float scale, bias;
          std::memcpy(&scale, row + blob.dim, 4);
          std::memcpy(&bias, row + blob.dim + 4, 4);
          values.push_back(static_cast<float>(std::to_integer<uint8_t>(row[d])) * scale + bias);
        }
      }
    }
    return values;
  }
};

// A complete file around `manifest_text` (padded with spaces here) and `data`, with a valid
// header and manifest checksum (the table checksums are whatever the manifest says).
inline std::vector<std::byte> build_model_file(std::string manifest_text,
                                               const std::vector<std::byte>& data,
                                               uint32_t format_version = 3) {
  manifest_text.resize(ModelFile::padded(manifest_text.size()), ' ');
  std::vector<std::byte> bytes(64);
  std::memcpy(bytes.data(), "RECEMBSV", 8);
  const uint64_t manifest_size = manifest_text.size();
  const uint64_t manifest_checksum =
      format::checksum(std::as_bytes(std::span(manifest_text.data(), manifest_text.size())));
  const uint64_t file_size = 64 + manifest_size + data.size();
  std::memcpy(bytes.data() + 8, &format_version, 4);
  std::memcpy(bytes.data() + 16, &manifest_size, 8);
  std::memcpy(bytes.data() + 24, &manifest_checksum, 8);
  std::memcpy(bytes.data() + 32, &file_size, 8);
  const uint64_t header_checksum = format::checksum(std::span(bytes).first(56));
  std::memcpy(bytes.data() + 56, &header_checksum, 8);
  const auto* manifest_bytes = reinterpret_cast<const std::byte*>(manifest_text.data());
  bytes.insert(bytes.end(), manifest_bytes, manifest_bytes + manifest_size);
  bytes.insert(bytes.end(), data.begin(), data.end());
  return bytes;
}

}  // namespace recemb::test

#endif  // RECEMB_TESTS_SERVING_MODEL_FILE_H_
