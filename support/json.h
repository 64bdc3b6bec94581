// JSON, the one file that includes nlohmann's JSON library (docs/architecture.md, "The support
// layer"). Four tools, one error wording:
//
// - parse_json and JsonReader, for the documents recemb reads whole (the checkpoint manifest, the
//   serving model's manifest, the configs inside them, the trainer's metrics.jsonl): a parse that
//   bounds nesting and refuses repeated keys, and a reader that tracks where each value is, so
//   that every error names the document and the path:
//
//     checkpoint 'c': manifest.json: tables[2].config.dim: expected a 64-bit integer, got "4"
//
//   The exception type is the document's: DataLoss for a file recemb wrote and reads back
//   (damaged, truncated or foreign), InvalidArgument for input a caller gives.
// - JsonEvents, for requests decoded as their text streams past (no tree is built, so a request
//   takes the memory of what it decodes into).
// - JsonWriter, for every JSON recemb writes as text (the server's answers, summary.json,
//   metrics.jsonl): strings escaped, numbers that read back.
// - excerpt and describe, for quoting untrusted text and values in messages: never whole, a few
//   dozen characters at most, control bytes escaped.
#ifndef RECEMB_SUPPORT_JSON_H_
#define RECEMB_SUPPORT_JSON_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace recemb::support {

// A parsed document. Ordered objects, so a manifest written from a tree lists its keys in the order
// they were set.
using Json = nlohmann::ordered_json;
using JsonError = nlohmann::json::exception;


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
// ("not valid JSON: <the parser's reason>", including a number beyond double's range, such as
// 1e400), nests deeper than kMaxJsonDepth, or repeats a key in an object (naming its path:
// "tables[1].config.dim: the key appears twice").
Json parse_json(std::string_view text, const JsonDocument& document);

// A short form of `value` for messages: scalars as JSON, strings, arrays and objects cut after a
// few dozen characters ("[1,2,3,4,5,...").
std::string describe(const Json& value);

// How much of an untrusted value, key or name a message quotes.
inline constexpr size_t kMaxQuotedLength = 40;

// `text` as messages quote untrusted text (a key, a name, a request's path): its first
// `max_length` bytes, then "..." when it was longer, each byte below 0x20 and 0x7f written \xNN (a
// NUL would end the message, which is a C string, and other control bytes would garble a
// terminal). UTF-8 is kept; the cut may split a sequence.
std::string excerpt(std::string_view text, size_t max_length = kMaxQuotedLength);

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

// A scalar value of a streamed document, as the parser gives it.
struct JsonScalar {
  enum class Kind { kNull, kBoolean, kInteger, kUnsigned, kFloat, kString };
  Kind kind = Kind::kNull;
  bool boolean = false;         // kBoolean
  int64_t integer = 0;          // kInteger (a negative integer)
  uint64_t unsigned_value = 0;  // kUnsigned (a non-negative integer)
  double number = 0;            // kFloat
  std::string_view text = {};   // kFloat: as written; kString: the string (valid in the event)

  bool is_number() const;
  double as_double() const;  // a number's value
  // As written in the document, for messages: a string quoted, cut and escaped by excerpt.
  std::string describe() const;
};

// A SAX handler of nlohmann's parser, for decoders of documents that stream past: every scalar
// comes to scalar(), the structure to the start_/end_/key events of nlohmann::json_sax. Text that
// is not JSON (including numbers beyond double's range, such as 1e400) throws
// InvalidArgument("not valid JSON: <the parser's reason>"), and so does a binary value (which JSON
// text never has). The decoder bounds nesting itself (it knows what may come next).
class JsonEvents : public nlohmann::json_sax<nlohmann::json> {
 public:
  // Feeds the events of `text` to this handler, which throws to refuse them.
  void parse(std::string_view text);

  virtual bool scalar(const JsonScalar& value) = 0;

  bool null() final;
  bool boolean(bool value) final;
  bool number_integer(number_integer_t value) final;
  bool number_unsigned(number_unsigned_t value) final;
  bool number_float(number_float_t value, const string_t& text) final;
  bool string(string_t& value) final;
  bool binary(binary_t& value) final;
  bool parse_error(size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& error) final;
};

// A JSON string of `text`, quoted and escaped; bytes that are not UTF-8 (a cut quote of a request)
// show as U+FFFD.
std::string json_string(std::string_view text);

// Writes JSON text as it goes, without a tree (a tree's nodes allocate one by one; the text is one
// buffer, reserved ahead where its size is known). Strings are escaped as json_string does;
// numbers are the shortest text that reads back as the same float or double
// (support/number_text.h), -0 as -0.0 (a reader takes "-0" for the integer 0), NaN and infinities
// null (JSON has no text for them). Two layouts:
//   kLine:     {"step": 10, "loss": 0.5, "ranks": [0, 1]}
//   kIndented: each member and element on its own line, two spaces deeper per level, as Python's
//              json.dumps(..., indent=2) writes it ("{}" and "[]" when empty).
// The calls must make a document: key() before each value of an object and only there; each
// begin_ closed by its end_. (A writer's caller is recemb's code, not input: misuse is a bug.)
class JsonWriter {
 public:
  enum class Layout { kLine, kIndented };

  explicit JsonWriter(Layout layout = Layout::kLine) : layout_(layout) {}

  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view name);

  JsonWriter& string(std::string_view value);
  JsonWriter& integer(int64_t value);
  JsonWriter& unsigned_integer(uint64_t value);
  JsonWriter& number(double value);
  JsonWriter& number(float value);
  JsonWriter& boolean(bool value);
  JsonWriter& null();
  // Begins a value the caller appends as JSON text to the returned buffer (a list of
  // activations, written by serve/'s append_values); the next call of this writer ends it.
  std::string& raw_value();

  // Reserves room for `bytes` more bytes of text.
  void reserve(size_t bytes) { text_.reserve(text_.size() + bytes); }
  const std::string& text() const { return text_; }
  std::string take() { return std::move(text_); }

 private:
  void begin_value();
  void begin(char bracket);
  void end(char bracket);
  void new_line();

  Layout layout_;
  std::string text_;
  std::vector<bool> empty_;  // per open array or object: no value yet
  bool after_key_ = false;
};

}  // namespace recemb::support

#endif  // RECEMB_SUPPORT_JSON_H_
