// Rollout engines without a real server: a server engine's work is counted as
// rlid's engine counts the same samples (so FLOPs budgets match across
// engines), and the failures of a vLLM server rlid starts (no interpreter, no
// vllm, a port taken, a deadline) are EngineErrors that leave nothing running.
// tests/live/test_vllm_engine.py runs the real server.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/clock.h"
#include "policy/engines/engine_error.h"
#include "policy/engines/server_engine.h"
#include "policy/engines/vllm_server.h"
#include "policy/engines/weight_sync.h"
#include "policy/reading/sampler.h"

namespace rlid::policy {
namespace {

namespace fs = std::filesystem;

TEST(ServerWork, CountsTheSamplesAsRlidsEngineDoes) {
  ModelConfig c;
  c.ApplyPreset("tiny");
  c.vocab_size = 53;
  c.num_layers = 2;
  TransformerLM m(c);
  m->InitWeights(5);
  SamplerOptions o;
  o.max_new_tokens = 9;
  TextSampler sampler(c, o, torch::kCPU);
  sampler.SyncWeights(m);
  const std::vector<std::vector<TokenId>> prompts = {{3, 14, 15, 9}, {2, 6, 5, 35, 8, 9, 7, 9, 3}, {23, 8, 4}};
  const int n = 3;
  std::vector<uint64_t> seeds;
  for (uint64_t r = 0; r < prompts.size() * n; ++r) seeds.push_back(100 + r);
  const StopRule stop([](const std::vector<TokenId>& g) { return g.back() % 5 == 0; });
  const auto results = sampler.Sample(prompts, n, stop, seeds);
  bool stopped_early = false;
  for (const auto& g : results)
    for (const auto& r : g) stopped_early = stopped_early || r.finish == "stop";
  ASSERT_TRUE(stopped_early) << "the stop rule should end some samples early";
  const ForwardCost rlid = sampler.work(), server = ServerWork(prompts, results);
  EXPECT_EQ(server.tokens, rlid.tokens);
  EXPECT_EQ(server.attention_pairs, rlid.attention_pairs);
  EXPECT_EQ(server.logit_rows, rlid.logit_rows);
  EXPECT_EQ(server.calls, rlid.calls);
  EXPECT_EQ(c.ForwardFlops(server), c.ForwardFlops(rlid));
}

TEST(StopRule, AServerEngineRefusesARuleWithoutItsTokens) {
  ModelConfig c;
  c.ApplyPreset("tiny");
  ServerTarget t;
  t.base_url = "http://127.0.0.1:9/v1";  // nothing is asked: the rule is refused first
  t.model = "m";
  ServerEngine e("openai", c, SamplerOptions{}, ServerOptions{}, t, nullptr);
  const StopRule any([](const std::vector<TokenId>&) { return true; });
  EXPECT_THROW(e.Sample({{1, 2}}, 1, any, {7}), ConfigError);
}

// A stand-in for the interpreter: a shell script that ignores its arguments.
std::string FakePython(const fs::path& dir, const std::string& body) {
  fs::create_directories(dir);
  const fs::path p = dir / "python";
  std::ofstream(p) << "#!/bin/sh\n" << body << "\n";
  fs::permissions(p, fs::perms::owner_all);
  return p.string();
}

VllmServerOptions Options(const fs::path& dir, const std::string& python) {
  VllmServerOptions o;
  o.python = python;
  o.model_dir = dir.string();
  o.log_path = (dir / "vllm.log").string();
  o.startup_timeout_s = 30;
  return o;
}

// A fresh directory, removed when the test ends.
struct TempDir {
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / fmt::format("rlid_engine_{}_{}", name, ::getpid())) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  fs::path path;
};

std::string MessageOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const EngineError& e) {
    return std::string(e.what()) + "\nhint: " + e.hint();
  }
  return "no EngineError";
}

TEST(VllmServer, AMissingInterpreterNamesTheSetupCommand) {
  const TempDir dir("missing");
  const fs::path& d = dir.path;
  const std::string msg = MessageOf([&] { VllmServer s(Options(d, (d / "no/python").string())); });
  EXPECT_NE(msg.find("no Python interpreter"), std::string::npos) << msg;
  EXPECT_NE(msg.find("setup.sh --vllm"), std::string::npos) << msg;
}

TEST(VllmServer, AnInterpreterWithoutVllmIsNamedWithTheLog) {
  const TempDir dir("novllm");
  const fs::path& d = dir.path;
  const std::string py =
      FakePython(d, "echo \"ModuleNotFoundError: No module named 'vllm'\" >&2; exit 1");
  const std::string msg = MessageOf([&] { VllmServer s(Options(d, py)); });
  EXPECT_NE(msg.find("exited with code 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("No module named"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot import vllm"), std::string::npos) << msg;
}

TEST(VllmServer, ATakenPortIsRefusedBeforeAnythingStarts) {
  const TempDir dir("port");
  const fs::path& d = dir.path;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  auto o = Options(d, FakePython(d, "touch " + (d / "started").string() + "; sleep 30"));
  o.port = ntohs(a.sin_port);
  const std::string msg = MessageOf([&] { VllmServer s(o); });
  ::close(fd);
  EXPECT_NE(msg.find("is taken"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(d / "started"));
}

TEST(VllmServer, ADeadlineStopsAServerThatNeverGetsHealthy) {
  const TempDir dir("deadline");
  const fs::path& d = dir.path;
  const fs::path pidfile = d / "pid";
  // Writes its pid, then hangs without ever answering /health.
  auto o = Options(d, FakePython(d, "echo $$ > " + pidfile.string() + "; echo loading; exec sleep 60"));
  o.startup_timeout_s = 1.5;
  const double t0 = MonotonicSeconds();
  const std::string msg = MessageOf([&] { VllmServer s(o); });
  EXPECT_LT(MonotonicSeconds() - t0, 20);
  EXPECT_NE(msg.find("not healthy within 1.5 s"), std::string::npos) << msg;
  EXPECT_NE(msg.find("loading"), std::string::npos) << "the log's last lines: " << msg;
  pid_t pid = 0;
  std::ifstream(pidfile) >> pid;
  ASSERT_GT(pid, 0);
  EXPECT_NE(::kill(pid, 0), 0) << "the server process outlived the failed start";
}

// A full-parameter sync reloads the server only when the weights changed: the
// first sync of a run (the weights the server started on) costs no restart, a
// changed weight does, and each loaded version's files go once the next serves
// (the starting directory stays).
TEST(FullWeightSync, ReloadsOnlyChangedWeights) {
  TempDir tmp("full_sync");
  ModelConfig c;
  c.ApplyPreset("tiny");
  c.vocab_size = 31;
  TransformerLM m(c);
  m->InitWeights(3);
  const std::string base = (tmp.path / "base").string();
  WriteServedModel(m, base, /*merge=*/true);
  std::vector<std::string> loaded;
  FullWeightSync sync((tmp.path / "weights").string(),
                      [&](const std::string& dir, EngineSync&) {
                        loaded.push_back(dir);
                        return ServerTarget{"http://new", "m", "", ""};
                      },
                      base);
  const ServerTarget current{"http://old", "m", "", ""};
  EngineSync report;
  EXPECT_EQ(sync.Apply(m, 0, current, report).base_url, "http://old");
  EXPECT_TRUE(loaded.empty());
  EXPECT_FALSE(fs::exists(tmp.path / "weights" / "full_v0"));
  {
    torch::NoGradGuard ng;
    m->model->norm->weight[0] += 0.5;
  }
  EXPECT_EQ(sync.Apply(m, 1, current, report).base_url, "http://new");
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0], (tmp.path / "weights" / "full_v1").string());
  {
    torch::NoGradGuard ng;
    m->model->norm->weight[0] += 0.5;
  }
  sync.Apply(m, 2, current, report);
  EXPECT_EQ(loaded.size(), 2u);
  EXPECT_FALSE(fs::exists(tmp.path / "weights" / "full_v1"));
  EXPECT_TRUE(fs::exists(tmp.path / "weights" / "full_v2"));
  EXPECT_TRUE(fs::exists(base));
}

}  // namespace
}  // namespace rlid::policy
