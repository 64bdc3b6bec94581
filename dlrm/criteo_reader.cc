#include "dlrm/criteo_reader.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "recemb/error.h"
#include "recemb/string_key.h"

#include "dlrm/criteo_profile.h"

namespace recemb::dlrm {
namespace {

constexpr size_t kBufferBytes = size_t{1} << 20;
constexpr int kNumFields = 1 + kNumDenseFeatures + kNumCategoricalFeatures;
constexpr size_t kMaxHexDigits = 16;
constexpr std::string_view kPositionPrefix = "criteo:";

// Why a line is malformed; `text` points into the line (valid until the next read).
struct LineError {
  enum class Kind { kTooLong, kEmpty, kFieldCount, kLabel, kInteger, kCategorical };
  Kind kind;
  int64_t detail = 0;                // the field count (kFieldCount) or the 0-based feature
  std::string_view text = {};        // the offending field
  int expected_fields = kNumFields;  // kFieldCount: how many the line should have
};

template <typename Integer>
bool parse_whole(std::string_view text, Integer& value, int base) {
  const char* last = text.data() + text.size();
  const auto [end, error] = std::from_chars(text.data(), last, value, base);
  return error == std::errc() && end == last;
}

// Parses one line into example slot: label (when the line has one), dense[0..13), ids[f * stride]
// for f in [0, 26) (`label_field` kPresent or kAbsent). A non-empty line of too few fields has its
// missing trailing fields empty and sets `short_line`. On a malformed line some of the slot may
// have been written; the caller does not count the slot then.
std::optional<LineError> parse_line(std::string_view line, CriteoLabel label_field,
                                    CategoricalIds categorical_ids,
                                    std::span<const int64_t> vocabulary_sizes, float& label,
                                    float* dense, int64_t* ids, size_t stride, bool& short_line) {
  if (line.empty()) return LineError{.kind = LineError::Kind::kEmpty};
  const int first = label_field == CriteoLabel::kPresent ? 1 : 0;  // I1's field
  const int expected_fields = kNumFields - 1 + first;
  std::array<std::string_view, kNumFields> fields;
  int num_fields = 0;
  // The tabs' positions, 16 bytes at a time where SSE2 is (the fields are a few bytes each: a
  // call of memchr per field cost more than it saved); a tab more than the line may have stops it.
  std::array<size_t, kNumFields> tabs;
  int num_tabs = 0;
  const auto add_tab = [&](size_t at) {
    tabs[static_cast<size_t>(num_tabs++)] = at;
    return num_tabs < expected_fields;
  };
  const char* const data = line.data();
  size_t i = 0;
  bool more = true;
#ifdef __SSE2__
  const __m128i tab = _mm_set1_epi8('\t');
  for (; more && i + 16 <= line.size(); i += 16) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(data + i));
    for (auto mask = static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(bytes, tab)));
         more && mask != 0; mask &= mask - 1) {
      more = add_tab(i + static_cast<size_t>(std::countr_zero(mask)));
    }
  }
#endif
  for (; more && i < line.size(); ++i) {
    if (data[i] == '\t') more = add_tab(i);
  }
  if (!more) {
    return LineError{.kind = LineError::Kind::kFieldCount,
                     .detail = 1 + std::count(line.begin(), line.end(), '\t'),
                     .expected_fields = expected_fields};
  }
  size_t start = 0;
  for (int t = 0; t < num_tabs; ++t) {
    const size_t at = tabs[static_cast<size_t>(t)];
    fields[static_cast<size_t>(num_fields++)] = std::string_view(data + start, at - start);
    start = at + 1;
  }
  fields[static_cast<size_t>(num_fields++)] = line.substr(start);
  short_line = num_fields < expected_fields;
  // The missing trailing fields of a short line are empty (fields[] starts empty).

  if (label_field == CriteoLabel::kPresent) {
    if (fields[0] != "0" && fields[0] != "1") {
      return LineError{.kind = LineError::Kind::kLabel, .text = fields[0]};
    }
    label = fields[0] == "1" ? 1.0f : 0.0f;
  }

  for (int j = 0; j < kNumDenseFeatures; ++j) {
    const std::string_view text = fields[static_cast<size_t>(first) + j];
    int64_t value = 0;
    if (!text.empty() && !parse_whole(text, value, 10)) {
      return LineError{.kind = LineError::Kind::kInteger, .detail = j, .text = text};
    }
    dense[j] = dense_value(value);
  }

  for (int f = 0; f < kNumCategoricalFeatures; ++f) {
    const std::string_view text = fields[static_cast<size_t>(first) + kNumDenseFeatures + f];
    const std::optional<int64_t> id =
        categorical_ids == CategoricalIds::kRawKeys
            ? categorical_key(text)
            : categorical_field_id(f, text, vocabulary_sizes[static_cast<size_t>(f)]);
    if (!id) return LineError{.kind = LineError::Kind::kCategorical, .detail = f, .text = text};
    ids[static_cast<size_t>(f) * stride] = *id;
  }
  return std::nullopt;
}

// A field as shown in a message: at most 32 bytes, control bytes as '?'.
std::string quote(std::string_view text) {
  constexpr size_t kShown = 32;
  std::string quoted = "'";
  for (const char c : text.substr(0, kShown)) {
    quoted += static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c;
  }
  return quoted + (text.size() > kShown ? "...'" : "'");
}

std::string describe(const LineError& error) {
  switch (error.kind) {
    case LineError::Kind::kTooLong:
      return "line longer than " + std::to_string(kMaxLineBytes) + " bytes";
    case LineError::Kind::kEmpty:
      return "empty line";
    case LineError::Kind::kFieldCount:
      return "expected " + std::to_string(error.expected_fields) + " tab-separated fields, found " +
             std::to_string(error.detail);
    case LineError::Kind::kLabel:
      return "label " + quote(error.text) + " is not 0 or 1";
    case LineError::Kind::kInteger:
      return dense_feature_name(static_cast<int>(error.detail)) + " " + quote(error.text) +
             " is not a decimal integer in int64 range";
    case LineError::Kind::kCategorical:
      return categorical_feature_name(static_cast<int>(error.detail)) + " " + quote(error.text) +
             " is not 1 to 16 hexadecimal digits";
  }
  return {};
}

// file index, byte offset, line number of "criteo:<file>:<offset>:<line>" (each >= 0).
std::optional<std::array<int64_t, 3>> parse_position(std::string_view text) {
  if (!text.starts_with(kPositionPrefix)) return std::nullopt;
  text.remove_prefix(kPositionPrefix.size());
  std::array<int64_t, 3> values{};
  for (size_t k = 0; k < values.size(); ++k) {
    const size_t length = k + 1 < values.size() ? text.find(':') : text.size();
    if (length == std::string_view::npos || length == 0 || text[0] == '-' ||
        !parse_whole(text.substr(0, length), values[k], 10)) {
      return std::nullopt;
    }
    text.remove_prefix(std::min(length + 1, text.size()));
  }
  return values;
}

}  // namespace

std::optional<std::string> parse_criteo_line(std::string_view line, CriteoLabel label_field,
                                             CategoricalIds categorical_ids,
                                             std::span<const int64_t> vocabulary_sizes,
                                             float& label, std::span<float> dense, int64_t* ids,
                                             size_t stride) {
  if (line.size() > static_cast<size_t>(kMaxLineBytes)) {
    return describe(LineError{.kind = LineError::Kind::kTooLong});
  }
  if (label_field == CriteoLabel::kFromFieldCount) {
    if (line.empty()) return describe(LineError{.kind = LineError::Kind::kEmpty});
    const int64_t fields = 1 + std::count(line.begin(), line.end(), '\t');
    if (fields == kNumFields - 1) {
      return "39 tab-separated fields: a line without its label, or a labelled line whose empty "
             "last field lost its tab; say which (recemb predict --labels no or --labels yes)";
    }
    if (fields != kNumFields) {
      return describe(LineError{.kind = LineError::Kind::kFieldCount, .detail = fields});
    }
    label_field = CriteoLabel::kPresent;
  }
  bool short_line = false;
  const std::optional<LineError> error =
      parse_line(line, label_field, categorical_ids, vocabulary_sizes, label, dense.data(), ids,
                 stride, short_line);
  if (!error) return std::nullopt;
  return describe(*error);
}

namespace {

// The value of 1 to 16 hexadecimal digits of either case; nullopt for anything else.
std::optional<uint64_t> hexadecimal_value(std::string_view field) {
  uint64_t value = 0;
  // from_chars of an unsigned type takes no sign and no "0x"; the length check keeps leading
  // zeros from smuggling in more than 16 digits.
  if (field.size() > kMaxHexDigits || !parse_whole(field, value, 16)) return std::nullopt;
  return value;
}

}  // namespace

std::optional<int64_t> categorical_field_id(int feature, std::string_view field,
                                            int64_t vocabulary_size) {
  if (field.empty()) return kMissingCategoricalId;
  const std::optional<uint64_t> value = hexadecimal_value(field);
  if (!value) return std::nullopt;
  return categorical_id(feature, *value, vocabulary_size);
}

int64_t categorical_key(std::string_view field) {
  const std::optional<uint64_t> value = hexadecimal_value(field);
  return value ? static_cast<int64_t>(*value) : string_key(field);
}

bool MalformedLines::add(const std::string& path, int64_t line, const std::string& reason) {
  if (!seen_.emplace(path, line).second) return false;
  lines_.emplace_back(path, line);
  if (messages_.size() < kMaxMalformedMessages) {
    messages_.push_back(path + ":" + std::to_string(line) + ": " + reason);
  }
  return true;
}

void MalformedLines::truncate(int64_t count) {
  while (this->count() > count) {
    seen_.erase(lines_.back());
    lines_.pop_back();
  }
  messages_.resize(std::min(messages_.size(), lines_.size()));
}

CriteoReader::CriteoReader(std::vector<std::string> paths, ReaderOptions options)
    : paths_(std::move(paths)),
      options_(std::move(options)),
      malformed_(options_.malformed != nullptr ? options_.malformed
                                               : std::make_shared<MalformedLines>()) {
  if (options_.ids == CategoricalIds::kHashedRows) {
    validate_vocabulary_sizes(options_.vocabulary_sizes, "CriteoReader");
  }
  if (options_.max_malformed < 0) {
    throw InvalidArgument("CriteoReader: max_malformed is " +
                          std::to_string(options_.max_malformed) + ", must be >= 0");
  }
  if (options_.epochs < 1) {
    throw InvalidArgument("CriteoReader: epochs is " + std::to_string(options_.epochs) +
                          ", must be >= 1");
  }
  if (paths_.empty()) throw InvalidArgument("CriteoReader: no input files");
  for (const std::string& path : paths_) {
    // The type first: opening a FIFO would wait for a writer.
    std::error_code error;
    if (std::filesystem::exists(path, error) && !std::filesystem::is_regular_file(path, error)) {
      throw InvalidArgument("CriteoReader: '" + path + "' is not a regular file (copy it first)");
    }
    try {
      plain_sizes_.push_back(plain_file_size(path));
    } catch (const std::system_error& failure) {
      throw InvalidArgument("CriteoReader: cannot open '" + path +
                            "': " + failure.code().message());
    }
  }
  const Cursor files_end{.file_index = paths_.size()};
  begin_cursor_ = options_.begin.empty() ? Cursor{} : parse_cursor(options_.begin, "begin");
  end_cursor_ = options_.end.empty() ? files_end : parse_cursor(options_.end, "end");
  const auto before = [](const Cursor& a, const Cursor& b) {
    return a.file_index < b.file_index || (a.file_index == b.file_index && a.offset < b.offset);
  };
  if (begin_cursor_.file_index >= paths_.size() || end_cursor_.file_index > paths_.size() ||
      !before(begin_cursor_, end_cursor_)) {
    throw InvalidArgument("CriteoReader: begin '" + options_.begin + "' and end '" + options_.end +
                          "' are not an ordered part of the first epoch of " +
                          std::to_string(paths_.size()) + " files");
  }
  buffer_.resize(kBufferBytes);
  const Cursor start = epoch_start(0);
  move_to(start.file_index, start.offset, start.line);
}

CriteoReader::Cursor CriteoReader::epoch_start(int64_t epoch) const {
  if (epoch >= options_.epochs) {
    return Cursor{.file_index = paths_.size() * static_cast<size_t>(options_.epochs)};
  }
  Cursor start = begin_cursor_;
  start.file_index += static_cast<size_t>(epoch) * paths_.size();
  return start;
}

bool CriteoReader::at_epoch_end() const {
  if (end_cursor_.file_index == paths_.size()) return false;  // the files' end: no line after it
  const size_t file = file_index_ % paths_.size();
  return file > end_cursor_.file_index ||
         (file == end_cursor_.file_index && offset_ >= end_cursor_.offset);
}

int64_t CriteoReader::next(ExampleBatch& batch, int64_t max_examples) {
  begin_batch(batch, max_examples);
  const Cursor start{.file_index = file_index_, .offset = offset_, .line = line_};
  const int64_t start_bytes = bytes_read_;
  const int64_t start_malformed = malformed_->count();
  const int64_t start_short = short_lines_;
  const auto stride = static_cast<size_t>(max_examples);
  int64_t count = 0;
  try {
    std::string_view line;
    bool terminated = true;
    while (count < max_examples) {
      const LineStatus status = read_line(line, terminated);
      if (status == LineStatus::kEnd) break;
      const bool crlf = line.ends_with('\r');
      if (crlf) line.remove_suffix(1);
      const auto i = static_cast<size_t>(count);
      bool short_line = false;
      const std::optional<LineError> error =
          status == LineStatus::kTooLong
              ? LineError{.kind = LineError::Kind::kTooLong}
              : parse_line(line, CriteoLabel::kPresent, options_.ids, options_.vocabulary_sizes,
                           batch.labels[i], batch.dense.data() + i * kNumDenseFeatures,
                           batch.categorical.data() + i, stride, short_line);
      const std::string& path = path_of(file_index_);
      if (options_.strict && (error || short_line || crlf || !terminated)) {
        const std::string why = error        ? describe(*error)
                                : short_line ? "a short line (fewer than 40 tab-separated fields)"
                                : crlf       ? "a line ended by \"\\r\\n\""
                                             : "the last line has no final '\\n'";
        throw InvalidArgument("CriteoReader: " + path + ":" + std::to_string(line_) + ": " + why +
                              ": data.strict = true refuses lines not in the canonical form (40 "
                              "fields, '\\n' ending every line); fix the file or set "
                              "data.strict = false");
      }
      if (!error.has_value()) {
        short_lines_ += short_line ? 1 : 0;
        ++count;
        continue;
      }
      if (malformed_->add(path, line_, describe(*error)) &&
          malformed_->count() > options_.max_malformed) {
        std::string message = "CriteoReader: '" + path +
                              "': " + std::to_string(malformed_->count()) +
                              " malformed lines, more than max_malformed = " +
                              std::to_string(options_.max_malformed) + "; the first:";
        for (const std::string& first : malformed_->messages()) message += "\n  " + first;
        throw InvalidArgument(message);
      }
    }
  } catch (...) {
    // All or nothing: the caller sees the reader as it was before the call.
    malformed_->truncate(start_malformed);
    short_lines_ = start_short;
    move_to(start.file_index, start.offset, start.line);
    bytes_read_ = start_bytes;
    finish_batch(batch, max_examples, 0);
    throw;
  }
  finish_batch(batch, max_examples, count);
  return count;
}

bool CriteoReader::next_line(std::string_view& line) {
  bool terminated = true;
  const LineStatus status = read_line(line, terminated);
  if (status == LineStatus::kTooLong) {
    line = line.substr(0, static_cast<size_t>(kMaxLineBytes) + 1);
  }
  return status != LineStatus::kEnd;
}

int64_t CriteoReader::skip_lines(int64_t count) {
  std::string_view line;
  bool terminated = true;
  int64_t skipped = 0;
  while (skipped < count && read_line(line, terminated) != LineStatus::kEnd) ++skipped;
  return skipped;
}

CriteoReader::LineStatus CriteoReader::read_line(std::string_view& line, bool& terminated) {
  const size_t num_files = paths_.size();
  const size_t end_index = num_files * static_cast<size_t>(options_.epochs);
  for (;;) {
    if (file_index_ == end_index) return LineStatus::kEnd;
    if (at_epoch_end()) {
      const Cursor start = epoch_start(static_cast<int64_t>(file_index_ / num_files) + 1);
      move_to(start.file_index, start.offset, start.line);
      continue;
    }
    if (file_ == nullptr) {
      file_ = std::make_unique<InputFile>(path_of(file_index_), options_.decompress_ahead);
      if (offset_ > 0) file_->seek(offset_);
    }
    const char* begin = buffer_.data() + begin_;
    const size_t available = end_ - begin_;
    const auto* newline = static_cast<const char*>(std::memchr(begin, '\n', available));
    if (newline != nullptr || (end_of_file_ && available > 0)) {
      const size_t length = newline != nullptr ? static_cast<size_t>(newline - begin) : available;
      const size_t consumed = length + (newline != nullptr ? 1 : 0);
      begin_ += consumed;
      offset_ += static_cast<int64_t>(consumed);
      bytes_read_ += static_cast<int64_t>(consumed);
      ++line_;
      line = std::string_view(begin, length);
      terminated = newline != nullptr;
      return length > kMaxLineBytes ? LineStatus::kTooLong : LineStatus::kLine;
    }
    if (end_of_file_) {
      const size_t next_file = file_index_ + 1;
      const Cursor start = next_file % num_files == 0
                               ? epoch_start(static_cast<int64_t>(next_file / num_files))
                               : Cursor{.file_index = next_file};
      move_to(start.file_index, start.offset, start.line);
      continue;
    }
    if (available > kMaxLineBytes) {
      // Too long to be a Criteo line: skip to its end without keeping it in memory, but for its
      // start (next_line).
      too_long_line_.assign(begin, static_cast<size_t>(kMaxLineBytes) + 1);
      line = too_long_line_;
      for (;;) {
        const size_t rest = end_ - begin_;
        const auto* end =
            static_cast<const char*>(std::memchr(buffer_.data() + begin_, '\n', rest));
        const size_t consumed =
            end != nullptr ? static_cast<size_t>(end - buffer_.data()) + 1 - begin_ : rest;
        begin_ += consumed;
        offset_ += static_cast<int64_t>(consumed);
        bytes_read_ += static_cast<int64_t>(consumed);
        terminated = end != nullptr;
        if (end != nullptr || !fill_buffer()) break;
      }
      ++line_;
      return LineStatus::kTooLong;
    }
    fill_buffer();
  }
}

bool CriteoReader::fill_buffer() {
  const size_t kept = end_ - begin_;
  std::memmove(buffer_.data(), buffer_.data() + begin_, kept);
  begin_ = 0;
  end_ = kept;
  size_t read = 0;
  try {
    read = file_->read(buffer_.data() + end_, buffer_.size() - end_);
  } catch (const DataLoss& error) {
    throw DataLoss("CriteoReader: " + path_of(file_index_) + ":" + std::to_string(line_ + 1) +
                   ": " + error.what());
  }
  if (read == 0) {
    end_of_file_ = true;
    return false;
  }
  end_ += read;
  return true;
}

void CriteoReader::move_to(size_t file_index, int64_t offset, int64_t line) {
  file_.reset();  // the next read opens path_of(file_index) at `offset`
  file_index_ = file_index;
  offset_ = offset;
  line_ = line;
  begin_ = 0;
  end_ = 0;
  end_of_file_ = false;
}

std::string CriteoReader::position() const {
  return std::string(kPositionPrefix) + std::to_string(file_index_) + ":" +
         std::to_string(offset_) + ":" + std::to_string(line_);
}

CriteoReader::Cursor CriteoReader::parse_cursor(std::string_view position, const char* what) const {
  const std::optional<std::array<int64_t, 3>> parsed = parse_position(position);
  if (!parsed.has_value()) {
    throw InvalidArgument(std::string("CriteoReader: ") + what + ": malformed position '" +
                          std::string(position) +
                          "', expected criteo:<file index>:<byte offset>:<line number>");
  }
  const auto [file_index, offset, line] = *parsed;
  const auto end_index = static_cast<int64_t>(paths_.size()) * options_.epochs;
  if (file_index > end_index || (file_index == end_index && (offset != 0 || line != 0)) ||
      (offset == 0) != (line == 0)) {
    throw InvalidArgument(std::string("CriteoReader: ") + what + ": position '" +
                          std::string(position) + "' does not fit a reader of " +
                          std::to_string(paths_.size()) + " files and " +
                          std::to_string(options_.epochs) + " epochs");
  }
  return Cursor{.file_index = static_cast<size_t>(file_index), .offset = offset, .line = line};
}

void CriteoReader::seek(std::string_view position) {
  const Cursor cursor = parse_cursor(position, "seek");
  if (cursor.file_index < paths_.size() * static_cast<size_t>(options_.epochs) &&
      cursor.offset > 0) {
    const std::string& path = path_of(cursor.file_index);
    // The byte before a line start is the '\n' that ended the previous line, or the last byte
    // of a file without a final '\n'.
    std::array<char, 2> bytes{};
    size_t read = 0;
    std::string reason;
    try {
      InputFile file(path);
      file.seek(cursor.offset - 1);
      read = file.read(bytes.data(), bytes.size());
    } catch (const std::exception& error) {
      reason = std::string(" (") + error.what() + ")";
    }
    if (read == 0 || (bytes[0] != '\n' && read == 2)) {
      throw InvalidArgument("CriteoReader::seek: position '" + std::string(position) +
                            "' is not the start of a line of '" + path + "'" + reason);
    }
  }
  move_to(cursor.file_index, cursor.offset, cursor.line);
  bytes_read_ = 0;
}

std::optional<int64_t> CriteoReader::bytes_before(size_t file, int64_t offset) const {
  int64_t bytes = offset;
  for (size_t f = 0; f < file; ++f) {
    if (!plain_sizes_[f]) return std::nullopt;
    bytes += *plain_sizes_[f];
  }
  return bytes;
}

std::optional<int64_t> CriteoReader::bytes_left(std::string_view position) const {
  const Cursor cursor = parse_cursor(position, "bytes_left");
  const size_t num_files = paths_.size();
  const auto epoch = static_cast<int64_t>(cursor.file_index / num_files);
  if (epoch >= options_.epochs) return 0;
  if (!bytes_before(num_files, 0)) return std::nullopt;  // a gzip file: sizes unknown
  const int64_t end = *bytes_before(end_cursor_.file_index, end_cursor_.offset);
  const int64_t begin = *bytes_before(begin_cursor_.file_index, begin_cursor_.offset);
  const int64_t here = *bytes_before(cursor.file_index % num_files, cursor.offset);
  return std::max<int64_t>(0, end - here) + (options_.epochs - epoch - 1) * (end - begin);
}

}  // namespace recemb::dlrm
