// AllocationCount(): how many times this test binary called the global operator new.
//
// Linking //test/common:allocation_counter replaces the global operator new and delete with
// malloc-based ones that count, so a test can assert that a path allocates nothing (read the
// count before and after). Any thread may call it; the count is process-wide.
//
// AllocationsCounted() says whether the replacement is in effect: under AddressSanitizer the
// sanitizer's operator new is called instead and the count stays 0, so a test must check it
// before asserting on counts (or the assertion could not fail).
#pragma once

#include <cstdint>

namespace rpx {

uint64_t AllocationCount();
bool AllocationsCounted();

}  // namespace rpx
