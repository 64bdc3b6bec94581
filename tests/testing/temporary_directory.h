// A fresh directory under $TMPDIR (or /tmp) for one test, removed with everything in it when the
// object is destroyed.
#ifndef RECEMB_TESTS_TESTING_TEMPORARY_DIRECTORY_H_
#define RECEMB_TESTS_TESTING_TEMPORARY_DIRECTORY_H_

#include <filesystem>

namespace recemb::test {

class TemporaryDirectory {
 public:
  TemporaryDirectory();
  ~TemporaryDirectory();
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace recemb::test

#endif  // RECEMB_TESTS_TESTING_TEMPORARY_DIRECTORY_H_
