// Crash safety: a writer process (tests/helpers/store_crash_writer) is killed
// with SIGKILL at seeded random moments, repeatedly, on the same database.
// After every kill the database must pass integrity and foreign-key checks,
// contain every episode the writer reported as committed, and hold no
// half-written episode (every stored episode has all its steps, menus and
// memory rows).
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "core/rng.h"
#include "memory/store.h"
#include "tests/memory/fixtures.h"
#include "tests/test_paths.h"

namespace rlid::memory {
namespace {

const std::string kHelper = std::string(RLID_BINARY_DIR) + "/store_crash_writer";

struct Child {
  pid_t pid = -1;
  int out = -1;  // read end of the child's stdout
};

Child Spawn(const std::string& db) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  Child c;
  c.pid = ::fork();
  if (c.pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    ::execl(kHelper.c_str(), kHelper.c_str(), db.c_str(), "3", "1000000", nullptr);
    _exit(127);
  }
  ::close(fds[1]);
  c.out = fds[0];
  return c;
}

// Reads whatever is available within timeout_ms; false at EOF.
bool ReadSome(int fd, std::string& buf, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) <= 0) return true;
  char tmp[4096];
  const ssize_t n = ::read(fd, tmp, sizeof(tmp));
  if (n <= 0) return false;
  buf.append(tmp, static_cast<size_t>(n));
  return true;
}

// Highest id in complete "committed ID" lines.
int64_t LastCommitted(const std::string& out) {
  int64_t last = 0;
  size_t pos = 0;
  while ((pos = out.find("committed ", pos)) != std::string::npos) {
    const size_t end = out.find('\n', pos);
    if (end == std::string::npos) break;
    last = std::max<int64_t>(last, std::stoll(out.substr(pos + 10, end - pos - 10)));
    pos = end;
  }
  return last;
}

TEST(StoreCrash, KilledWriterLosesNothingCommittedAndLeavesNoHalfEpisodes) {
  ASSERT_TRUE(std::filesystem::exists(kHelper)) << kHelper << " not built";
  const std::string db = testing::ScratchDir("crash") + "/rlid.db";
  Rng rng = Rng::Stream(2024, "crash_test");
  constexpr int kRounds = 8;
  int64_t previous_max = 0;
  int total_reported = 0;  // rounds in which at least one flush was reported
  for (int round = 0; round < kRounds; ++round) {
    Child c = Spawn(db);
    std::string out;
    // Wait for "ready" (the store is open and migrated), then kill at a random moment.
    const auto start = std::chrono::steady_clock::now();
    while (out.find("ready\n") == std::string::npos &&
           std::chrono::steady_clock::now() - start < std::chrono::seconds(20))
      if (!ReadSome(c.out, out, 50)) break;
    ASSERT_NE(out.find("ready\n"), std::string::npos) << "round " << round << ": " << out;
    const int delay_ms = static_cast<int>(rng.UniformRange(1, 250));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(delay_ms);
    while (std::chrono::steady_clock::now() < deadline) ReadSome(c.out, out, 5);
    ASSERT_EQ(::kill(c.pid, SIGKILL), 0);
    int status = 0;
    ::waitpid(c.pid, &status, 0);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "round " << round << " status " << status << ": " << out;
    while (ReadSome(c.out, out, 100)) {  // lines written before the kill
    }
    ::close(c.out);
    const int64_t reported = LastCommitted(out);

    auto store = Store::Open(db, Store::Mode::kReadOnly);
    std::string report;
    ASSERT_TRUE(store->CheckIntegrity(&report)) << "round " << round << ":\n" << report;
    // The writer commits FIFO and a new process continues at MAX(id) + 1, so
    // the committed ids are exactly 1..MAX(id): nothing committed is lost, and
    // every id the writer reported is at most MAX(id).
    const int64_t max_id = store->db().QueryInt("SELECT COALESCE(MAX(id), 0) FROM episodes");
    EXPECT_EQ(store->db().QueryInt("SELECT COUNT(*) FROM episodes"), max_id) << "round " << round;
    EXPECT_GE(max_id, reported) << "round " << round << ": a reported episode is missing";
    EXPECT_GE(max_id, previous_max) << "round " << round << ": episodes of earlier rounds lost";
    previous_max = max_id;
    total_reported += reported > 0;
    // No half-written episode: every stored episode has all of its rows.
    auto rows = store->Query(
        "SELECT e.id, e.length, (SELECT COUNT(*) FROM steps s WHERE s.episode_id = e.id), "
        "(SELECT COUNT(*) FROM menu_items m WHERE m.episode_id = e.id), "
        "(SELECT COUNT(*) FROM memory_items i WHERE i.source_episode_id = e.id) "
        "FROM episodes e");
    for (const auto& row : rows.rows) {
      const int64_t id = std::get<int64_t>(row[0]);
      const int64_t len = testing::CanonicalLength(id);
      EXPECT_EQ(std::get<int64_t>(row[1]), len) << "episode " << id;
      EXPECT_EQ(std::get<int64_t>(row[2]), len) << "episode " << id;
      EXPECT_EQ(std::get<int64_t>(row[3]), len * testing::kCanonicalMenu) << "episode " << id;
      EXPECT_EQ(std::get<int64_t>(row[4]), 1) << "episode " << id;
    }
  }
  // The kills landed while the writer was committing, not before it started.
  EXPECT_GE(total_reported, kRounds / 2);
  EXPECT_GT(previous_max, 0);
}

}  // namespace
}  // namespace rlid::memory
