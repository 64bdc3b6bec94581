// POSIX file helpers shared by recemb's writers and readers (checkpoints, serving models): full
// writes, fsync of files and directories, atomic publication by rename, exact positioned reads.
//
// Errors: a missing file or a file shorter than a read needs throws InvalidArgument naming the
// file (a damaged or incomplete checkpoint is bad input, as a bad id is); any other failing system
// call throws std::system_error whose message names the call, the path and strerror, e.g.
// "fsync '/ckpt/.tmp-ckpt-000000000042-1234/t0.parameters.f32': Input/output error".
#ifndef RECEMB_FORMAT_FILE_IO_H_
#define RECEMB_FORMAT_FILE_IO_H_

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <utility>

namespace recemb::format {

// A file open for writing, created (or truncated) by create(). Move-only; the destructor closes
// it and ignores errors, so a writer that cares (every one) calls close().
class OutputFile {
 public:
  static OutputFile create(const std::filesystem::path& path);
  OutputFile(OutputFile&& other) noexcept;
  OutputFile& operator=(OutputFile&& other) noexcept;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();

  // Writes all of `bytes` at the current end, retrying short writes and EINTR.
  void write(std::span<const std::byte> bytes);
  // fsync: the data written so far survives a crash of the machine.
  void sync();
  // Closes the file, reporting a failure (a delayed write error shows here on some file systems).
  void close();

  const std::filesystem::path& path() const { return path_; }

 private:
  OutputFile(int fd, std::filesystem::path path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::filesystem::path path_;
};

// A file open for reading. Move-only; closed by the destructor.
class InputFile {
 public:
  // InvalidArgument if `path` does not exist.
  static InputFile open(const std::filesystem::path& path);
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&& other) noexcept;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();

  // The size when it was opened.
  uint64_t size() const { return size_; }
  // Reads exactly bytes.size() bytes at `offset`, retrying short reads and EINTR. Throws
  // InvalidArgument naming the file if it ends before offset + bytes.size() (truncated); the
  // contents of `bytes` are then unspecified.
  void read_at(uint64_t offset, std::span<std::byte> bytes) const;

  const std::filesystem::path& path() const { return path_; }

 private:
  InputFile(int fd, uint64_t size, std::filesystem::path path)
      : fd_(fd), size_(size), path_(std::move(path)) {}
  int fd_ = -1;
  uint64_t size_ = 0;
  std::filesystem::path path_;
};

// The whole file as a string; InvalidArgument if it is missing or larger than max_bytes.
std::string read_file(const std::filesystem::path& path, uint64_t max_bytes);

// Creates (or truncates) `path`, writes `bytes`, fsyncs and closes it.
void write_file(const std::filesystem::path& path, std::span<const std::byte> bytes);

// fsync of a directory: makes the creation, renaming and removal of its entries durable.
void sync_directory(const std::filesystem::path& directory);

// Renames `from` (a file or a directory) to `to` in one atomic step, then fsyncs the directory
// holding `to`, so that after a crash `to` is either absent (or its old version) or complete.
// `from` must be complete and synced already (OutputFile::sync, sync_directory). Both must be on
// the same file system; an existing directory `to` must be empty.
void publish(const std::filesystem::path& from, const std::filesystem::path& to);

// Writes the file `path` atomically: write(file) fills a new temporary file in path's directory
// (".<name>.tmp-<pid>-<n>", unique among concurrent writers of this and other processes), which is
// then fsynced, closed and published over `path` (see publish), so that `path` never holds a
// partial file, not even after a crash. On any throw, from `write` or a failing system call, the
// temporary file is removed and `path` is as it was (absent, or its previous version). A missing
// directory throws std::system_error (ENOENT) naming `path`; other failures name the call and the
// file it failed on.
void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(OutputFile& file)>& write);

}  // namespace recemb::format

#endif  // RECEMB_FORMAT_FILE_IO_H_
