// Reading the JSON documents recemb parses (the checkpoint manifest, the serving model's manifest
// and the configs inside them): a parse that bounds nesting, and a reader that tracks where each
// value is, so that every error names the document and the path:
//
//   checkpoint 'c': manifest.json: tables[2].config.dim: expected a 64-bit integer, got "4"
//
// The exception type is the document's: DataLoss for a file recemb wrote and reads back (damaged,
// truncated or foreign), InvalidArgument for input a caller gives. A message never quotes a value
// whole: what it shows of a value, key or parser message is cut to a few dozen characters.
#ifndef RECEMB_FORMAT_JSON_READER_H_
#define RECEMB_FORMAT_JSON_READER_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "format/json.h"

namespace recemb::format {

// Which exception a document's errors are.
enum class JsonSource {
  kFile,   // a file recemb wrote: DataLoss
  kInput,  // a caller's input: InvalidArgument
};

struct JsonDocument {
  std::string name;  // how messages name it: "checkpoint 'c': manifest.json"
  JsonSource source = JsonSource::kInput;
};

// The deepest nesting of arrays and objects parse_json accepts. recemb's documents nest at most 7
// levels (manifest, tables, a table, config, optimizer, learning rate, boundaries); the bound
// keeps a hostile document from exhausting the stack of any recursive walk over it.
inline constexpr int kMaxJsonDepth = 32;

// Throws the document's exception: "<name>: <problem>".
[[noreturn]] void fail(const JsonDocument& document, const std::string& problem);

// Parses `text`, the whole document. Throws the document's exception for text that is not JSON
// (including a number beyond double's range, such as 1e400), nests deeper than kMaxJsonDepth, or
// repeats a key in an object (naming its path: "tables[1].config.dim: the key appears twice").
Json parse_json(std::string_view text, const JsonDocument& document);

// A short form of `value` for messages: scalars as JSON, strings, arrays and objects cut after a
// few dozen characters ("[1,2,3,4,5,...").
std::string describe(const Json& value);

// How much of an untrusted value, key or name a message quotes.
inline constexpr size_t kMaxQuotedLength = 40;

// `text` cut after `max_length` characters (then "..."), for quoting untrusted text in messages.
std::string truncated(std::string_view text, size_t max_length = kMaxQuotedLength);

// A value of a document and its path ("tables[2].config"; empty for the root). Holds references:
// the document and the value outlive the reader and the readers made from it.
class JsonReader {
 public:
  JsonReader(const Json& value, const JsonDocument& document)
      : value_(&value), document_(&document) {}

  const Json& json() const { return *value_; }
  const std::string& path() const { return path_; }
  // A reader of `value` (e.g. an edited copy of this reader's value) at this reader's path.
  JsonReader at_same_path(const Json& value) const { return child(value, path_); }

  // Throws the document's exception: "<document>: <path>: <problem>" (no path at the root).
  [[noreturn]] void fail(const std::string& problem) const;

  // Objects. Each throws unless the value is an object.
  // The member `key`; "<path>.<key>: required but missing" when it is absent.
  JsonReader member(std::string_view key) const;
  // The member `key`, or nullopt when it is absent.
  std::optional<JsonReader> find(std::string_view key) const;
  // Throws for a key not in `known`: "<path>.<key>: not a known field (known: a, b)".
  void expect_only(const std::vector<std::string_view>& known) const;
  // Calls visit(key, member) for each member, in document order.
  template <class Visit>
  void for_each_member(Visit&& visit) const {
    expect_object();
    for (auto item = value_->begin(); item != value_->end(); ++item) {
      visit(item.key(), child(item.value(), member_path(item.key())));
    }
  }

  // Arrays. Each throws unless the value is an array.
  size_t size() const;
  JsonReader element(size_t index) const;  // index < size()

  // Scalars. Each throws "<path>: expected ..., got <value>" for another type or range.
  std::string string() const;
  // The string, which must equal `expected`.
  void expect_string(std::string_view expected) const;
  bool boolean() const;
  // An integer in [minimum, int64 max].
  int64_t integer(int64_t minimum = std::numeric_limits<int64_t>::min()) const;
  uint64_t unsigned_integer() const;
  // A number (integer or floating point) as a double.
  double number() const;

  void expect_object() const;
  void expect_array() const;

 private:
  JsonReader(const Json& value, const JsonDocument& document, std::string path)
      : value_(&value), document_(&document), path_(std::move(path)) {}
  JsonReader child(const Json& value, std::string path) const {
    return JsonReader(value, *document_, std::move(path));
  }
  std::string member_path(std::string_view key) const;

  const Json* value_;
  const JsonDocument* document_;
  std::string path_;
};

// A checksum written as 16 lowercase hex digits (format/checksum.h).
uint64_t checksum_from_json(const JsonReader& json);

}  // namespace recemb::format

#endif  // RECEMB_FORMAT_JSON_READER_H_
