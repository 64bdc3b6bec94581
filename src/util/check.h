// RECEMB_CHECK: aborts on a broken internal invariant (a bug in recemb, never bad user input,
// which throws InvalidArgument at the boundary instead).
#ifndef RECEMB_UTIL_CHECK_H_
#define RECEMB_UTIL_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define RECEMB_CHECK(condition)                                                             \
  do {                                                                                      \
    if (!(condition)) {                                                                     \
      std::fprintf(stderr, "%s:%d: recemb internal check failed: %s\n", __FILE__, __LINE__, \
                   #condition);                                                             \
      std::abort();                                                                         \
    }                                                                                       \
  } while (false)

#endif  // RECEMB_UTIL_CHECK_H_
