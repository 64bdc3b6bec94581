// Whole files as bytes or text, for tests that write, inspect and damage files; random bytes.
#ifndef RECEMB_TESTS_TESTING_FILES_H_
#define RECEMB_TESTS_TESTING_FILES_H_

#include <cstddef>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace recemb::test {

// The contents of the file `path`; std::runtime_error naming it if it cannot be read.
std::vector<std::byte> read_bytes(const std::filesystem::path& path);
std::string read_text(const std::filesystem::path& path);

// Creates (or truncates) the file `path` holding `bytes`; std::runtime_error naming it on failure.
void write_bytes(const std::filesystem::path& path, std::span<const std::byte> bytes);

// tests/data in the source tree: files checked in (golden checkpoints and models of older format
// versions). An absolute path set by the build, so that it holds however the sources were compiled.
std::filesystem::path checked_in_data_dir();

// `size` random bytes.
std::vector<std::byte> random_bytes(std::mt19937_64& rng, size_t size);

}  // namespace recemb::test

#endif  // RECEMB_TESTS_TESTING_FILES_H_
