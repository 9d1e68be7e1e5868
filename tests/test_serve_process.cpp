// rn50 serve as a process and as a page: `rn50 serve` drains on SIGTERM (the request in flight
// is answered, the process exits 0), and the web page works in a real browser (headless
// Chromium through chromedriver: pick an image, read the top 5, the latency and the metrics).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <thread>

#include "data_test_util.h"
#include "require.h"
#include "serve_test_util.h"
#include "test_train_util.h"

using namespace rn50_test;
using rn50::testutil::make_jpeg;
using rn50::testutil::make_png;
using rn50::testutil::read_bytes;
using rn50::testutil::write_jpeg;

namespace {

/// `rn50 serve ARGS` as a child process, its stdout read line by line.
struct ServeProcess {
  pid_t pid = -1;
  FILE* out = nullptr;
  explicit ServeProcess(const std::vector<std::string>& args) {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    pid = ::fork();
    if (pid == 0) {
      ::dup2(fds[1], 1);
      ::close(fds[0]);
      std::vector<char*> argv;
      std::string cli = RN50_CLI, serve = "serve";
      argv.push_back(cli.data());
      argv.push_back(serve.data());
      std::vector<std::string> copy = args;
      for (std::string& a : copy) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(cli.c_str(), argv.data());
      std::_Exit(127);
    }
    ::close(fds[1]);
    out = ::fdopen(fds[0], "r");
  }
  std::string line() {
    char buf[4096];
    return out && std::fgets(buf, sizeof(buf), out) ? std::string(buf) : std::string();
  }
  /// The port of the "listening on http://HOST:PORT" line.
  int port() {
    const std::string l = line();
    const size_t at = l.find("http://127.0.0.1:");
    EXPECT_NE(at, std::string::npos) << l;
    return at == std::string::npos ? -1 : std::stoi(l.substr(at + 17));
  }
  int wait_exit() {
    int st = 0;
    ::waitpid(pid, &st, 0);
    pid = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  ~ServeProcess() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    if (out) std::fclose(out);
  }
};

}  // namespace

TEST(ServeProcess, SigtermDrainsTheRequestInFlightAndExits0) {
  TempDir tmp("serve_sigterm");
  const std::string dir = (tmp.path / "slow").string();
  write_model(dir, "resnet50", 1000, 224, 256);
  ServeProcess p({"--model", dir, "--port", "0", "--max-queue-delay-us", "0"});
  const int port = p.port();
  ASSERT_GT(port, 0);
  // Eight 224-px images: a few hundred ms of engine time, under way when SIGTERM arrives.
  const std::string raw(static_cast<size_t>(8 * 3 * 224 * 224 * 4), '\0');
  auto inflight = std::async(std::launch::async, [&] {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    const BinaryRequest r = binary_request("FP32", {8, 3, 224, 224}, raw);
    return c.Post("/v2/models/slow/infer", r.headers, r.body, "application/octet-stream");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  ASSERT_EQ(::kill(p.pid, SIGTERM), 0);
  const httplib::Result res = inflight.get();
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body)["outputs"][0]["shape"], json::array({8, 1000}));
  EXPECT_NE(p.line().find("SIGTERM: draining"), std::string::npos);
  EXPECT_NE(p.line().find("stopped"), std::string::npos);
  EXPECT_EQ(p.wait_exit(), 0);
  httplib::Client after("127.0.0.1", port);
  after.set_connection_timeout(1, 0);
  EXPECT_FALSE(after.Get("/v2/health/live")) << "the port still answers after the exit";
}

TEST(ServeProcess, WebPageClassifiesAnImageInHeadlessChromium) {
  const bool have = run_command("test -x /usr/bin/chromium && test -x /usr/bin/chromedriver") == 0 &&
                    python_has("selenium");
  RN50_REQUIRE_OR_SKIP("browser", have,
                       "no headless browser (Debian's chromium, chromium-driver and "
                       "python3-selenium)");
  TempDir tmp("serve_page");
  const std::string dir = (tmp.path / "tiny").string();
  write_model(dir, "resnet18", 10, 32, 36);
  rn50::ServeOptions o;
  o.models = {dir};
  TestServer t(o);
  const std::string image = (tmp.path / "cat.jpg").string();
  write_jpeg(image, 96, 80, 11);
  // What the page must show: /classify's answer for the same file.
  const std::vector<uint8_t> bytes = read_bytes(image);
  const json want = json::parse(
      t.client->Post("/v2/models/tiny/classify?top_k=5",
                     std::string(bytes.begin(), bytes.end()), "image/jpeg")
          ->body);
  std::string out;
  const int rc = run_command(std::string(rn50::test::python()) + " " +
                                 sh_quote(std::string(RN50_SOURCE_DIR) +
                                          "/tests/serve/web_page_test.py") +
                                 " http://127.0.0.1:" + std::to_string(t.port()) + "/ " +
                                 sh_quote(image),
                             &out);
  ASSERT_EQ(rc, 0) << out;
  const json page = json::parse(out.substr(out.find('{')));
  ASSERT_EQ(page["rows"].size(), 5u) << out;
  const std::string top_label = want["predictions"][0]["label"];
  EXPECT_EQ(page["rows"][0].get<std::string>().rfind(top_label, 0), 0u) << out;
  EXPECT_NE(page["latency"].get<std::string>().find("ms in the server"), std::string::npos) << out;
  EXPECT_EQ(page["error"], "") << out;
  EXPECT_NE(page["stats"].get<std::string>().find("average batch"), std::string::npos) << out;
}
