// Tiny assertion helper for autoccl's C++ tests (no framework).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace autoccl_test {
inline int& failures() {
  static int f = 0;
  return f;
}
}  // namespace autoccl_test

#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);  \
      ++autoccl_test::failures();                                                    \
    }                                                                                \
  } while (0)

#define CHECK_MSG(cond, ...)                                                         \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);  \
      std::fprintf(stderr, __VA_ARGS__);                                             \
      std::fprintf(stderr, "\n");                                                    \
      ++autoccl_test::failures();                                                    \
    }                                                                                \
  } while (0)

#define REQUIRE(cond)                                                                \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

// main() helper: run the named test; exit status = number of failures (capped).
#define TEST_MAIN(table)                                                             \
  int main(int argc, char** argv) {                                                  \
    if (argc > 1 && std::strcmp(argv[1], "--list") == 0) {                           \
      for (auto& t : table) std::printf("%s\n", t.name);                             \
      return 0;                                                                      \
    }                                                                                \
    int ran = 0;                                                                     \
    for (auto& t : table) {                                                          \
      if (argc > 1 && std::strcmp(argv[1], t.name) != 0) continue;                   \
      std::printf("== %s\n", t.name);                                                \
      std::fflush(stdout);                                                           \
      t.fn();                                                                        \
      ++ran;                                                                         \
    }                                                                                \
    if (ran == 0) {                                                                  \
      std::fprintf(stderr, "no such test\n");                                        \
      return 2;                                                                      \
    }                                                                                \
    int f = autoccl_test::failures();                                                \
    std::printf("%s: %d failure(s)\n", f ? "FAIL" : "OK", f);                        \
    return f > 100 ? 100 : f;                                                        \
  }

struct TestCase {
  const char* name;
  void (*fn)();
};
