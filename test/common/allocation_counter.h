// AllocationCount(): how many times this test binary called the global operator new.
//
// Linking //test/common:allocation_counter replaces the global operator new and delete with
// malloc-based ones that count, so a test can assert that a path allocates nothing (read the
// count before and after). Any thread may call it; the count is process-wide.
#pragma once

#include <cstdint>

namespace rpx {

uint64_t AllocationCount();

}  // namespace rpx
