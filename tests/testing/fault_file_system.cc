#include "testing/fault_file_system.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <system_error>
#include <utility>

namespace recemb::test {
namespace {

namespace fs = std::filesystem;

// One spelling per path, so that the states and entries of a path are found whatever the
// caller's spelling.
fs::path normal(const fs::path& path) {
  fs::path result = fs::absolute(path).lexically_normal();
  return result.has_filename() ? result : result.parent_path();
}

bool is_under(const fs::path& path, const fs::path& directory) {
  const std::string prefix = directory.string() + "/";
  return path == directory || path.string().starts_with(prefix);
}

std::string contents(const fs::path& path) {
  std::ifstream stream(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
}

[[noreturn]] void throw_fault(int error, const std::string& what) {
  throw std::system_error(error, std::generic_category(), what + " (injected)");
}

}  // namespace

std::string fault_point_name(FaultPoint point) {
  switch (point) {
    case FaultPoint::kWrite:
      return "write";
    case FaultPoint::kSync:
      return "fsync";
    case FaultPoint::kRename:
      return "rename";
    case FaultPoint::kSyncDirectory:
      return "directory fsync";
  }
  return "?";
}

// A file open for writing through a FaultFileSystem.
class FaultWritableFile final : public support::WritableFile {
 public:
  FaultWritableFile(FaultFileSystem& owner, std::unique_ptr<support::WritableFile> file,
                    fs::path path)
      : owner_(owner), file_(std::move(file)), path_(std::move(path)) {}

  void append(std::span<const std::byte> bytes) override {
    write([&](std::span<const std::byte> part) { file_->append(part); }, bytes);
  }

  void write_at(uint64_t offset, std::span<const std::byte> bytes) override {
    write([&](std::span<const std::byte> part) { file_->write_at(offset, part); }, bytes);
  }

  void resize(uint64_t bytes) override {
    const std::lock_guard lock(owner_.mutex_);
    owner_.before(std::nullopt, "ftruncate '" + path_.string() + "'");
    owner_.mark_dirty(path_);
    file_->resize(bytes);
  }

  void sync() override {
    const std::lock_guard lock(owner_.mutex_);
    owner_.before(FaultPoint::kSync, "fsync '" + path_.string() + "'");
    file_->sync();
    owner_.mark_synced(path_);
  }

  void close() override {
    const std::lock_guard lock(owner_.mutex_);
    owner_.before(std::nullopt, "close '" + path_.string() + "'");
    file_->close();
  }

 private:
  template <class Write>
  void write(Write&& write_bytes, std::span<const std::byte> bytes) {
    const std::lock_guard lock(owner_.mutex_);
    const std::string what = "write '" + path_.string() + "'";
    const bool short_write = owner_.before(FaultPoint::kWrite, what);
    owner_.mark_dirty(path_);
    if (!short_write) {
      write_bytes(bytes);
      return;
    }
    write_bytes(bytes.first(bytes.size() / 2));
    throw_fault(owner_.fail_error_, what);
  }

  FaultFileSystem& owner_;
  std::unique_ptr<support::WritableFile> file_;
  fs::path path_;
};

// A file open for reading through a FaultFileSystem.
class FaultReadableFile final : public support::ReadableFile {
 public:
  FaultReadableFile(FaultFileSystem& owner, std::unique_ptr<support::ReadableFile> file,
                    fs::path path)
      : owner_(owner), file_(std::move(file)), path_(std::move(path)) {}

  uint64_t size() const override { return file_->size(); }

  size_t read_at(uint64_t offset, std::span<std::byte> bytes) const override {
    size_t max_bytes = bytes.size();
    {
      const std::lock_guard lock(owner_.mutex_);
      if (owner_.crashed_) throw SimulatedCrash();
      const int nth = ++owner_.reads_;
      if (nth == owner_.fail_read_nth_) {
        throw_fault(owner_.fail_read_error_, "read '" + path_.string() + "'");
      }
      if (nth == owner_.short_read_nth_) max_bytes = std::min(max_bytes, owner_.short_read_bytes_);
    }
    if (max_bytes == 0) return 0;
    return file_->read_at(offset, bytes.first(max_bytes));
  }

 private:
  FaultFileSystem& owner_;
  std::unique_ptr<support::ReadableFile> file_;
  fs::path path_;
};

FaultFileSystem::FaultFileSystem() : posix_(support::posix_file_system()) {
  support::set_file_system_for_testing(this);
}

FaultFileSystem::~FaultFileSystem() { support::set_file_system_for_testing(nullptr); }

int FaultFileSystem::count(FaultPoint point) const {
  const std::lock_guard lock(mutex_);
  return counts_[static_cast<size_t>(point)];
}

int FaultFileSystem::changes() const {
  const std::lock_guard lock(mutex_);
  return changes_;
}

void FaultFileSystem::fail(FaultPoint point, int nth, int error, bool short_write) {
  const std::lock_guard lock(mutex_);
  fail_point_ = point;
  fail_nth_ = nth;
  fail_error_ = error;
  fail_short_ = short_write;
}

int FaultFileSystem::reads() const {
  const std::lock_guard lock(mutex_);
  return reads_;
}

void FaultFileSystem::fail_read(int nth, int error) {
  const std::lock_guard lock(mutex_);
  fail_read_nth_ = nth;
  fail_read_error_ = error;
}

void FaultFileSystem::shorten_read(int nth, size_t max_bytes) {
  const std::lock_guard lock(mutex_);
  short_read_nth_ = nth;
  short_read_bytes_ = max_bytes;
}

void FaultFileSystem::crash_at(int nth) {
  const std::lock_guard lock(mutex_);
  crash_at_ = nth;
}

void FaultFileSystem::fail_writes_to(const std::string& path_part, int error) {
  const std::lock_guard lock(mutex_);
  fail_writes_to_ = path_part;
  fail_writes_to_error_ = error;
}

bool FaultFileSystem::before(std::optional<FaultPoint> point, const std::string& what) {
  if (crashed_) throw SimulatedCrash();
  ++changes_;
  if (changes_ == crash_at_) {
    crashed_ = true;
    throw SimulatedCrash();
  }
  if (!point) return false;
  const int nth = ++counts_[static_cast<size_t>(*point)];
  if (*point == FaultPoint::kWrite && !fail_writes_to_.empty() &&
      what.find(fail_writes_to_) != std::string::npos) {
    throw_fault(fail_writes_to_error_, what);
  }
  if (point != fail_point_ || nth != fail_nth_) return false;
  if (fail_short_ && *point == FaultPoint::kWrite) return true;
  throw_fault(fail_error_, what);
}

void FaultFileSystem::track_new_file(const fs::path& path) {
  // A file that existed before (not written through this file system) counts as synced.
  if (!files_.contains(path)) files_[path] = {fs::exists(path) ? contents(path) : std::string()};
}

void FaultFileSystem::mark_dirty(const fs::path& path) { files_[normal(path)].dirty = true; }

void FaultFileSystem::mark_synced(const fs::path& path) {
  FileState& state = files_[normal(path)];
  state.synced = contents(path);
  state.dirty = false;
}

void FaultFileSystem::move_states(const fs::path& from, const fs::path& to) {
  std::map<fs::path, FileState> moved;
  for (auto it = files_.begin(); it != files_.end();) {
    if (is_under(it->first, from)) {
      const std::string rest = it->first.string().substr(from.string().size());
      moved[fs::path(to.string() + rest)] = std::move(it->second);
      it = files_.erase(it);
    } else {
      ++it;
    }
  }
  files_.merge(moved);
}

std::unique_ptr<support::WritableFile> FaultFileSystem::create(const fs::path& path,
                                                               support::ExistingFile existing) {
  const std::lock_guard lock(mutex_);
  before(std::nullopt, "create '" + path.string() + "'");
  const fs::path key = normal(path);
  const bool existed = fs::exists(key);
  track_new_file(key);
  std::unique_ptr<support::WritableFile> file = posix_.create(path, existing);
  if (!existed) unsynced_entries_.push_back({EntryChange::kCreateFile, key, {}});
  files_[key].dirty = true;  // created empty or truncated
  return std::make_unique<FaultWritableFile>(*this, std::move(file), path);
}

std::unique_ptr<support::WritableFile> FaultFileSystem::open_for_writing(const fs::path& path) {
  const std::lock_guard lock(mutex_);
  before(std::nullopt, "open '" + path.string() + "'");
  std::unique_ptr<support::WritableFile> file = posix_.open_for_writing(path);
  track_new_file(normal(path));
  return std::make_unique<FaultWritableFile>(*this, std::move(file), path);
}

std::unique_ptr<support::ReadableFile> FaultFileSystem::open(const fs::path& path) {
  const std::lock_guard lock(mutex_);
  if (crashed_) throw SimulatedCrash();
  return std::make_unique<FaultReadableFile>(*this, posix_.open(path), path);
}

void FaultFileSystem::rename(const fs::path& from, const fs::path& to) {
  const std::lock_guard lock(mutex_);
  before(FaultPoint::kRename, "rename '" + from.string() + "' to '" + to.string() + "'");
  posix_.rename(from, to);
  move_states(normal(from), normal(to));
  // The unsynced entries inside a renamed directory move with it.
  for (EntryChange& change : unsynced_entries_) {
    if (is_under(change.path, normal(from))) {
      change.path = normal(to).string() + change.path.string().substr(normal(from).string().size());
    }
  }
  unsynced_entries_.push_back({EntryChange::kRename, normal(to), normal(from)});
}

void FaultFileSystem::remove_all(const fs::path& path) {
  const std::lock_guard lock(mutex_);
  before(std::nullopt, "remove '" + path.string() + "'");
  posix_.remove_all(path);
  std::erase_if(files_, [&](const auto& entry) { return is_under(entry.first, normal(path)); });
}

void FaultFileSystem::create_directory(const fs::path& path) {
  const std::lock_guard lock(mutex_);
  before(std::nullopt, "mkdir '" + path.string() + "'");
  posix_.create_directory(path);
  unsynced_entries_.push_back({EntryChange::kCreateDirectory, normal(path), {}});
}

void FaultFileSystem::sync_directory(const fs::path& directory) {
  const std::lock_guard lock(mutex_);
  before(FaultPoint::kSyncDirectory, "fsync '" + directory.string() + "'");
  posix_.sync_directory(directory);
  const fs::path synced = normal(directory);
  std::erase_if(unsynced_entries_,
                [&](const EntryChange& change) { return change.path.parent_path() == synced; });
}

std::vector<fs::path> FaultFileSystem::list(const fs::path& directory) {
  const std::lock_guard lock(mutex_);
  if (crashed_) throw SimulatedCrash();
  return posix_.list(directory);
}

void FaultFileSystem::drop_unsynced() {
  const std::lock_guard lock(mutex_);
  std::error_code ignored;  // an entry removed since needs no undoing
  for (auto change = unsynced_entries_.rbegin(); change != unsynced_entries_.rend(); ++change) {
    switch (change->kind) {
      case EntryChange::kCreateFile:
      case EntryChange::kCreateDirectory:
        fs::remove_all(change->path, ignored);
        std::erase_if(files_,
                      [&](const auto& entry) { return is_under(entry.first, change->path); });
        break;
      case EntryChange::kRename:
        if (fs::exists(change->path)) {
          fs::rename(change->path, change->from);
          move_states(change->path, change->from);
        }
        break;
    }
  }
  unsynced_entries_.clear();
  for (auto& [path, state] : files_) {
    if (!state.dirty || !fs::exists(path)) continue;
    std::ofstream(path, std::ios::binary | std::ios::trunc) << state.synced;
    state.dirty = false;
  }
  crashed_ = false;
  crash_at_ = 0;
  fail_point_.reset();
}

}  // namespace recemb::test
