// rn50 tests: whether this test binary was built with AddressSanitizer (scripts/sanitize.sh).
// Checks of the process's memory footprint (RSS) mean nothing there: ASan keeps freed memory in
// its quarantine and adds shadow memory, so such checks are off in that build, where
// LeakSanitizer checks for leaks instead.
#pragma once

namespace rn50::test {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

}  // namespace rn50::test
