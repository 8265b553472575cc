// RPX_ASSERT(cond): states an invariant. In debug and sanitizer builds (no NDEBUG: the asan
// config undefines it) a false condition prints where and what, then aborts, so a test run
// stops at the broken state instead of somewhere downstream. In optimized builds it compiles to
// nothing and `cond` is not evaluated: never put work with side effects in it.
// Any thread may use it.
#pragma once

#include <cstdio>
#include <cstdlib>

#ifdef NDEBUG
#define RPX_ASSERT(cond) \
  do {                   \
  } while (false && (cond))
#else
#define RPX_ASSERT(cond)                                                           \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                     \
    }                                                                              \
  } while (false)
#endif
