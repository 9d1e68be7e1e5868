// The progress line: its text, in-place updates on a terminal, throttled plain lines otherwise.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/progress.h"

namespace rn50 {
namespace {

std::string read_all(std::FILE* f) {
  std::rewind(f);
  std::string s;
  char buf[256];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) s.append(buf, n);
  return s;
}

TEST(Progress, Text) {
  EXPECT_EQ(ProgressLine::format("epoch 3", 250, 1000, 123.45, 10.0, "loss 2.5000"),
            "epoch 3 250/1000 (25%) 123.5 img/s eta 30s loss 2.5000");
  EXPECT_EQ(ProgressLine::format("check-data", 0, 10, 0, 0, ""), "check-data 0/10 (0%)");
  EXPECT_EQ(ProgressLine::format("x", 10, 10, 5, 2.0, ""), "x 10/10 (100%) 5.0 img/s");
  EXPECT_EQ(format_duration(3725), "1h02m");
  EXPECT_EQ(format_duration(245), "4m05s");
  EXPECT_EQ(format_duration(-1), "?");
}

TEST(Progress, TerminalRewritesOneLine) {
  setenv("RN50_PROGRESS", "tty", 1);
  std::FILE* f = std::tmpfile();
  {
    ProgressLine p(f, 10);
    EXPECT_EQ(p.mode(), ProgressLine::Mode::tty);
    p.update("step", 1, 4, 0, "", true);
    p.update("step", 2, 4, 0, "", true);
    p.println("saved checkpoint");
    p.update("step", 3, 4, 0, "", true);
  }  // the destructor ends the line
  unsetenv("RN50_PROGRESS");
  EXPECT_EQ(read_all(f),
            "\rstep 1/4 (25%) eta 0s\033[K\rstep 2/4 (50%) eta 0s\033[K\r\033[Ksaved checkpoint\n"
            "\rstep 3/4 (75%) eta 0s\033[K\n");  // microseconds in: eta 0s
  std::fclose(f);
}

TEST(Progress, PlainLinesAreThrottled) {
  setenv("RN50_PROGRESS", "plain", 1);
  std::FILE* f = std::tmpfile();
  {
    ProgressLine p(f, 3600);  // one plain line an hour at most
    EXPECT_EQ(p.mode(), ProgressLine::Mode::plain);
    for (int i = 1; i <= 100; ++i) p.update("check-data", i, 100);  // only the first prints
    p.update("check-data", 100, 100, 0, "", /*force=*/true);        // forced
  }
  unsetenv("RN50_PROGRESS");
  EXPECT_EQ(read_all(f), "check-data 1/100 (1%) eta 0s\ncheck-data 100/100 (100%)\n");
  std::fclose(f);
  // Not a terminal and no override: plain.
  std::FILE* g = std::tmpfile();
  EXPECT_EQ(ProgressLine(g).mode(), ProgressLine::Mode::plain);
  std::fclose(g);
  setenv("RN50_PROGRESS", "off", 1);
  std::FILE* h = std::tmpfile();
  {
    ProgressLine p(h);
    p.update("x", 1, 2, 0, "", true);
  }
  unsetenv("RN50_PROGRESS");
  EXPECT_EQ(read_all(h), "");
  std::fclose(h);
}

}  // namespace
}  // namespace rn50
