#include "test/common/allocation_counter.h"

#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<uint64_t> allocations{0};
}  // namespace

void* operator new(size_t n) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
// GCC pairs these free() calls with the operator new it inlines at call sites and warns; the
// pair is malloc/free, which match.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace rpx {

uint64_t AllocationCount() { return allocations.load(std::memory_order_relaxed); }

bool AllocationsCounted() {
  uint64_t before = AllocationCount();
  // A direct call of the replaceable function, which the compiler may not elide (a new-expression
  // it may).
  void* p = ::operator new(1);
  ::operator delete(p);
  return AllocationCount() != before;
}

}  // namespace rpx
