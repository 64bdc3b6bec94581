// error_of: the message of the exception a call throws, for tests of error paths.
#ifndef RECEMB_TESTS_TESTING_ERROR_OF_H_
#define RECEMB_TESTS_TESTING_ERROR_OF_H_

#include <exception>
#include <gtest/gtest.h>
#include <string>
#include <utility>

namespace recemb::test {

// The message of the `Exception` that call() throws. Adds a test failure and returns "" when
// call() throws nothing, or throws another type (the failure shows that exception's message).
template <class Exception, class Call>
std::string error_of(Call&& call) {
  try {
    std::forward<Call>(call)();
  } catch (const Exception& error) {
    return error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << "wrong exception type: " << error.what();
    return "";
  }
  ADD_FAILURE() << "no exception";
  return "";
}

}  // namespace recemb::test

#endif  // RECEMB_TESTS_TESTING_ERROR_OF_H_
