// A streaming reader of Criteo click logs in their text format (the Kaggle Display Advertising
// Challenge train.txt and the 1TB day_N files), plain or gzip-compressed (dlrm/input_file.h).
//
// Format: one example per line, lines ended by '\n' (a '\r' before it is dropped; the last line
// may lack the '\n'), 40 fields separated by '\t':
//   label     "0" or "1"
//   I1..I13   empty, or a decimal integer in int64 range (optional '-', digits). The batch holds
//             dense_value(x) = log(1 + max(x, 0)); empty means x = 0.
//   C1..C26   empty (missing), or 1 to 16 hexadecimal digits of either case: a value v < 2^64.
//             The batch holds categorical_id(f, v, vocabulary_size_f); missing is id 0. With
//             CategoricalIds::kRawKeys, any field is valid and the batch holds its
//             categorical_key.
// A "short line" of fewer than 40 fields (a file whose trailing whitespace was stripped loses the
// tabs of empty last fields) has its missing trailing fields empty; it is read and counted.
// Anything else makes the line malformed: more than 40 fields, an empty line, a bad label,
// integer or hexadecimal field, or a line longer than kMaxLineBytes. A malformed line is skipped,
// never partly used, and counted once (in every epoch the same line); the first
// kMaxMalformedMessages are kept as "<file>:<line>: <reason>" (lines count from 1 in each file).
// Once the count, shared by the readers of a run (MalformedLines), exceeds max_malformed, next()
// throws. ReaderOptions::strict refuses every line not in the canonical
// form (40 fields, '\n' alone ending it, the last one included).
#ifndef RECEMB_DLRM_CRITEO_READER_H_
#define RECEMB_DLRM_CRITEO_READER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dlrm/example_batch.h"
#include "dlrm/input_file.h"
#include "dlrm/splitmix.h"

namespace recemb::dlrm {

inline constexpr int64_t kMaxLineBytes = 4096;  // a valid Criteo line has fewer than 1000
inline constexpr size_t kMaxMalformedMessages = 10;

// The id of a missing (empty) categorical value in every table.
inline constexpr int64_t kMissingCategoricalId = 0;

// The table row of value `value` of categorical feature `feature` (0-based: C1 is 0): rows 1 ..
// vocabulary_size - 1 hold the hashed values, row 0 is reserved for missing values.
//   salt_f = splitmix64_mix((f + 1) * kGoldenGamma)       (mod 2^64)
//   id     = 1 + splitmix64_mix(value XOR salt_f) mod (vocabulary_size - 1)
// A table of one row maps everything to row 0. Integer arithmetic only: the same ids on every
// platform and in every run. Requires vocabulary_size >= 1.
constexpr int64_t categorical_id(int feature, uint64_t value, int64_t vocabulary_size) {
  if (vocabulary_size <= 1) return kMissingCategoricalId;
  const uint64_t salt = splitmix64_mix(static_cast<uint64_t>(feature + 1) * kGoldenGamma);
  return 1 + static_cast<int64_t>(splitmix64_mix(value ^ salt) %
                                  static_cast<uint64_t>(vocabulary_size - 1));
}

// The table row of a C<feature + 1> field of a line, as the reader maps it: kMissingCategoricalId
// for an empty field, categorical_id of the value for 1 to 16 hexadecimal digits of either case,
// nullopt for anything else (the line is malformed). `recemb hash` exposes this mapping.
std::optional<int64_t> categorical_field_id(int feature, std::string_view field,
                                            int64_t vocabulary_size);

// The key of a C<k> field in a dynamic table (CategoricalIds::kRawKeys): the value v of 1 to 16
// hexadecimal digits of either case as an int64 (two's complement: v >= 2^63 is negative);
// anything else, the empty (missing) field included, string_key(field) (recemb/string_key.h),
// so that missing values share a key of their own, as they share row 0 of a hashed table.
int64_t categorical_key(std::string_view field);

// Whether a line starts with the label field. Training data has it (kPresent). Lines to predict
// may omit it (kAbsent: 39 fields, as in Criteo's test sets), or say it by their field count
// (kFromFieldCount: 40 fields have it; any other count is refused, since a line of 39 fields may
// be one without its label or a labelled one whose empty last field lost its tab, and the two
// read every field differently: docs/serving.md, "recemb predict").
enum class CriteoLabel { kPresent, kAbsent, kFromFieldCount };

// Parses one line (without its '\n' and '\r') as CriteoReader parses each line: `label` from the
// label field (kPresent; untouched for kAbsent), dense[0..13) the dense_value of I1..I13,
// ids[f * stride] the categorical_id of C<f+1> in a table of vocabulary_sizes[f] rows (`ids`
// kHashedRows: 26 sizes >= 1, unchecked) or its categorical_key (kRawKeys: sizes unused). A short
// line (fewer fields than expected, kPresent or kAbsent) has its missing trailing fields empty, as
// the reader reads it. Returns why a malformed line is refused (as CriteoReader's messages say it:
// "C3 'xyz' is not 1 to 16 hexadecimal digits", "empty line"), or nullopt; the outputs may then be
// partly written. `dense` has 13 floats.
std::optional<std::string> parse_criteo_line(std::string_view line, CriteoLabel label_field,
                                             CategoricalIds categorical_ids,
                                             std::span<const int64_t> vocabulary_sizes,
                                             float& label, std::span<float> dense, int64_t* ids,
                                             size_t stride);

// The malformed lines of a run, which its readers share (ReaderOptions::malformed): each distinct
// line, a (file, line number), counted once, whichever reader or epoch met it, so that
// data.max_malformed bounds the run's malformed lines (docs/training.md, "Criteo files: the exact
// rules"). Not thread-safe: the readers sharing it read one at a time.
class MalformedLines {
 public:
  // Distinct malformed lines met, and the messages of the first kMaxMalformedMessages of them
  // ("<file>:<line>: <reason>").
  int64_t count() const { return static_cast<int64_t>(lines_.size()); }
  std::span<const std::string> messages() const { return messages_; }

  // Notes line `line` of `path` as malformed for `reason`; false if it was already.
  bool add(const std::string& path, int64_t line, const std::string& reason);
  // Forgets the lines noted after the first `count` (a reader's call that changed nothing).
  void truncate(int64_t count);

 private:
  std::vector<std::pair<std::string, int64_t>> lines_;  // in the order met
  std::set<std::pair<std::string, int64_t>> seen_;
  std::vector<std::string> messages_;
};

struct ReaderOptions {
  // The table size of C1..C26 (required for kHashedRows, unused for kRawKeys): 26 values >= 1,
  // e.g. preset_vocabulary_sizes(...).
  std::vector<int64_t> vocabulary_sizes = {};
  CategoricalIds ids = CategoricalIds::kHashedRows;
  // Malformed lines tolerated (skipped); one more makes next() throw. >= 0.
  int64_t max_malformed = 100;
  // Where the malformed lines are counted, against max_malformed: shared by the readers of a run
  // (the held-out set's and the training's); null: the reader's own.
  std::shared_ptr<MalformedLines> malformed = nullptr;
  // Times the files are read (>= 1): after the last one, the first again (data is one epoch).
  int64_t epochs = 1;
  // The part of the files each epoch reads: from position `begin` up to position `end` (lines at
  // or after it are not read), both position()s of a reader of the same files in its first
  // epoch; empty: the files' start, their end. The position of a reader opened with a `begin`
  // is `begin`.
  std::string begin = {};
  std::string end = {};
  // Refuse (InvalidArgument naming file and line) any line not in the canonical form: short,
  // malformed, ended by "\r\n", or the last line without its '\n' (data.strict).
  bool strict = false;
  // Decompress gzip files on a second thread, ahead of the parsing (InputFile's
  // decompress_ahead; data.reader_threads = 2).
  bool decompress_ahead = false;
};

// Reads the files one after the other, in the order given, through a 1 MiB buffer (memory does not
// grow with the files); gzip files are decompressed as they are read. Not thread-safe. Files must
// be regular files (not pipes).
class CriteoReader final : public ExampleSource {
 public:
  // Validates the options (InvalidArgument naming the field and value) and that every path opens
  // as a regular file (InvalidArgument naming the path and the system's reason); reads nothing
  // but the files' first bytes (gzip or not). At least one path.
  CriteoReader(std::vector<std::string> paths, ReaderOptions options);

  // ExampleSource: the next max_examples valid lines (fewer at the end of the last file), skipping
  // malformed ones. When the malformed lines counted since construction exceed max_malformed,
  // throws InvalidArgument naming the file, the count and the first malformed lines; the reader
  // (position, counts, messages) is then as before the call and `batch` is empty. A read error
  // throws std::system_error naming the file, damaged gzip data DataLoss naming the file and the
  // line it was reading; the reader is then as before the call, as for too many malformed lines.
  // With strict, the first non-canonical line throws InvalidArgument naming file and line.
  int64_t next(ExampleBatch& batch, int64_t max_examples) override;

  // "criteo:<file index>:<byte offset>:<line number>" of the next line to read, e.g.
  // "criteo:0:1048576:2950", the offset in decompressed bytes; "criteo:<number of files x
  // epochs>:0:0" once all epochs are read. In epoch e (from 0), file f's index is e x files + f.
  std::string position() const override;

  // Accepts a position() of a reader of the same files and epochs: the file index must exist, the
  // offset lie in the file and start a line (0, the file's end, or just after a '\n'; a gzip file
  // is decompressed up to the offset to check it). Otherwise throws InvalidArgument (naming the
  // file for an offset that does not fit it) and changes nothing.
  void seek(std::string_view position) override;

  // The next line as it is, for a caller that parses it itself (recemb predict, with
  // parse_criteo_line): false at the end of the data; else `line` holds it without its '\n' (a
  // '\r' before it kept), valid until the next call, and a line longer than kMaxLineBytes only its
  // first kMaxLineBytes + 1 bytes (too long for parse_criteo_line). Lines are framed as next()
  // frames them, plain or gzip, and neither parsed nor counted. Errors as next()'s read errors.
  bool next_line(std::string_view& line);

  // Moves past the next `count` lines (fewer at the end of the data) without parsing or counting
  // them, and returns how many it passed.
  int64_t skip_lines(int64_t count);

  // The decompressed bytes from `position` (a position() of this reader) to the end of the data,
  // epochs and `end` included; nullopt when a file is gzip-compressed (its size is unknown).
  std::optional<int64_t> bytes_left(std::string_view position) const;

  // The decompressed bytes of the lines next() returned or skipped since construction or the last
  // seek() (their '\n' included).
  int64_t bytes_read() const { return bytes_read_; }

  // Malformed lines skipped (by this reader and those sharing its MalformedLines), each distinct
  // line once whatever the epoch, and the messages of the first kMaxMalformedMessages of them
  // ("<file>:<line>: <reason>").
  int64_t malformed_lines() const { return malformed_->count(); }
  std::span<const std::string> malformed_messages() const { return malformed_->messages(); }
  // Short lines read since construction (fewer than 40 fields, the missing ones taken as empty).
  int64_t short_lines() const { return short_lines_; }

 private:
  enum class LineStatus { kLine, kTooLong, kEnd };
  struct Cursor {
    size_t file_index = 0;
    int64_t offset = 0;
    int64_t line = 0;
  };

  // The next line (without its '\n', with a '\r' before it), its status, and the cursor moved
  // past it; `terminated`: the line ended with '\n'.
  LineStatus read_line(std::string_view& line, bool& terminated);
  // Reads more of the current file after the buffered bytes; false at the end of the file.
  bool fill_buffer();
  // Moves the cursor (opening that file), emptying the buffer.
  void move_to(size_t file_index, int64_t offset, int64_t line);

  // Where epoch `epoch` starts; whether the cursor has reached its epoch's end.
  Cursor epoch_start(int64_t epoch) const;
  bool at_epoch_end() const;
  // Decompressed bytes before `offset` of file `file` (of the first epoch) in the files'
  // concatenation; nullopt when a file before it is gzip-compressed.
  std::optional<int64_t> bytes_before(size_t file, int64_t offset) const;
  // The cursor of a position() of these files (InvalidArgument naming `what` when malformed or
  // out of range).
  Cursor parse_cursor(std::string_view position, const char* what) const;
  // The file of cursor index `file_index`.
  const std::string& path_of(size_t file_index) const { return paths_[file_index % paths_.size()]; }

  std::vector<std::string> paths_;
  ReaderOptions options_;
  std::vector<std::optional<int64_t>> plain_sizes_;  // per file; nullopt: gzip
  Cursor begin_cursor_;                              // options_.begin
  Cursor end_cursor_;                                // options_.end (file index = files: none)
  // The cursor: the next line starts at byte offset_ of paths_[file_index_], after line_ lines.
  size_t file_index_ = 0;
  int64_t offset_ = 0;
  int64_t line_ = 0;
  std::unique_ptr<InputFile> file_;  // path_of(file_index_) once opened
  // buffer_[begin_, end_) holds the file's bytes from offset_ on; end_of_file_: no more after it.
  std::vector<char> buffer_;
  size_t begin_ = 0;
  size_t end_ = 0;
  bool end_of_file_ = false;
  int64_t bytes_read_ = 0;
  std::shared_ptr<MalformedLines> malformed_;
  int64_t short_lines_ = 0;
  std::string too_long_line_;  // the start of the last line skipped as too long (next_line)
};

}  // namespace recemb::dlrm

#endif  // RECEMB_DLRM_CRITEO_READER_H_
