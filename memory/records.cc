// Record helpers: kind names, validation of the storage contract, timestamps.
#include "memory/records.h"

#include <fmt/format.h>

#include <chrono>
#include <ctime>
#include <set>

#include "core/check.h"
#include "core/error.h"

namespace rlid::memory {

const char* MemoryKindName(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kObservation:
      return "observation";
    case MemoryKind::kNote:
      return "note";
    case MemoryKind::kSummary:
      return "summary";
    case MemoryKind::kOracleHint:
      return "oracle_hint";
  }
  return "?";
}

MemoryKind ParseMemoryKind(std::string_view name) {
  for (MemoryKind k :
       {MemoryKind::kObservation, MemoryKind::kNote, MemoryKind::kSummary, MemoryKind::kOracleHint})
    if (name == MemoryKindName(k)) return k;
  throw ConfigError(fmt::format("unknown memory kind '{}'", name),
                    "expected one of: observation, note, summary, oracle_hint");
}

void ValidateSplit(std::string_view split) {
  if (split != "train" && split != "test")
    throw ConfigError(fmt::format("unknown split '{}'", split), "expected 'train' or 'test'");
}

int64_t RowCount(const EpisodeRecord& e) {
  int64_t rows = 1 + static_cast<int64_t>(e.new_items.size());
  for (const auto& it : e.new_items) rows += static_cast<int64_t>(it.parents.size());
  for (const auto& s : e.steps)
    rows += 2 + static_cast<int64_t>(s.menu.size()) + static_cast<int64_t>(s.reads.size());
  return rows;
}

void ValidateEpisode(const EpisodeRecord& e) {
  RLID_CHECK_GT(e.id, 0, "episode ids come from Store::NewEpisodeId()");
  RLID_CHECK_GT(e.run_id, 0, "episode {} has no run (Store::BeginRun)", e.id);
  RLID_CHECK(e.split == "train" || e.split == "test", "episode {}: split '{}'", e.id, e.split);
  RLID_CHECK(e.plane == "decision" || e.plane == "token", "episode {}: plane '{}'", e.id, e.plane);
  std::set<int> ts;
  for (const auto& s : e.steps) {
    RLID_CHECK(ts.insert(s.t).second, "episode {}: step t={} recorded twice", e.id, s.t);
    std::set<int> positions;
    for (const auto& m : s.menu)
      RLID_CHECK(positions.insert(m.position).second, "episode {} t={}: menu position {} twice",
                 e.id, s.t, m.position);
    RLID_CHECK(s.optimal >= -1 && s.optimal <= 1,
               "episode {} t={}: optimal = {} (expected -1, 0 "
               "or 1)",
               e.id, s.t, s.optimal);
    RLID_CHECK(!s.afterstate_hash || s.state_hash != 0,
               "episode {} t={}: an afterstate hash without the state hash", e.id, s.t);
    if (s.invalid) {
      RLID_CHECK(s.realisation.empty(), "episode {} t={}: an invalid step has no realisation", e.id,
                 s.t);
      RLID_CHECK(!s.afterstate_hash, "episode {} t={}: an invalid step has no afterstate", e.id,
                 s.t);
      RLID_CHECK(s.optimal != 1, "episode {} t={}: an invalid step is never optimal", e.id, s.t);
    }
    std::set<int> ranks;
    for (const auto& r : s.reads) {
      RLID_CHECK(ranks.insert(r.rank).second, "episode {} t={}: read rank {} twice", e.id, s.t,
                 r.rank);
      RLID_CHECK_GT(r.item_id, 0, "episode {} t={}: read of item id 0", e.id, s.t);
    }
  }
  for (const auto& it : e.new_items) {
    RLID_CHECK_GT(it.id, 0, "memory item ids come from the MemoryBank / Store");
    RLID_CHECK_EQ(it.source.episode_id, e.id, "item {} is persisted with another episode", it.id);
    RLID_CHECK(it.split == "train" || it.split == "test", "item {}: split '{}'", it.id, it.split);
    RLID_CHECK_GE(it.pass, int64_t{0}, "item {}: passes are 0 (training) or NewPass()", it.id);
    RLID_CHECK(it.source.t < 0 || ts.count(it.source.t), "item {}: source step t={} not recorded",
               it.id, it.source.t);
    for (int64_t p : it.parents)
      RLID_CHECK_LT(p, it.id, "item {}: parents are created before their children", it.id);
  }
}

std::string NowIso8601() {
  const auto now = std::chrono::system_clock::now();
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:03d}Z", buf, static_cast<int>(ms));
}

double NowUnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace rlid::memory
