// Preloaded (LD_PRELOAD) into the test programs that tests/CMakeLists.txt lists in
// RECEMB_SINGLE_THREADED_TESTS, in the Release build. The ThreadSanitizer build leaves those
// programs out, so a thread started in one would escape it: this library's pthread_create ends
// the program instead, with a message that says what to do.
#include <cstdlib>
#include <cstring>
#include <unistd.h>

// Exported: the project builds with hidden visibility by default.
extern "C" __attribute__((visibility("default"))) int pthread_create(void* /*thread*/,
                                                                     const void* /*attributes*/,
                                                                     void* (* /*start*/)(void*),
                                                                     void* /*argument*/) {
  static constexpr char kMessage[] =
      "single_thread_guard: this test program started a thread, but tests/CMakeLists.txt lists it "
      "in RECEMB_SINGLE_THREADED_TESTS (programs the ThreadSanitizer build leaves out): remove it "
      "from that list.\n";
  [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, kMessage, std::strlen(kMessage));
  std::abort();
}
