// CHECK-style assertions over GoogleTest for the C++ tests of every component (engine, search): a failed CHECK
// is a non-fatal failure of the running TEST (the case goes on, as the long scenarios want); REQUIRE ends the
// test process (ctest runs one case per process). autoccl_gtest puts this folder on each test's include path.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace autoccl::test {

// A failed CHECK is a non-fatal failure of the running GoogleTest TEST: the case goes on.
inline void fail(const char* file, int line, const std::string& what) {
  ADD_FAILURE_AT(file, line) << "CHECK failed: " << what;
}

}  // namespace autoccl::test

#define CHECK(cond)                                                        \
  do {                                                                     \
    if (!(cond)) ::autoccl::test::fail(__FILE__, __LINE__, #cond);         \
  } while (0)

#define CHECK_EQ(a, b)                                                                               \
  do {                                                                                               \
    auto va_ = (a);                                                                                  \
    auto vb_ = (b);                                                                                  \
    if (!(va_ == vb_))                                                                               \
      ::autoccl::test::fail(__FILE__, __LINE__,                                                      \
                            std::string(#a " == " #b " (") + std::to_string(va_) + " vs " +        \
                                std::to_string(vb_) + ")");                                          \
  } while (0)

#define CHECK_NEAR(a, b, eps)                                                                        \
  do {                                                                                               \
    double va_ = (a);                                                                                \
    double vb_ = (b);                                                                                \
    if (!(va_ - vb_ <= (eps) && vb_ - va_ <= (eps)))                                                 \
      ::autoccl::test::fail(__FILE__, __LINE__,                                                      \
                            std::string(#a " ~= " #b " (") + std::to_string(va_) + " vs " +       \
                                std::to_string(vb_) + ")");                                          \
  } while (0)

#define CHECK_STR(a, b)                                                                              \
  do {                                                                                               \
    std::string va_ = (a);                                                                           \
    std::string vb_ = (b);                                                                           \
    if (va_ != vb_)                                                                                  \
      ::autoccl::test::fail(__FILE__, __LINE__, std::string(#a " == " #b " ('") + va_ + "' vs '" + \
                                                    vb_ + "')");                                     \
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
