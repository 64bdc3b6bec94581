// A file read from start to end, plain or gzip-compressed: the one file of recemb that uses zlib.
// A gzip file is recognised by its magic bytes (1f 8b), whatever its name, and decompressed as it
// is read (members one after the other, as `zcat` does); any other file is read as it is. Every
// byte of a gzip file must belong to a member: bytes after a member that do not start another (a
// member whose header is damaged, or anything appended) are damaged data, as a corrupt or
// truncated member is, where `zcat` would only warn of "trailing garbage" (docs/training.md,
// "Criteo files: the exact rules"). Offsets count the bytes as read (decompressed). With
// `decompress_ahead`, a gzip file is decompressed by a thread of its own, a few MiB ahead of the
// reader (the reader's second thread: docs/training.md, "Reading speed").
#ifndef RECEMB_DLRM_INPUT_FILE_H_
#define RECEMB_DLRM_INPUT_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

struct z_stream_s;  // zlib's

namespace recemb::dlrm {

class InputFile {
 public:
  // Opens `path` for reading; std::system_error naming the path and the system's reason when it
  // cannot. Reads nothing yet (with `decompress_ahead` and a gzip file, a thread starts to).
  explicit InputFile(std::string path, bool decompress_ahead = false);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // Up to `size` bytes into `data`; fewer only at the end of the file (0 there), or, decompressing
  // ahead, at the end of a chunk of the thread's. A read error throws std::system_error, damaged
  // gzip data (corrupt, truncated, or bytes after a member that are not another) throws DataLoss
  // naming the file, the byte offset in it and the decompressed offset reached; both name the
  // path. Decompressing ahead, the error comes when the bytes before it are read.
  size_t read(char* data, size_t size);

  // Moves to decompressed byte `offset` (>= 0): a plain file seeks, a gzip file decompresses from
  // its start (or from the current offset when ahead) up to it. An offset past the end leaves
  // the file at its end (read() then returns 0). Errors as read()'s.
  void seek(int64_t offset);

  // Whether the file is gzip-compressed (its first two bytes are the gzip magic).
  bool compressed() const { return compressed_; }

  const std::string& path() const { return path_; }

 private:
  class Decompressor;  // the thread decompressing ahead

  // read() without the thread.
  size_t read_file(char* data, size_t size);
  size_t inflate_file(char* data, size_t size);
  // Back to the file's first byte (a gzip file: to its first member).
  void rewind();
  // Reads more compressed bytes into input_; false at the end of the file.
  bool refill_input();
  // The offset in the file of the next compressed byte to decompress.
  int64_t compressed_offset() const;
  [[noreturn]] void throw_damaged(const std::string& what) const;

  std::string path_;
  int fd_ = -1;
  bool compressed_ = false;
  int64_t offset_ = 0;  // decompressed bytes read from the file so far
  // A gzip file: zlib's stream, the compressed bytes read ahead of it, the file offset after
  // them, whether a member has begun and not ended, and whether the last one ended the file.
  std::unique_ptr<z_stream_s> stream_;
  std::vector<unsigned char> input_;
  int64_t input_end_ = 0;
  bool in_member_ = false;
  bool at_end_ = false;
  std::unique_ptr<Decompressor> ahead_;  // when decompressing ahead (a gzip file)
};

// The size of `path` in bytes when it is a plain file; nullopt for a gzip file (its decompressed
// size is only known by reading it). std::system_error as InputFile's constructor.
std::optional<int64_t> plain_file_size(const std::string& path);

}  // namespace recemb::dlrm

#endif  // RECEMB_DLRM_INPUT_FILE_H_
