// POSIX file helpers (support/file_io.h): full writes through short writes and signals, exact
// reads, atomic publication, and errors that name the file.
#include "support/file_io.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <functional>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <random>
#include <signal.h>
#include <string>
#include <sys/stat.h>
#include <system_error>
#include <thread>
#include <unistd.h>
#include <vector>

#include "recemb/error.h"

#include "testing/error_of.h"
#include "testing/files.h"
#include "testing/temporary_directory.h"

namespace recemb::support {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::random_bytes;
using test::read_bytes;
using test::TemporaryDirectory;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(FileIoTest, WriteFileThenReadAtRandomOffsets) {
  TemporaryDirectory directory;
  std::mt19937_64 rng(17);
  const std::vector<std::byte> data = random_bytes(rng, 300000);
  const fs::path path = directory.path() / "data.bin";
  write_file(path, data);
  EXPECT_EQ(read_bytes(path), data);

  const InputFile file = InputFile::open(path);
  EXPECT_EQ(file.size(), data.size());
  EXPECT_EQ(file.path(), path);
  for (int i = 0; i < 100; ++i) {
    const size_t offset = std::uniform_int_distribution<size_t>(0, data.size())(rng);
    const size_t size = std::uniform_int_distribution<size_t>(0, data.size() - offset)(rng);
    std::vector<std::byte> read(size);
    file.read_at(offset, read);
    EXPECT_TRUE(std::equal(read.begin(), read.end(), data.begin() + static_cast<ptrdiff_t>(offset)))
        << "offset " << offset << " size " << size;
  }
}

TEST(FileIoTest, OutputFileAppendsAndCreateTruncates) {
  TemporaryDirectory directory;
  std::mt19937_64 rng(5);
  const std::vector<std::byte> first = random_bytes(rng, 1000);
  const std::vector<std::byte> second = random_bytes(rng, 77);
  const fs::path path = directory.path() / "out.bin";
  write_file(path, random_bytes(rng, 5000));  // longer than what replaces it
  OutputFile file = OutputFile::create(path);
  file.write(first);
  file.write({});
  file.write(second);
  file.sync();
  OutputFile moved = std::move(file);
  moved.close();
  std::vector<std::byte> expected = first;
  expected.insert(expected.end(), second.begin(), second.end());
  EXPECT_EQ(read_bytes(path), expected);
}

std::atomic<int> signals_received{0};
extern "C" void count_signal(int) { signals_received.fetch_add(1); }

// A write to a FIFO that a slow reader drains blocks; SIGUSR1 without SA_RESTART then makes it
// return early, with a short count or EINTR. OutputFile::write must still deliver every byte.
TEST(FileIoTest, WriteCompletesThroughShortWritesAndSignals) {
  TemporaryDirectory directory;
  const fs::path fifo = directory.path() / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  struct sigaction action {};
  struct sigaction previous {};
  action.sa_handler = count_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;
  ASSERT_EQ(::sigaction(SIGUSR1, &action, &previous), 0);
  signals_received = 0;

  std::mt19937_64 rng(23);
  const std::vector<std::byte> data = random_bytes(rng, 4 << 20);
  std::vector<std::byte> received;
  const pthread_t writer = ::pthread_self();
  std::thread reader([&] {
    std::ifstream stream(fifo, std::ios::binary);
    std::vector<char> buffer(4096);
    size_t since_signal = 0;
    while (stream.read(buffer.data(), static_cast<std::streamsize>(buffer.size())) ||
           stream.gcount() > 0) {
      const auto count = static_cast<size_t>(stream.gcount());
      for (size_t i = 0; i < count; ++i) received.push_back(static_cast<std::byte>(buffer[i]));
      since_signal += count;
      if (since_signal >= (64 << 10)) {
        since_signal = 0;
        ::pthread_kill(writer, SIGUSR1);
      }
    }
  });
  OutputFile file = OutputFile::create(fifo);  // opens once the reader has
  file.write(data);
  file.close();
  reader.join();
  ::sigaction(SIGUSR1, &previous, nullptr);
  EXPECT_EQ(received.size(), data.size());
  EXPECT_TRUE(received == data);
  EXPECT_GT(signals_received.load(), 0);
}

TEST(FileIoTest, ReadPastTheEndNamesTheTruncatedFile) {
  TemporaryDirectory directory;
  std::mt19937_64 rng(3);
  const fs::path path = directory.path() / "short.bin";
  write_file(path, random_bytes(rng, 100));
  const InputFile file = InputFile::open(path);
  std::vector<std::byte> read(50);
  file.read_at(50, read);  // exactly to the end
  try {
    file.read_at(60, read);
    FAIL() << "read past the end did not throw";
  } catch (const DataLoss& error) {
    EXPECT_THAT(error.what(), HasSubstr("file '" + path.string() + "' is truncated"));
    EXPECT_THAT(error.what(), HasSubstr("ends at byte 100, a read needs bytes up to 110"));
  }
}

TEST(FileIoTest, MissingFilesAreSystemErrorsWithEnoent) {
  TemporaryDirectory directory;
  const fs::path missing = directory.path() / "missing.bin";
  for (const auto& open : std::vector<std::function<void()>>{
           [&] { InputFile::open(missing); }, [&] { read_file(missing, 100); },
           [&] { file_system().sync_directory(missing); }}) {
    try {
      open();
      FAIL() << "no error for a missing file";
    } catch (const std::system_error& error) {
      EXPECT_EQ(error.code().value(), ENOENT);
      EXPECT_THAT(error.what(), HasSubstr(" '" + missing.string() + "': No such file"));
    }
  }
}

// A directory or a FIFO is refused when opened, without waiting for a writer of the FIFO.
TEST(FileIoTest, OpeningAFileThatIsNotRegularThrowsWithoutBlocking) {
  TemporaryDirectory directory;
  const fs::path fifo = directory.path() / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const fs::path sub = directory.path() / "sub";
  fs::create_directory(sub);
  for (const fs::path& path : {fifo, sub}) {
    EXPECT_EQ(error_of<InvalidArgument>([&] { InputFile::open(path); }),
              "'" + path.string() + "' is not a regular file");
    EXPECT_EQ(error_of<InvalidArgument>([&] { read_file(path, 100); }),
              "'" + path.string() + "' is not a regular file");
  }
}

TEST(FileIoTest, SystemErrorsNameTheCallThePathAndTheReason) {
  TemporaryDirectory directory;
  const fs::path in_missing_directory = directory.path() / "no" / "file.bin";
  try {
    OutputFile::create(in_missing_directory);
    FAIL() << "created a file in a missing directory";
  } catch (const std::system_error& error) {
    EXPECT_EQ(error.code().value(), ENOENT);
    EXPECT_THAT(error.what(), HasSubstr("create '" + in_missing_directory.string() + "'"));
    EXPECT_THAT(error.what(), HasSubstr("No such file or directory"));
  }
}

TEST(FileIoTest, ReadFileChecksTheSizeLimit) {
  TemporaryDirectory directory;
  const fs::path path = directory.path() / "text";
  const std::string text = "{\"step\": 42}\n";
  write_file(path, std::as_bytes(std::span(text)));
  EXPECT_EQ(read_file(path, text.size()), text);
  try {
    read_file(path, text.size() - 1);
    FAIL() << "no error for a file above the limit";
  } catch (const DataLoss& error) {
    EXPECT_THAT(error.what(), HasSubstr("file '" + path.string() + "' has 13 bytes, more than"));
  }
}

TEST(FileIoTest, PublishRenamesFilesAndDirectories) {
  TemporaryDirectory directory;
  std::mt19937_64 rng(9);
  const std::vector<std::byte> old_data = random_bytes(rng, 10);
  const std::vector<std::byte> new_data = random_bytes(rng, 20);
  const fs::path target = directory.path() / "CURRENT";
  write_file(target, old_data);
  write_file(directory.path() / "CURRENT.tmp", new_data);
  publish(directory.path() / "CURRENT.tmp", target);  // replaces the old version
  EXPECT_EQ(read_bytes(target), new_data);
  EXPECT_FALSE(fs::exists(directory.path() / "CURRENT.tmp"));

  const fs::path temporary = directory.path() / ".tmp-dir";
  fs::create_directory(temporary);
  write_file(temporary / "a", new_data);
  file_system().sync_directory(temporary);
  publish(temporary, directory.path() / "dir");
  EXPECT_FALSE(fs::exists(temporary));
  EXPECT_EQ(read_bytes(directory.path() / "dir" / "a"), new_data);

  // Onto a non-empty directory: refused, both names in the message, nothing moved.
  fs::create_directory(temporary);
  try {
    publish(temporary, directory.path() / "dir");
    FAIL() << "published onto a non-empty directory";
  } catch (const std::system_error& error) {
    EXPECT_THAT(error.what(), HasSubstr("rename '" + temporary.string() + "' to '" +
                                        (directory.path() / "dir").string() + "'"));
  }
  EXPECT_TRUE(fs::exists(temporary));
  EXPECT_EQ(read_bytes(directory.path() / "dir" / "a"), new_data);
}

// The file appears complete or not at all: while the writer runs, `path` still holds the previous
// version and the data goes to a hidden temporary next to it; afterwards only `path` is left.
TEST(FileIoTest, WriteFileAtomicallyReplacesTheFileInOneStep) {
  TemporaryDirectory directory;
  std::mt19937_64 rng(31);
  const std::vector<std::byte> old_data = random_bytes(rng, 100);
  const std::vector<std::byte> new_data = random_bytes(rng, 70000);
  const fs::path path = directory.path() / "model.bin";
  write_file(path, old_data);
  write_file_atomically(path, [&](OutputFile& file) {
    EXPECT_EQ(read_bytes(path), old_data);
    const std::vector<std::string> entries = directory.entries();
    ASSERT_EQ(entries.size(), 2u);
    EXPECT_EQ(entries[0].rfind(".model.bin.tmp-" + std::to_string(::getpid()) + "-", 0), 0u)
        << entries[0];
    EXPECT_EQ(file.path(), directory.path() / entries[0]);
    file.write(std::span(new_data).first(1000));
    file.write(std::span(new_data).subspan(1000));
  });
  EXPECT_EQ(read_bytes(path), new_data);
  EXPECT_EQ(directory.entries(), std::vector<std::string>{"model.bin"});

  write_file_atomically(directory.path() / "new.bin", [&](OutputFile& file) { file.write({}); });
  EXPECT_EQ(read_bytes(directory.path() / "new.bin"), std::vector<std::byte>{});
}

TEST(FileIoTest, WriteFileAtomicallyLeavesNothingBehindOnFailure) {
  TemporaryDirectory directory;
  std::mt19937_64 rng(37);
  const std::vector<std::byte> old_data = random_bytes(rng, 100);
  const fs::path path = directory.path() / "model.bin";
  write_file(path, old_data);
  // The writer's own exception propagates unchanged.
  try {
    write_file_atomically(path, [&](OutputFile& file) {
      file.write(random_bytes(rng, 5000));
      throw InvalidArgument("table 'x': bad value");
    });
    FAIL() << "the writer's exception was swallowed";
  } catch (const InvalidArgument& error) {
    EXPECT_EQ(std::string(error.what()), "table 'x': bad value");
  }
  EXPECT_EQ(read_bytes(path), old_data);
  EXPECT_EQ(directory.entries(), std::vector<std::string>{"model.bin"});

  // A missing directory is reported with the file asked for, not the temporary's name.
  const fs::path in_missing_directory = directory.path() / "no" / "model.bin";
  try {
    write_file_atomically(in_missing_directory, [](OutputFile&) { FAIL() << "wrote"; });
    FAIL() << "wrote into a missing directory";
  } catch (const std::system_error& error) {
    EXPECT_EQ(error.code().value(), ENOENT);
    EXPECT_THAT(error.what(), HasSubstr("create '" + in_missing_directory.string() + "': "));
    EXPECT_THAT(error.what(), Not(HasSubstr(".tmp-")));
  }
  EXPECT_EQ(directory.entries(), std::vector<std::string>{"model.bin"});
}

}  // namespace
}  // namespace recemb::support
