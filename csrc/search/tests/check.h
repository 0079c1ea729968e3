// CHECK-style assertions over GoogleTest: a failed CHECK is a non-fatal failure of the running TEST (the case
// goes on, as the search's long scenarios want); REQUIRE ends the test process (ctest runs one case per process).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(cond)                                                       \
  do {                                                                    \
    if (!(cond)) ADD_FAILURE_AT(__FILE__, __LINE__) << "CHECK failed: " #cond; \
  } while (0)

#define CHECK_MSG(cond, ...)                                                                \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      char msg_[512];                                                                       \
      std::snprintf(msg_, sizeof msg_, __VA_ARGS__);                                        \
      ADD_FAILURE_AT(__FILE__, __LINE__) << "CHECK failed: " #cond ": " << msg_;            \
    }                                                                                       \
  } while (0)

#define REQUIRE(cond)                                                                       \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond);      \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)
