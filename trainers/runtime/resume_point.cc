#include "trainers/runtime/resume_point.h"

#include <fmt/format.h>

#include <limits>

#include "core/error.h"

namespace rlid::trainers {

namespace {

constexpr const char* kHint =
    "resume from the checkpoint the run wrote itself (checkpoints/latest of that run directory); "
    "a checkpoint copied from another run or edited by hand cannot continue this one";

// extra[key] as a counter >= `min`.
int64_t Counter(const nlohmann::json& obj, const std::string& key, const std::string& where,
                int64_t min = 0) {
  const auto it = obj.find(key);
  if (it == obj.end()) throw IoError(fmt::format("--resume: {} has no '{}'", where, key), kHint);
  const bool fits =
      it->is_number_integer() &&
      !(it->is_number_unsigned() &&
        it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
  if (!fits || it->get<int64_t>() < min)
    throw IoError(
        fmt::format("--resume: {}: '{}' = {} is not an integer >= {}", where, key, it->dump(), min),
        kHint);
  return it->get<int64_t>();
}

int64_t Count(const memory::Store& store, const std::string& sql) {
  return store.db().QueryInt(sql);
}

}  // namespace

ShardMark CheckpointShardMark(const nlohmann::json& extra, int rank,
                              const std::string& checkpoint) {
  ShardMark m;
  const std::string where = fmt::format("{} (rlid.json extra)", checkpoint);
  if (rank == 0) {
    m.recorded = true;
    m.last_episode_id = Counter(extra, "last_episode_id", where);
    m.last_item_id = extra.contains("last_item_id") ? Counter(extra, "last_item_id", where) : 0;
    return m;
  }
  const std::string key = std::to_string(rank);
  if (!extra.contains("shards") || !extra["shards"].is_object() || !extra["shards"].contains(key))
    return m;
  const auto& s = extra["shards"][key];
  if (!s.is_object())
    throw IoError(fmt::format("--resume: {}: shards.{} is not an object", where, key), kHint);
  m.recorded = true;
  m.last_episode_id = Counter(s, "last_episode_id", where + " shards." + key);
  m.last_item_id = Counter(s, "last_item_id", where + " shards." + key);
  return m;
}

ResumePoint ReadResumePoint(const std::string& checkpoint, const nlohmann::json& meta,
                            const memory::Store& store, int rank,
                            const std::string& tokenizer_fingerprint) {
  const auto extra_it = meta.find("extra");
  if (extra_it == meta.end() || !extra_it->is_object() || !extra_it->contains("run_id") ||
      !extra_it->contains("last_episode_id"))
    throw IoError(
        fmt::format("--resume: checkpoint '{}' does not say which run it belongs to", checkpoint),
        "it was written by an older rlid, or is not a training checkpoint; start a new run");
  const nlohmann::json& extra = *extra_it;
  const std::string where = fmt::format("checkpoint '{}' (rlid.json extra)", checkpoint);
  ResumePoint p;
  p.run_id = Counter(extra, "run_id", where, 1);
  p.iteration = Counter(extra, "iteration", where);
  p.mine = CheckpointShardMark(extra, rank, fmt::format("checkpoint '{}'", checkpoint));
  if (!extra.contains("budget") || !extra["budget"].is_object())
    throw IoError(fmt::format("--resume: {} has no budget object", where), kHint);
  for (const auto& [k, v] : extra["budget"].items())
    if (!v.is_number())
      throw IoError(fmt::format("--resume: {}: budget.{} = {} is not a number", where, k, v.dump()),
                    kHint);
  const std::string fp = meta.value("tokenizer_fingerprint", std::string());
  if (!fp.empty() && !tokenizer_fingerprint.empty() && fp != tokenizer_fingerprint)
    throw IoError(fmt::format("--resume: checkpoint '{}' was written with another tokenizer "
                              "(fingerprint {}) than the run directory's tokenizer.json ({})",
                              checkpoint, fp, tokenizer_fingerprint),
                  "restore the run's own tokenizer.json; token ids under another tokenizer mean "
                  "other text");
  if (rank > 0 && !p.mine.recorded) return p;  // a shard the checkpoint's job did not have
  const int64_t run = p.run_id, it = p.iteration;
  if (!store.HasRun(run) ||
      Count(store,
            fmt::format("SELECT COUNT(*) FROM runs WHERE id = {} AND kind = 'train'", run)) == 0)
    throw IoError(fmt::format("--resume: checkpoint '{}' belongs to run {}, which {} holds no "
                              "training run of",
                              checkpoint, run, store.path()),
                  kHint);
  if (rank == 0 &&
      Count(store, fmt::format("SELECT COUNT(*) FROM metrics WHERE run_id = {} AND iteration = {}",
                               run, it)) == 0)
    throw IoError(
        fmt::format("--resume: checkpoint '{}' says iteration {}, which run {} never recorded "
                    "(its last recorded iteration is {})",
                    checkpoint, it, run,
                    Count(store, fmt::format("SELECT COALESCE(MAX(iteration), -1) FROM metrics "
                                             "WHERE run_id = {}",
                                             run))),
        kHint);
  const int64_t later_ids = Count(
      store,
      fmt::format("SELECT COUNT(*) FROM episodes WHERE run_id = {} AND iteration <= {} AND id > {}",
                  run, it, p.mine.last_episode_id));
  if (later_ids > 0)
    throw IoError(fmt::format("--resume: checkpoint '{}' keeps episodes up to id {}, but {} "
                              "episode(s) of iterations up to {} have larger ids; resuming would "
                              "delete them",
                              checkpoint, p.mine.last_episode_id, later_ids, it),
                  kHint);
  const int64_t later_items = Count(
      store, fmt::format("SELECT COUNT(*) FROM memory_items WHERE id > {} AND source_episode_id IN "
                         "(SELECT id FROM episodes WHERE run_id = {} AND iteration <= {})",
                         p.mine.last_item_id, run, it));
  if (later_items > 0)
    throw IoError(fmt::format("--resume: checkpoint '{}' keeps memory items up to id {}, but {} "
                              "item(s) of kept episodes have larger ids",
                              checkpoint, p.mine.last_item_id, later_items),
                  kHint);
  return p;
}

}  // namespace rlid::trainers
