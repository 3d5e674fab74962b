// ChildProcess (core/subprocess.h) against the processes an external env can
// leave behind: a grandchild that leaves the process group and keeps stderr
// open, one that stays in the group after the child exits, a child whose rlid
// is SIGKILLed, and a stderr flood. rlid must neither hang nor leak them.
#include "core/subprocess.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spdlog/sinks/ostream_sink.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "core/log.h"
#include "tests/test_paths.h"

namespace rlid {
namespace {

const std::string kScript = std::string(RLID_SOURCE_DIR) + "/tests/data/external/grandchild.py";
const std::string kServer = std::string(RLID_BINARY_DIR) + "/env_server";

// A fresh path in the temp directory, removed at the end of the scope.
class TempPath {
 public:
  explicit TempPath(const std::string& name)
      : path_((std::filesystem::temp_directory_path() /
               fmt::format("rlid_subprocess_{}_{}", ::getpid(), name))
                  .string()) {
    std::filesystem::remove(path_);
  }
  ~TempPath() { std::filesystem::remove(path_); }
  const std::string& str() const { return path_; }

 private:
  std::string path_;
};

// Polls `done` every 20 ms for up to timeout_s; returns whether it became true.
bool WaitUntil(const std::function<bool()>& done, double timeout_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// The pid a test process wrote to `path`, or -1 when none came within 10 s.
pid_t ReadPid(const std::string& path) {
  pid_t pid = -1;
  WaitUntil(
      [&] {
        std::ifstream in(path);
        return static_cast<bool>(in >> pid);
      },
      10.0);
  return pid;
}

// Whether `pid` is a live process (a zombie counts as dead: nothing may reap
// an orphan in a container without an init).
bool Alive(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat;
  if (!std::getline(in, stat)) return false;
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

TEST(ChildProcess, AGrandchildThatLeftTheGroupAndKeepsStderrDoesNotHangTheEnd) {
  const TempPath pidfile("setsid.pid");
  auto child = std::make_unique<ChildProcess>(
      ChildOptions{{"python3", kScript, "setsid_stderr", pidfile.str()}});
  const pid_t grandchild = ReadPid(pidfile.str());
  ASSERT_GT(grandchild, 0);
  EXPECT_TRUE(child->WaitForExit(5.0));  // the child exits at once; its stderr stays open
  auto end = std::async(std::launch::async, [&] { child.reset(); });
  EXPECT_EQ(end.wait_for(std::chrono::seconds(6)), std::future_status::ready)
      << "~ChildProcess waits for the end of a stderr that a setsid grandchild keeps open";
  ::kill(grandchild, SIGKILL);  // ends it (and releases a hung destructor)
  end.wait();
}

TEST(ChildProcess, AGrandchildInTheProcessGroupDiesWithTheChild) {
  const TempPath pidfile("group.pid");
  ChildProcess child(ChildOptions{{"python3", kScript, "group_sleeper", pidfile.str()}});
  const pid_t grandchild = ReadPid(pidfile.str());
  ASSERT_GT(grandchild, 0);
  EXPECT_TRUE(child.WaitForExit(10.0));
  EXPECT_EQ(child.ExitDescription(), "exited with code 0");
  EXPECT_TRUE(WaitUntil([&] { return !Alive(grandchild); }, 5.0))
      << "the grandchild outlived the child it belongs to";
  ::kill(grandchild, SIGKILL);
}

// A hung env (it never answers, never reads stdin) started by a process that
// is then SIGKILLed must not live on.
TEST(ChildProcess, AnEnvChildDiesWhenItsRlidIsKilled) {
  const TempPath pidfile("orphan.pid");
  const std::string hang =
      fmt::format("echo $$ > '{0}.tmp' && mv '{0}.tmp' '{0}' && exec sleep 30", pidfile.str());
  // env_server starts the external env and waits (60 s) for its hello reply.
  ChildProcess rlid(
      ChildOptions{{kServer, "external", "command=" + nlohmann::json({"sh", "-c", hang}).dump()}});
  const pid_t env = ReadPid(pidfile.str());
  ASSERT_GT(env, 0);
  ASSERT_TRUE(Alive(env));
  ::kill(rlid.pid(), SIGKILL);
  EXPECT_TRUE(rlid.WaitForExit(5.0));
  EXPECT_TRUE(WaitUntil([&] { return !Alive(env); }, 5.0))
      << "the env process outlived the rlid that started it";
  ::kill(env, SIGKILL);
}

TEST(ChildProcess, AStderrFloodIsRateLimitedInTheLogButItsLastLinesAreKept) {
  constexpr int kLines = 100000;
  std::ostringstream log;
  const auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
  std::vector<std::string> last;
  {
    ChildProcess child(
        ChildOptions{{"python3", kScript, "flood", std::to_string(kLines)}, "", "flooder"});
    EXPECT_TRUE(child.WaitForExit(30.0));
    last = child.LastStderrLines(2);
  }
  spdlog::set_default_logger(previous);
  EXPECT_EQ(last, (std::vector<std::string>{fmt::format("flood {}", kLines - 2),
                                            fmt::format("flood {}", kLines - 1)}));
  // Every line is either logged or counted in a "N stderr lines suppressed" line.
  int logged = 0, suppressed = 0, summaries = 0;
  const std::regex summary(R"(\[flooder\] \((\d+) stderr lines suppressed)");
  std::istringstream lines(log.str());
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, summary)) {
      suppressed += std::stoi(m[1]);
      ++summaries;
    } else if (line.find("[flooder] flood ") != std::string::npos) {
      ++logged;
    }
  }
  EXPECT_LE(logged + summaries, 300) << "the flood was logged line by line";
  EXPECT_GE(logged, 50);
  EXPECT_GE(summaries, 1);
  EXPECT_EQ(logged + suppressed, kLines);
}

// What report.cc runs gnuplot with: found without a shell, its exit code read.
TEST(ChildProcess, FindProgramAndExitCode) {
  const std::string sh = FindProgram("sh");
  ASSERT_FALSE(sh.empty());
  EXPECT_TRUE(sh.ends_with("/sh")) << sh;
  EXPECT_EQ(FindProgram(sh), sh);
  EXPECT_EQ(FindProgram("rlid-no-such-program"), "");
  EXPECT_EQ(FindProgram("/"), "");  // a directory is not a program
  EXPECT_EQ(FindProgram(""), "");
  ChildProcess three(ChildOptions{{sh, "-c", "exit 3"}});
  ASSERT_TRUE(three.WaitForExit(10.0));
  EXPECT_EQ(three.ExitCode(), 3);
  ChildProcess killed(ChildOptions{{sh, "-c", "kill -9 $$"}});
  ASSERT_TRUE(killed.WaitForExit(10.0));
  EXPECT_EQ(killed.ExitCode(), -1) << killed.ExitDescription();
}

}  // namespace
}  // namespace rlid
