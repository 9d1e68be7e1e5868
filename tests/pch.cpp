// The translation unit that builds the test suite's precompiled header (CMakeLists.txt,
// rn50_test_pch): CMake force-includes the header list into it; nothing else is needed here.
