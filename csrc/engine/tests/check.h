// A tiny assertion helper for autoccl's C++ tests (no test framework by design).
// CHECK records a failure and continues; the test's main returns checkFailures() != 0.
#pragma once

#include <cstdio>
#include <cstring>
#include <string>

namespace autoccl::test {

inline int& failures() {
  static int n = 0;
  return n;
}

inline void fail(const char* file, int line, const std::string& what) {
  ++failures();
  std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", file, line, what.c_str());
}

// Runs the named case of `cases` (argv[1]) or all of them; returns the process exit code.
struct Case {
  const char* name;
  void (*fn)();
};
template <size_t N>
int runCases(int argc, char** argv, const Case (&cases)[N]) {
  if (argc > 1 && std::strcmp(argv[1], "--list") == 0) {  // for tests/all_cases_registered.cmake
    for (const Case& c : cases) std::printf("%s\n", c.name);
    return 0;
  }
  bool ran = false;
  for (const Case& c : cases) {
    if (argc > 1 && std::strcmp(argv[1], c.name) != 0) continue;
    ran = true;
    int before = failures();
    c.fn();
    std::fprintf(stderr, "[%s] %s\n", failures() == before ? " OK " : "FAIL", c.name);
  }
  if (!ran) {
    std::fprintf(stderr, "unknown case %s\n", argc > 1 ? argv[1] : "");
    return 2;
  }
  return failures() ? 1 : 0;
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
