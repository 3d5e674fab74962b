// Data-parallel training on c10d (Gloo on the CPU), through the real
// executable: `rlid train --nproc 2` gives one process's update (parameters
// within 1e-6 after 3 iterations) for decision PPO, GRPO, DAPO's coordinated
// dynamic sampling and LoRA; every rank's episodes are in the run's database
// as one (rlid sql over the attached shards); a rank that dies or freezes
// stops the others with a message naming it; --resume continues with another
// number of ranks; a frozen store host, a silent program on MASTER_PORT and
// ranks started with different configs end the job with a clear error.
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "core/launch.h"
#include "memory/store.h"
#include "policy/model/checkpoint.h"
#include "tests/agents/fixtures.h"
#include "tests/cli/run_cli.h"
#include "tests/test_paths.h"

namespace rlid::trainers {
namespace {

namespace fs = std::filesystem;
using rlid::testing::RunRlidProcess;
using rlid::testing::TempDir;

std::string Config(const std::string& name) {
  return (fs::path(RLID_SOURCE_DIR) / "configs" / name).string();
}

// Short runs: 3 iterations, a checkpoint after each, a small evaluation.
// adam_eps = 1e-6: a minibatch's gradient summed over two ranks differs from
// one process's in the last float bits, and AdamW's step g / (|g| + eps)
// magnifies that for entries with |g| near eps (cancellations, the tied
// embedding's unseen rows) to ~1e-6 at the default eps = 1e-8 (measured); at
// 1e-6 the runs agree to ~1e-7, while a wrong normaliser moves weights by ~lr.
const std::string kShort =
    "--set trainer.iterations=3 --set trainer.eval_every=0 --set trainer.eval_episodes=8 "
    "--set trainer.checkpoint_every=1 --set trainer.adam_eps=1e-6 --threads 1";

// The largest |a - b| over the parameters of two checkpoints.
double MaxParamDiff(const std::string& a, const std::string& b) {
  auto ma = policy::LoadCheckpoint(a).model;
  auto mb = policy::LoadCheckpoint(b).model;
  auto pa = ma->named_parameters(), pb = mb->named_parameters();
  EXPECT_EQ(pa.size(), pb.size());
  double worst = 0;
  for (const auto& p : pa) {
    const auto& q = pb[p.key()];
    worst = std::max(worst, (p.value().to(torch::kFloat64) - q.to(torch::kFloat64)).abs().max().item<double>());
  }
  return worst;
}

// Trains `config` once in one process and once with --nproc 2; returns the
// largest parameter difference of their final checkpoints.
double OneVsTwoRanks(const TempDir& tmp, const std::string& config, const std::string& extra) {
  auto one = RunRlidProcess(fmt::format("train {} {} {} --out one", Config(config), kShort, extra), tmp.path());
  EXPECT_EQ(one.code, 0) << one.out;
  auto two = RunRlidProcess(
      fmt::format("train {} {} {} --out two --nproc 2", Config(config), kShort, extra), tmp.path());
  EXPECT_EQ(two.code, 0) << two.out;
  EXPECT_NE(two.out.find("data-parallel job: 2 ranks (gloo)"), std::string::npos) << two.out;
  return MaxParamDiff((tmp.path() / "one/checkpoints/iter_000002").string(),
                      (tmp.path() / "two/checkpoints/iter_000002").string());
}

// `rlid sql DIR "SQL"` as CSV, without its header line.
std::string Sql(const TempDir& tmp, const std::string& dir, const std::string& sql) {
  auto r = RunRlidProcess(fmt::format("sql {} \"{}\" --csv", dir, sql), tmp.path());
  EXPECT_EQ(r.code, 0) << r.out;
  return r.out.substr(r.out.find('\n') + 1);
}

TEST(Dist, TwoRanksGiveOneProcessUpdateDecisionPpo) {
  TempDir tmp("dist_ppo");
  const double diff = OneVsTwoRanks(tmp, "bandit_ppo.toml", "");
  EXPECT_LT(diff, 1e-6);
  // The trajectories are the same too: one process's episodes = the two ranks' together.
  const std::string q =
      "SELECT COUNT(*), SUM(e.success), SUM(s.action), ROUND(SUM(s.logp_rollout), 4) FROM episodes e "
      "JOIN steps s ON s.episode_id = e.id WHERE e.split = 'train'";
  EXPECT_EQ(Sql(tmp, "one", q), Sql(tmp, "two", q));
  EXPECT_TRUE(fs::exists(tmp.path() / "two" / memory::ShardFileName(1)));
  // Views see every rank's rows, and episode ids stay unique across the files.
  EXPECT_EQ(Sql(tmp, "one", "SELECT COUNT(*) FROM v_step_provenance"),
            Sql(tmp, "two", "SELECT COUNT(*) FROM v_step_provenance"));
  EXPECT_EQ(Sql(tmp, "two", "SELECT COUNT(DISTINCT id) = COUNT(*) FROM episodes"), "1\n");
  // Rank 0 alone wrote the metrics, with the job's totals.
  const std::string m =
      "SELECT key, ROUND(value, 6) FROM metrics WHERE key IN ('budget/env_steps', "
      "'rollout/success', 'charts/decisions', 'eval/success') ORDER BY iteration, key";
  EXPECT_EQ(Sql(tmp, "one", m), Sql(tmp, "two", m));
}

TEST(Dist, TwoRanksGiveOneProcessUpdateGrpo) {
  TempDir tmp("dist_grpo");
  EXPECT_LT(OneVsTwoRanks(tmp, "bandit_grpo.toml", ""), 1e-6);
  const std::string q =
      "SELECT COUNT(*), SUM(s.invalid), ROUND(SUM(s.logp_rollout), 3) FROM episodes e JOIN steps s "
      "ON s.episode_id = e.id WHERE e.split = 'train'";
  EXPECT_EQ(Sql(tmp, "one", q), Sql(tmp, "two", q));
}

// gigpo's step rows gathered across ranks (episode ids made job-wide) in the
// token plane; in the decision plane each group stays on one rank.
TEST(Dist, TwoRanksGiveOneProcessUpdateGigpo) {
  TempDir tmp("dist_gigpo");
  EXPECT_LT(OneVsTwoRanks(tmp, "bandit_grpo.toml", "--set trainer.advantage.estimator=gigpo"),
            1e-6);
  TempDir decision("dist_gigpo_decision");
  EXPECT_LT(OneVsTwoRanks(decision, "bandit_ppo.toml",
                          "--set trainer.advantage.estimator=gigpo --set trainer.group_size=4"),
            1e-6);
}

// Asynchronous rollouts on ranks: each rank's worker plays that rank's share
// ahead with its own copies of the weights, the learners all-reduce as ever,
// so two ranks still give one process's update, in both planes; every
// episode records the version it was played with.
TEST(Dist, TwoRanksGiveOneProcessUpdateWithAsyncRollouts) {
  TempDir tmp("dist_async");
  EXPECT_LT(OneVsTwoRanks(tmp, "bandit_ppo.toml", "--set trainer.max_staleness=1"), 1e-6);
  const std::string q =
      "SELECT e.iteration, e.policy_version, COUNT(*), ROUND(SUM(s.logp_rollout), 4) FROM "
      "episodes e JOIN steps s ON s.episode_id = e.id WHERE e.split = 'train' "
      "GROUP BY e.iteration, e.policy_version ORDER BY e.iteration";
  EXPECT_EQ(Sql(tmp, "one", q), Sql(tmp, "two", q));
  EXPECT_NE(Sql(tmp, "two", q).find("2,1,"), std::string::npos)
      << "iteration 2 played by version 1";
  TempDir token("dist_async_grpo");
  EXPECT_LT(OneVsTwoRanks(token, "bandit_grpo.toml", "--set trainer.max_staleness=2"), 1e-6);
}

TEST(Dist, DapoDynamicSamplingIsCoordinatedAcrossRanks) {
  // Zero-variance groups are dropped and refilled in later rounds; the job
  // keeps the same groups, in the same order, as one process.
  TempDir tmp("dist_dapo");
  // 1% of one AdamW step (lr 5e-4): DAPO's token-mean over clip-higher terms
  // leaves float rounding at ~1e-6 after 3 iterations (measured 1.0e-6).
  EXPECT_LT(OneVsTwoRanks(tmp, "bandit_dapo.toml", ""), 5e-6);
  const std::string m =
      "SELECT key, value FROM metrics WHERE key LIKE 'sampling/%' ORDER BY iteration, key";
  EXPECT_EQ(Sql(tmp, "one", m), Sql(tmp, "two", m));
}

TEST(Dist, TwoRanksGiveOneProcessUpdateWithLora) {
  TempDir tmp("dist_lora");
  EXPECT_LT(OneVsTwoRanks(tmp, "bandit_lora.toml", "--set policy.lora.dropout=0"), 1e-6);
}

// `rlid ARGS` killed after `limit_s` (a hang fails the test instead of stalling the suite).
rlid::testing::CliOutput RunBounded(const std::string& args, const fs::path& cwd,
                                    const std::string& env, int limit_s, double* seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = RunRlidProcess(args, cwd, fmt::format("{} timeout -k 5 {}", env, limit_s));
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// Seconds from the first log line "[HH:MM:SS] ..." holding `marker` until
// now (the log's local time of day); -1 when no line holds it. Fault tests
// time the job from the fault on: start-up is slow on a loaded machine.
int SecondsSinceLogLine(const std::string& out, const std::string& marker) {
  const size_t at = out.find(marker);
  if (at == std::string::npos) return -1;
  const size_t nl = out.rfind('\n', at);
  int h = 0, m = 0, s = 0;
  if (std::sscanf(out.c_str() + (nl == std::string::npos ? 0 : nl + 1), "[%d:%d:%d]", &h, &m, &s) != 3)
    return -1;
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  const int now_s = local.tm_hour * 3600 + local.tm_min * 60 + local.tm_sec;
  return (now_s - (h * 3600 + m * 60 + s) + 86400) % 86400;
}

// A rank that dies, or freezes, at iteration 1: the job stops within the
// timeout, non-zero, with a message naming the rank.
void ExpectFaultNamesRank(const std::string& kind) {
  TempDir tmp("dist_fault_" + kind);
  double seconds = 0;
  auto r = RunBounded(
      fmt::format("train {} {} --set run.dist_timeout_s=5 --out run --nproc 2", Config("bandit_ppo.toml"),
                  kShort),
      tmp.path(), fmt::format("RLID_FAULT_INJECT=rank=1,iteration=1,kind={}", kind), 240, &seconds);
  EXPECT_EQ(r.code, 7) << r.out;  // a distributed error, not 124/137 (the bound)
  // From the fault to the end (start-up is slow on a loaded machine).
  const int since = SecondsSinceLogLine(r.out, "RLID_FAULT_INJECT: rank 1");
  EXPECT_GE(since, 0) << r.out;
  EXPECT_LT(since, 60) << r.out;
  EXPECT_NE(r.out.find("rank 1 stopped responding"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("distributed error"), std::string::npos) << r.out;
  // What was written before the fault is intact: rank 0's checkpoint of iteration 0.
  EXPECT_TRUE(fs::exists(tmp.path() / "run/checkpoints/iter_000000/rlid.json")) << r.out;
}

TEST(Dist, DeadRankStopsTheJobNamingIt) { ExpectFaultNamesRank("exit"); }
TEST(Dist, FrozenRankStopsTheJobNamingIt) { ExpectFaultNamesRank("hang"); }

TEST(Dist, FrozenStoreHostStopsTheJobNamingIt) {
  // Rank 0 hosts the store and freezes (SIGSTOP) at iteration 1: rank 1's
  // collective times out, its store calls (diagnosis, heartbeat) must too, so
  // it exits, and the launcher kills the frozen rank 0 after its grace (15 s).
  TempDir tmp("dist_fault_host");
  double seconds = 0;
  auto r = RunBounded(fmt::format("train {} {} --set run.dist_timeout_s=3 --out run --nproc 2",
                                  Config("bandit_ppo.toml"), kShort),
                      tmp.path(), "RLID_FAULT_INJECT=rank=0,iteration=1,kind=hang", 240, &seconds);
  EXPECT_EQ(r.code, 7) << r.out;  // not 124/137: the bound above did not have to stop it
  // From the freeze to the end: about 3 + 3 + 3 s for rank 1, then the 15 s grace.
  const int since = SecondsSinceLogLine(r.out, "RLID_FAULT_INJECT: rank 0 hang");
  EXPECT_GE(since, 0) << r.out;
  EXPECT_LT(since, 60) << r.out;
  EXPECT_NE(r.out.find("rank 0, which hosts the job's store"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("did not answer within 3 s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 0 was killed by signal 9 after it did not stop within 15 s"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("(it was frozen: stopped)"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(tmp.path() / "run/checkpoints/iter_000000/rlid.json")) << r.out;
}

// A program on a port that accepts connections and never answers.
class SilentServer {
 public:
  SilentServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port_ = ntohs(a.sin_port);
    accepter_ = std::thread([this] {
      while (true) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;  // shut down
        conns_.push_back(c);
      }
    });
  }
  ~SilentServer() {
    ::shutdown(fd_, SHUT_RDWR);  // wakes accept()
    accepter_.join();
    for (int c : conns_) ::close(c);
    ::close(fd_);
  }
  int port() const { return port_; }

 private:
  int fd_ = -1, port_ = 0;
  std::vector<int> conns_;
  std::thread accepter_;
};

TEST(Dist, SilentProgramOnMasterPortFailsWithinTheTimeout) {
  // c10d's handshake waits for the server's answer without a limit; the
  // rendezvous as a whole must still end within dist_timeout_s (+ slack).
  TempDir tmp("dist_silent");
  SilentServer server;
  for (int rank : {1, 0}) {
    double seconds = 0;
    auto r = RunBounded(
        fmt::format("train {} {} --set run.dist_timeout_s=2 --out run", Config("bandit_ppo.toml"), kShort),
        tmp.path(),
        fmt::format("RANK={} WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT={}", rank, server.port()),
        120, &seconds);
    EXPECT_EQ(r.code, 7) << "rank " << rank << ": " << r.out;  // not 124/137 (the bound)
    EXPECT_LT(seconds, 90) << r.out;  // 2 s + 2 s slack, plus start-up on a loaded machine
    EXPECT_NE(r.out.find(fmt::format("rank {} of 2 could not join the job at 127.0.0.1:{} within 2 s",
                                     rank, server.port())),
              std::string::npos)
        << r.out;
    // A client learns the store did not answer; rank 0 cannot listen on the port.
    if (rank == 1) {
      EXPECT_NE(r.out.find("did not answer 'connect'"), std::string::npos) << r.out;
    }
  }
}

TEST(Dist, RanksWithDifferentConfigsAreRefused) {
  // Hand-started ranks must train one config: rank 0 compares every rank's
  // resolved config at the rendezvous and names the rank and the keys.
  TempDir tmp("dist_mismatch");
  const int port = FreeLocalPort();
  rlid::testing::CliOutput ranks[2];
  double seconds[2] = {0, 0};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      ranks[r] = RunBounded(
          fmt::format("train {} {} --set trainer.iterations=1 --set run.dist_timeout_s=20 {} --out two",
                      Config("bandit_ppo.toml"), kShort,
                      r == 1 ? "--set trainer.episodes_per_iteration=32 --set run.seed=9" : ""),
          tmp.path(),
          fmt::format("RANK={} WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT={}", r, port), 120,
          &seconds[r]);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ranks[r].code, 2) << "rank " << r << ": " << ranks[r].out;
    EXPECT_NE(ranks[r].out.find("rank 1's config differs from rank 0's"), std::string::npos)
        << ranks[r].out;
    EXPECT_NE(ranks[r].out.find("trainer.episodes_per_iteration = 64 on rank 0, 32 on rank 1"),
              std::string::npos)
        << ranks[r].out;
    EXPECT_NE(ranks[r].out.find("run.seed = 1 on rank 0, 9 on rank 1"), std::string::npos) << ranks[r].out;
  }
  EXPECT_FALSE(fs::exists(tmp.path() / "two")) << "refused before the run directory exists";
}

TEST(Dist, ResumeWithAnotherNumberOfRanks) {
  // 2 ranks for iterations 0-1, killed; resumed by 1 process for iteration 2:
  // the same weights as an uninterrupted one-process run.
  TempDir tmp("dist_resume");
  const std::string cfg = Config("bandit_ppo.toml");
  auto one = RunRlidProcess(fmt::format("train {} {} --out one", cfg, kShort), tmp.path());
  ASSERT_EQ(one.code, 0) << one.out;
  auto two = RunRlidProcess(fmt::format("train {} {} --out run --nproc 2", cfg, kShort),
                            tmp.path(), "RLID_FAULT_INJECT=rank=0,iteration=2,kind=exit");
  ASSERT_NE(two.code, 0) << two.out;
  ASSERT_TRUE(fs::exists(tmp.path() / "run/checkpoints/iter_000001"));
  auto resumed = RunRlidProcess(fmt::format("train {} {} --out run --resume", cfg, kShort), tmp.path());
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_LT(MaxParamDiff((tmp.path() / "one/checkpoints/iter_000002").string(),
                         (tmp.path() / "run/checkpoints/iter_000002").string()),
            1e-6);
  // The run holds each iteration's episodes once: rank 1's shard was cut back to
  // the checkpoint, and iteration 2 came from the one resumed process.
  const std::string q =
      "SELECT iteration, COUNT(*) FROM episodes WHERE split = 'train' GROUP BY iteration ORDER BY iteration";
  EXPECT_EQ(Sql(tmp, "one", q), Sql(tmp, "run", q));
  // And back to two ranks for one more iteration.
  auto again = RunRlidProcess(
      fmt::format("train {} {} --set trainer.iterations=4 --out run --resume --nproc 2", cfg, kShort),
      tmp.path());
  ASSERT_EQ(again.code, 0) << again.out;
  EXPECT_EQ(Sql(tmp, "run", "SELECT COUNT(*) FROM episodes WHERE split = 'train' AND iteration = 3"),
            "64\n");
}

TEST(Dist, CompareRunsItsArmsDataParallel) {
  // Rank 0 trains the warm start while rank 1 waits; every arm x seed then
  // trains on both ranks; rank 0 writes the report.
  TempDir tmp("dist_compare");
  auto r = RunRlidProcess(
      fmt::format("compare {} --set compare.seeds=[1] --set compare.budget_value=128 "
                  "--set sft.episodes=32 --set sft.epochs=1 --set trainer.eval_episodes=8 "
                  "--threads 1 --quiet --out cmp --nproc 2",
                  Config("quickstart.toml")),
      tmp.path());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("report:"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(tmp.path() / "cmp/report.html"));
  // Every arm's training episodes are split over the two files, half each.
  const std::string q =
      "SELECT ru.arm, COUNT(*) FROM episodes e JOIN runs ru ON ru.id = e.run_id WHERE e.split = "
      "'train' AND ru.kind = 'compare' GROUP BY ru.arm ORDER BY ru.arm";
  EXPECT_EQ(Sql(tmp, "cmp", q), "grpo,128\ngspo,128\nppo_decision,128\n");
  EXPECT_EQ(Sql(tmp, "cmp/" + memory::ShardFileName(1),
                "SELECT COUNT(*) FROM episodes WHERE split = 'train'"),
            "192\n");
}

TEST(Dist, RanksStartedWithTorchrunVariablesFormOneJob) {
  // How a multi-machine job starts: every rank is its own `rlid train` with
  // RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (here both on this machine).
  TempDir tmp("dist_torchrun");
  const std::string cfg = Config("bandit_ppo.toml");
  auto one = RunRlidProcess(fmt::format("train {} {} --out one", cfg, kShort), tmp.path());
  ASSERT_EQ(one.code, 0) << one.out;
  const int port = FreeLocalPort();
  rlid::testing::CliOutput ranks[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      ranks[r] = RunRlidProcess(
          fmt::format("train {} {} --out two", cfg, kShort), tmp.path(),
          fmt::format("RANK={} LOCAL_RANK={} WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT={}", r, r,
                      port));
    });
  for (auto& t : threads) t.join();
  ASSERT_EQ(ranks[0].code, 0) << ranks[0].out;
  ASSERT_EQ(ranks[1].code, 0) << ranks[1].out;
  EXPECT_NE(ranks[0].out.find("ppo_decision finished 3 iterations"), std::string::npos) << ranks[0].out;
  EXPECT_EQ(ranks[1].out.find("finished"), std::string::npos) << ranks[1].out;  // rank 0 reports
  EXPECT_LT(MaxParamDiff((tmp.path() / "one/checkpoints/iter_000002").string(),
                         (tmp.path() / "two/checkpoints/iter_000002").string()),
            1e-6);
}

TEST(Dist, RanksJoinTheStoreTorchrunsAgentHosts) {
  // Under torchrun (TORCHELASTIC_USE_AGENT_STORE=True) the agent hosts the
  // store; here the test process plays the agent.
  TempDir tmp("dist_agent");
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(FreeLocalPort());
  so.isServer = true;
  so.waitWorkers = false;
  auto agent = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
  rlid::testing::CliOutput ranks[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      ranks[r] = RunRlidProcess(
          fmt::format("train {} {} --out two", Config("bandit_ppo.toml"), kShort), tmp.path(),
          fmt::format("RANK={} LOCAL_RANK={} WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT={} "
                      "TORCHELASTIC_USE_AGENT_STORE=True TORCHELASTIC_RESTART_COUNT=3",
                      r, r, agent->getPort()));
    });
  for (auto& t : threads) t.join();
  ASSERT_EQ(ranks[0].code, 0) << ranks[0].out;
  ASSERT_EQ(ranks[1].code, 0) << ranks[1].out;
  // The ranks kept their keys under torchrun's worker prefix.
  EXPECT_TRUE(agent->check({"/worker/attempt_3/rlid/mark/1"}));
  EXPECT_TRUE(fs::exists(tmp.path() / "two/checkpoints/iter_000002/rlid.json"));
}

TEST(Dist, BadWorldVariablesAreConfigErrors) {
  TempDir tmp("dist_env");
  auto r = RunRlidProcess(fmt::format("train {} {} --out run", Config("bandit_ppo.toml"), kShort),
                          tmp.path(), "WORLD_SIZE=2 RANK=5");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("RANK='5'"), std::string::npos) << r.out;
  auto few = RunRlidProcess(
      fmt::format("train {} {} --set trainer.episodes_per_iteration=1 --out few --nproc 2",
                  Config("bandit_ppo.toml"), kShort),
      tmp.path());
  EXPECT_NE(few.code, 0) << few.out;
  EXPECT_NE(few.out.find("every rank needs at least one"), std::string::npos) << few.out;
}

}  // namespace
}  // namespace rlid::trainers
