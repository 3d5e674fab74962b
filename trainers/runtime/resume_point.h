// Where a checkpoint says its run stood, read for --resume with every counter
// checked against the store that resume is about to truncate. A checkpoint
// that does not belong to that store (copied from another run, edited, or
// damaged) is an IoError raised before anything is deleted.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "memory/store.h"

namespace rlid::trainers {

// What a checkpoint saw of rank `rank`'s database: checkpoints of a job of N
// ranks list every shard under "shards"; older ones only rank 0's ids.
struct ShardMark {
  bool recorded = false;  // the checkpoint's job had this rank
  int64_t last_episode_id = 0, last_item_id = 0;
};
// IoError when a recorded counter is not a non-negative integer.
ShardMark CheckpointShardMark(const nlohmann::json& extra, int rank,
                              const std::string& checkpoint = "the checkpoint");

struct ResumePoint {
  int64_t run_id = 0;
  int64_t iteration = 0;  // the last iteration the checkpoint holds
  ShardMark mine;         // this rank's ids at the checkpoint
};

// Reads the checkpoint's rlid.json `meta` and checks it against `store` (this
// rank's database): the run exists and trained, rank 0 recorded the
// checkpoint's iteration, and no episode or memory item of a kept iteration
// lies beyond the ids the checkpoint kept. `tokenizer_fingerprint` (the run
// directory's tokenizer) must equal the checkpoint's.
ResumePoint ReadResumePoint(const std::string& checkpoint, const nlohmann::json& meta,
                            const memory::Store& store, int rank,
                            const std::string& tokenizer_fingerprint);

}  // namespace rlid::trainers
