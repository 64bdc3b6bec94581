// File helpers shared by recemb's writers and readers (checkpoints, serving models), on the file
// system in use (support/file_system.h): full writes, fsync of files and directories, atomic
// publication by rename, exact positioned reads.
//
// Errors: a file shorter than a read needs throws DataLoss naming the file (truncated); a missing
// file throws std::system_error ENOENT, and any other failing system call std::system_error whose
// message names the call, the path and strerror, e.g.
// "fsync '/ckpt/.tmp-ckpt-000000000042-1234/t0.parameters.f32': Input/output error". A path that
// is not a regular file (a FIFO, a device) throws InvalidArgument, without blocking.
#ifndef RECEMB_SUPPORT_FILE_IO_H_
#define RECEMB_SUPPORT_FILE_IO_H_

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "support/file_system.h"

namespace recemb::support {

// A file open for writing, created (or truncated) by create(), written from its start. Move-only;
// the destructor closes it and ignores errors, so a writer that cares (every one) calls close().
class OutputFile {
 public:
  static OutputFile create(const std::filesystem::path& path);

  // Writes all of `bytes` at the current end, retrying short writes and EINTR.
  void write(std::span<const std::byte> bytes);
  // fsync: the data written so far survives a crash of the machine.
  void sync() { file_->sync(); }
  // Closes the file, reporting a failure (a delayed write error shows here on some file systems).
  void close() { file_->close(); }

  const std::filesystem::path& path() const { return path_; }

 private:
  OutputFile(std::unique_ptr<WritableFile> file, std::filesystem::path path)
      : file_(std::move(file)), path_(std::move(path)) {}
  std::unique_ptr<WritableFile> file_;
  std::filesystem::path path_;
};

// A regular file open for reading. Move-only; closed by the destructor.
class InputFile {
 public:
  // std::system_error ENOENT if `path` does not exist; InvalidArgument if it is not a regular file.
  static InputFile open(const std::filesystem::path& path);

  // The size when it was opened.
  uint64_t size() const { return file_->size(); }
  // Reads exactly bytes.size() bytes at `offset`. Throws DataLoss naming the file if it ends
  // before offset + bytes.size() (truncated); the contents of `bytes` are then unspecified.
  void read_at(uint64_t offset, std::span<std::byte> bytes) const;

  const std::filesystem::path& path() const { return path_; }

 private:
  InputFile(std::unique_ptr<ReadableFile> file, std::filesystem::path path)
      : file_(std::move(file)), path_(std::move(path)) {}
  std::unique_ptr<ReadableFile> file_;
  std::filesystem::path path_;
};

// The whole file as a string; DataLoss if it is larger than max_bytes.
std::string read_file(const std::filesystem::path& path, uint64_t max_bytes);

// Creates (or truncates) `path`, writes `bytes`, fsyncs and closes it.
void write_file(const std::filesystem::path& path, std::span<const std::byte> bytes);

// Renames `from` (a file or a directory) to `to` in one atomic step, then fsyncs the directory
// holding `to`, so that after a crash `to` is either absent (or its old version) or complete.
// `from` must be complete and synced already (OutputFile::sync, sync_directory). Both must be on
// the same file system; an existing directory `to` must be empty.
void publish(const std::filesystem::path& from, const std::filesystem::path& to);

// Writes the file `path` atomically: write(file) fills a new temporary file in path's directory
// (".<name>.tmp-<pid>-<n>", unique among concurrent writers of this and other processes), which is
// then fsynced, closed and published over `path` (see publish), so that `path` never holds a
// partial file, not even after a crash. On any throw, from `write` or a failing system call, the
// temporary file is removed (if the file system still lets it) and `path` is as it was (absent, or
// its previous version). A missing directory throws std::system_error (ENOENT) naming `path`; other
// failures name the call and the file it failed on.
void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(OutputFile& file)>& write);

}  // namespace recemb::support

#endif  // RECEMB_SUPPORT_FILE_IO_H_
