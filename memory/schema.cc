// The migrations: 1 = tables and indexes, 2 = the documented views, 3 = memory
// items scoped to instance and pass, step provenance and its views. Views are
// plain SQL so that sqlite3 and any SQLite browser see exactly what rlid sees.
// Never edit a released migration; append a new one.
#include "memory/schema.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"
#include "memory/records.h"
#include "memory/sqlite.h"

namespace rlid::memory {
namespace {

constexpr const char* kTablesSql = R"sql(
CREATE TABLE rlid_schema (
  version      INTEGER PRIMARY KEY,
  description  TEXT NOT NULL,
  applied_at   TEXT NOT NULL,
  rlid_version TEXT NOT NULL
);

CREATE TABLE runs (
  id                INTEGER PRIMARY KEY,
  name              TEXT NOT NULL,
  arm               TEXT NOT NULL DEFAULT '',
  kind              TEXT NOT NULL,
  config_toml       TEXT NOT NULL,
  seed              INTEGER NOT NULL,
  code_version      TEXT NOT NULL,
  allow_cross_split INTEGER NOT NULL DEFAULT 0 CHECK (allow_cross_split IN (0, 1)),
  started_at        TEXT NOT NULL,
  ended_at          TEXT,
  status            TEXT NOT NULL DEFAULT 'running'
                    CHECK (status IN ('running', 'completed', 'failed', 'interrupted'))
);

CREATE TABLE episodes (
  id             INTEGER PRIMARY KEY,
  run_id         INTEGER NOT NULL REFERENCES runs(id),
  env            TEXT NOT NULL,
  seed           INTEGER NOT NULL,
  split          TEXT NOT NULL CHECK (split IN ('train', 'test')),
  plane          TEXT NOT NULL CHECK (plane IN ('decision', 'token')),
  policy_version INTEGER NOT NULL,
  iteration      INTEGER NOT NULL,
  ret            REAL NOT NULL,
  success        INTEGER NOT NULL CHECK (success IN (0, 1)),
  length         INTEGER NOT NULL,
  truncated      INTEGER NOT NULL CHECK (truncated IN (0, 1)),
  committed_at   TEXT NOT NULL
);
CREATE INDEX episodes_by_run ON episodes(run_id, iteration);

-- Prompt texts, stored once per distinct hash (16 hex digits of HashBytes).
CREATE TABLE prompts (
  hash   TEXT PRIMARY KEY,
  text   TEXT NOT NULL,
  tokens INTEGER NOT NULL
);

CREATE TABLE steps (
  episode_id       INTEGER NOT NULL REFERENCES episodes(id),
  t                INTEGER NOT NULL,
  observation      TEXT NOT NULL,
  prompt_hash      TEXT NOT NULL REFERENCES prompts(hash),
  prompt_tokens    INTEGER NOT NULL,
  action           INTEGER NOT NULL,  -- -1: invalid
  label            TEXT NOT NULL,
  command          TEXT NOT NULL,
  generated_text   TEXT,              -- token plane; decision plane: the scratchpad (reasoning)
  generated_tokens INTEGER NOT NULL,
  logp_rollout     REAL,              -- NULL: not applicable
  logp_train       REAL,
  value            REAL,
  reward           REAL NOT NULL,
  invalid          INTEGER NOT NULL CHECK (invalid IN (0, 1)),
  invalid_reason   TEXT NOT NULL,
  PRIMARY KEY (episode_id, t)
);

CREATE TABLE menu_items (
  episode_id   INTEGER NOT NULL,
  t            INTEGER NOT NULL,
  position     INTEGER NOT NULL,
  action       INTEGER NOT NULL,
  label        TEXT NOT NULL,
  command      TEXT NOT NULL,
  afterstate   TEXT NOT NULL,
  probability  REAL,
  realisations TEXT NOT NULL,  -- JSON array of {"text", "probability"}
  PRIMARY KEY (episode_id, t, position),
  FOREIGN KEY (episode_id, t) REFERENCES steps(episode_id, t)
);

CREATE TABLE memory_items (
  id                INTEGER PRIMARY KEY,
  run_id            INTEGER NOT NULL REFERENCES runs(id),
  content           TEXT NOT NULL,
  kind              TEXT NOT NULL CHECK (kind IN ('observation', 'note', 'summary', 'oracle_hint')),
  source_episode_id INTEGER NOT NULL REFERENCES episodes(id) DEFERRABLE INITIALLY DEFERRED,
  source_t          INTEGER,  -- NULL: the episode as a whole
  split             TEXT NOT NULL CHECK (split IN ('train', 'test')),
  policy_version    INTEGER NOT NULL,
  created_at        TEXT NOT NULL,
  FOREIGN KEY (source_episode_id, source_t) REFERENCES steps(episode_id, t)
    DEFERRABLE INITIALLY DEFERRED
);
CREATE INDEX memory_items_by_source ON memory_items(source_episode_id, source_t);
CREATE INDEX memory_items_by_run ON memory_items(run_id);

CREATE TABLE memory_parents (
  item_id   INTEGER NOT NULL REFERENCES memory_items(id) DEFERRABLE INITIALLY DEFERRED,
  parent_id INTEGER NOT NULL REFERENCES memory_items(id) DEFERRABLE INITIALLY DEFERRED,
  PRIMARY KEY (item_id, parent_id),
  CHECK (parent_id < item_id)
) WITHOUT ROWID;
CREATE INDEX memory_parents_by_parent ON memory_parents(parent_id);

CREATE TABLE memory_reads (
  episode_id INTEGER NOT NULL,
  t          INTEGER NOT NULL,
  rank       INTEGER NOT NULL,  -- 0: first memory item in the prompt
  item_id    INTEGER NOT NULL REFERENCES memory_items(id) DEFERRABLE INITIALLY DEFERRED,
  score      REAL,
  PRIMARY KEY (episode_id, t, rank),
  FOREIGN KEY (episode_id, t) REFERENCES steps(episode_id, t)
) WITHOUT ROWID;
CREATE INDEX memory_reads_by_item ON memory_reads(item_id);

CREATE TABLE metrics (
  run_id    INTEGER NOT NULL REFERENCES runs(id),
  iteration INTEGER NOT NULL,
  key       TEXT NOT NULL,
  value     REAL,          -- NULL: the value was not finite
  wall_time REAL NOT NULL  -- Unix seconds
);
CREATE INDEX metrics_by_key ON metrics(run_id, key, iteration);

CREATE TABLE checkpoints (
  id         INTEGER PRIMARY KEY,
  run_id     INTEGER NOT NULL REFERENCES runs(id),
  iteration  INTEGER NOT NULL,
  path       TEXT NOT NULL,
  created_at TEXT NOT NULL
);
)sql";

constexpr const char* kViewsSql = R"sql(
-- One row per memory item read at a step: what was in the prompt when the
-- agent chose `chosen_label`, and where each item came from.
CREATE VIEW v_step_provenance AS
SELECT e.run_id            AS run_id,
       r.episode_id        AS episode_id,
       r.t                 AS t,
       e.split             AS episode_split,
       s.label             AS chosen_label,
       s.command           AS chosen_command,
       r.rank              AS rank,
       r.score             AS score,
       m.id                AS item_id,
       m.kind              AS item_kind,
       m.content           AS item_content,
       m.split             AS item_split,
       m.run_id            AS source_run_id,
       m.source_episode_id AS source_episode_id,
       m.source_t          AS source_t,
       src.observation     AS source_observation,
       m.policy_version    AS item_policy_version,
       m.created_at        AS item_created_at,
       (SELECT COUNT(*) FROM memory_parents p WHERE p.item_id = m.id) AS item_parents
FROM memory_reads r
JOIN steps s ON s.episode_id = r.episode_id AND s.t = r.t
JOIN episodes e ON e.id = r.episode_id
JOIN memory_items m ON m.id = r.item_id
LEFT JOIN steps src ON src.episode_id = m.source_episode_id AND src.t = m.source_t;

-- Every (item, ancestor) pair, the item itself at depth 0. One item's lineage:
--   SELECT * FROM v_memory_lineage WHERE item_id = 42 ORDER BY depth;
CREATE VIEW v_memory_lineage AS
WITH RECURSIVE lineage(item_id, ancestor_id, depth, path) AS (
  SELECT id, id, 0, CAST(id AS TEXT) FROM memory_items
  UNION ALL
  SELECT l.item_id, p.parent_id, l.depth + 1, l.path || ' <- ' || p.parent_id
  FROM lineage l JOIN memory_parents p ON p.item_id = l.ancestor_id
)
SELECT l.item_id           AS item_id,
       l.ancestor_id       AS ancestor_id,
       l.depth             AS depth,
       l.path              AS path,
       m.kind              AS kind,
       m.content           AS content,
       m.split             AS split,
       m.run_id            AS run_id,
       m.source_episode_id AS source_episode_id,
       m.source_t          AS source_t,
       m.policy_version    AS policy_version,
       m.created_at        AS created_at
FROM lineage l JOIN memory_items m ON m.id = l.ancestor_id;

-- Information that crossed splits, as from_split -> to_split:
--   read        a step read an item created in another split
--   derived     an item was derived from a parent of another split
--   mislabelled an item's split differs from the split of its source episode
-- permitted = 1 when the run set [memory] allow_cross_split = true.
CREATE VIEW v_split_leaks AS
SELECT 'read' AS leak, e.run_id AS run_id, r.episode_id AS episode_id, r.t AS t,
       r.item_id AS item_id, NULL AS parent_id, m.split AS from_split, e.split AS to_split,
       ru.allow_cross_split AS permitted
FROM memory_reads r
JOIN episodes e ON e.id = r.episode_id
JOIN memory_items m ON m.id = r.item_id
JOIN runs ru ON ru.id = e.run_id
WHERE m.split <> e.split
UNION ALL
SELECT 'derived', m.run_id, m.source_episode_id, m.source_t, m.id, p.parent_id, pm.split,
       m.split, ru.allow_cross_split
FROM memory_parents p
JOIN memory_items m ON m.id = p.item_id
JOIN memory_items pm ON pm.id = p.parent_id
JOIN runs ru ON ru.id = m.run_id
WHERE pm.split <> m.split
UNION ALL
SELECT 'mislabelled', m.run_id, m.source_episode_id, m.source_t, m.id, NULL, e.split, m.split, 0
FROM memory_items m
JOIN episodes e ON e.id = m.source_episode_id
WHERE e.split <> m.split;

-- Per run, plane and menu position: mean predicted probability of the item
-- shown there vs how often it was chosen, and episode success when chosen.
CREATE VIEW v_label_calibration AS
SELECT e.run_id                                      AS run_id,
       e.plane                                       AS plane,
       mi.position                                   AS position,
       mi.label                                      AS label,
       COUNT(*)                                      AS offered,
       AVG(mi.probability)                           AS mean_probability,
       SUM(s.invalid = 0 AND s.action = mi.action)   AS chosen,
       AVG(s.invalid = 0 AND s.action = mi.action)   AS chosen_rate,
       AVG(mi.probability) - AVG(s.invalid = 0 AND s.action = mi.action) AS calibration_gap,
       AVG(CASE WHEN s.invalid = 0 AND s.action = mi.action THEN e.success END)
                                                     AS success_when_chosen
FROM menu_items mi
JOIN steps s ON s.episode_id = mi.episode_id AND s.t = mi.t
JOIN episodes e ON e.id = mi.episode_id
GROUP BY e.run_id, e.plane, mi.position, mi.label;

-- Per run: what was spent. budget_metrics holds the latest value of every
-- 'budget/*' metric as a JSON object.
CREATE VIEW v_run_budget AS
SELECT ru.id                            AS run_id,
       ru.name                          AS name,
       ru.arm                           AS arm,
       ru.kind                          AS kind,
       ru.status                        AS status,
       COALESCE(ep.episodes, 0)         AS episodes,
       COALESCE(st.env_steps, 0)        AS env_steps,
       COALESCE(st.invalid_steps, 0)    AS invalid_steps,
       COALESCE(st.prompt_tokens, 0)    AS prompt_tokens,
       COALESCE(st.generated_tokens, 0) AS generated_tokens,
       (SELECT json_group_object(b.key, b.value) FROM (
          SELECT m.key AS key, m.value AS value FROM metrics m
          WHERE m.run_id = ru.id AND m.key LIKE 'budget/%'
            AND m.rowid = (SELECT MAX(m2.rowid) FROM metrics m2
                           WHERE m2.run_id = m.run_id AND m2.key = m.key)
          ORDER BY m.key) b)            AS budget_metrics
FROM runs ru
LEFT JOIN (SELECT run_id, COUNT(*) AS episodes FROM episodes GROUP BY run_id) ep
  ON ep.run_id = ru.id
LEFT JOIN (SELECT e.run_id AS run_id, COUNT(*) AS env_steps, SUM(s.invalid) AS invalid_steps,
                  SUM(s.prompt_tokens) AS prompt_tokens, SUM(s.generated_tokens) AS generated_tokens
           FROM steps s JOIN episodes e ON e.id = s.episode_id GROUP BY e.run_id) st
  ON st.run_id = ru.id;
)sql";

// Columns are added with defaults or as NULL, so rows written by schema 2 stay
// valid: their items read as instance 0, pass 0, their steps' provenance NULL.
constexpr const char* kProvenanceSql = R"sql(
-- The env instance (seed / world id; INTEGER with the seed's 64 bits) and the
-- memory pass (0: training; one per evaluation call) of the item's episode.
ALTER TABLE memory_items ADD COLUMN instance INTEGER NOT NULL DEFAULT 0;
ALTER TABLE memory_items ADD COLUMN pass INTEGER NOT NULL DEFAULT 0;

-- Step provenance, NULL when not recorded: the realisation that produced the
-- action, the env state hash before acting and the chosen action's afterstate
-- hash (16 hex digits, like prompt_hash), and whether the oracle called the
-- action optimal (NULL: the env has no oracle).
ALTER TABLE steps ADD COLUMN realisation TEXT;
ALTER TABLE steps ADD COLUMN state_hash TEXT;
ALTER TABLE steps ADD COLUMN afterstate_hash TEXT;
ALTER TABLE steps ADD COLUMN optimal INTEGER CHECK (optimal IN (0, 1));

-- Per step: the realisation that produced the action, and on the decision plane
-- the probability the rollout recorded for that realisation of the chosen action
-- (menu_items.realisations; NULL when it is not there).
CREATE VIEW v_step_realisations AS
SELECT e.run_id          AS run_id,
       s.episode_id      AS episode_id,
       s.t               AS t,
       e.split           AS split,
       e.plane           AS plane,
       s.label           AS label,
       s.command         AS command,
       s.realisation     AS realisation,
       s.generated_text  AS generated_text,
       s.invalid         AS invalid,
       CASE WHEN e.plane = 'decision' THEN
         (SELECT json_extract(j.value, '$.probability')
          FROM menu_items mi, json_each(mi.realisations) j
          WHERE mi.episode_id = s.episode_id AND mi.t = s.t AND mi.action = s.action
            AND json_extract(j.value, '$.text') = s.realisation
          ORDER BY mi.position, j.key LIMIT 1)
       END               AS realisation_probability
FROM steps s JOIN episodes e ON e.id = s.episode_id;

-- Per step: state -> action -> afterstate, and the state the next step of the
-- episode started from. afterstate_matches_next = 0 marks a transition the
-- afterstate did not predict; NULL when either hash is missing (the last step).
CREATE VIEW v_transitions AS
SELECT e.run_id          AS run_id,
       s.episode_id      AS episode_id,
       s.t               AS t,
       s.state_hash      AS state_hash,
       s.action          AS action,
       s.afterstate_hash AS afterstate_hash,
       n.state_hash      AS next_state_hash,
       CASE WHEN s.afterstate_hash IS NULL OR n.state_hash IS NULL THEN NULL
            ELSE s.afterstate_hash = n.state_hash END AS afterstate_matches_next
FROM steps s
JOIN episodes e ON e.id = s.episode_id
LEFT JOIN steps n ON n.episode_id = s.episode_id AND n.t = s.t + 1;

-- Per run, split, plane and iteration: how often the chosen action was one of
-- the oracle's optimal actions. optimal_rate is over oracle_steps (the steps
-- of envs with an oracle; invalid steps count as not optimal); NULL without any.
CREATE VIEW v_step_optimality AS
SELECT e.run_id                  AS run_id,
       e.split                   AS split,
       e.plane                   AS plane,
       e.iteration               AS iteration,
       COUNT(*)                  AS steps,
       COUNT(s.optimal)          AS oracle_steps,
       COALESCE(SUM(s.optimal), 0) AS optimal_steps,
       AVG(s.optimal)            AS optimal_rate
FROM steps s JOIN episodes e ON e.id = s.episode_id
GROUP BY e.run_id, e.split, e.plane, e.iteration;
)sql";

// Episodes say how their actions were chosen, and v_run_budget splits what
// training spent from what evaluation played, with the budget's definitions.
constexpr const char* kEpisodeModeSql = R"sql(
-- How the episode's actions were chosen: 'rollout' (a training rollout,
-- sampled from the policy), 'greedy' or 'sampled' (an evaluation on test
-- seeds: argmax or sampled), 'scripted' (oracle demonstrations of a warm
-- start); NULL for episodes recorded before schema 5.
ALTER TABLE episodes ADD COLUMN mode TEXT
  CHECK (mode IN ('rollout', 'greedy', 'sampled', 'scripted'));

-- How many earlier steps of its episode the step's prompt showed
-- (prompt.history_steps: steps t - history_steps .. t - 1, oldest first);
-- NULL for steps recorded before schema 5.
ALTER TABLE steps ADD COLUMN history_steps INTEGER CHECK (history_steps >= 0);

-- Per run, what training spent and what evaluation played. episodes and
-- env_steps count the train split: env_steps is exactly budget/env_steps
-- (every decision attempt, invalid ones included), the quantity compare's
-- budget matches. eval_* count the test split (evaluations, both modes).
-- step_prompt_tokens sums the stored prompts' lengths (budget/prompt_tokens,
-- in budget_metrics, also counts the realisations the readout reads).
DROP VIEW v_run_budget;
CREATE VIEW v_run_budget AS
SELECT ru.id                              AS run_id,
       ru.name                            AS name,
       ru.arm                             AS arm,
       ru.kind                            AS kind,
       ru.status                          AS status,
       COALESCE(st.episodes, 0)           AS episodes,
       COALESCE(st.env_steps, 0)          AS env_steps,
       COALESCE(st.invalid_steps, 0)      AS invalid_steps,
       COALESCE(st.prompt_tokens, 0)      AS step_prompt_tokens,
       COALESCE(st.generated_tokens, 0)   AS generated_tokens,
       COALESCE(ev.episodes, 0)           AS eval_episodes,
       COALESCE(ev.env_steps, 0)          AS eval_env_steps,
       (SELECT json_group_object(b.key, b.value) FROM (
          SELECT m.key AS key, m.value AS value FROM metrics m
          WHERE m.run_id = ru.id AND m.key LIKE 'budget/%'
            AND m.rowid = (SELECT MAX(m2.rowid) FROM metrics m2
                           WHERE m2.run_id = m.run_id AND m2.key = m.key)
          ORDER BY m.key) b)              AS budget_metrics
FROM runs ru
LEFT JOIN (SELECT e.run_id AS run_id, COUNT(DISTINCT e.id) AS episodes, COUNT(s.episode_id) AS env_steps,
                  SUM(s.invalid) AS invalid_steps, SUM(s.prompt_tokens) AS prompt_tokens,
                  SUM(s.generated_tokens) AS generated_tokens
           FROM episodes e LEFT JOIN steps s ON s.episode_id = e.id
           WHERE e.split = 'train' GROUP BY e.run_id) st
  ON st.run_id = ru.id
LEFT JOIN (SELECT e.run_id AS run_id, COUNT(DISTINCT e.id) AS episodes, COUNT(s.episode_id) AS env_steps
           FROM episodes e LEFT JOIN steps s ON s.episode_id = e.id
           WHERE e.split = 'test' GROUP BY e.run_id) ev
  ON ev.run_id = ru.id;
)sql";

// Env failures and what the env said about itself: retried episodes say how
// many plays they took, runs keep the env's metadata message.
constexpr const char* kEnvRecordSql = R"sql(
-- Plays of the episode: 1, or 1 + the retries an env failure caused
-- ([env] retries; each retry replays it from reset, only the last, complete
-- play is stored); NULL for episodes recorded before schema 6.
ALTER TABLE episodes ADD COLUMN attempts INTEGER CHECK (attempts >= 1);

-- What the env said about itself (external envs' metadata message: name,
-- version, package versions) as a JSON object; NULL when it said nothing.
ALTER TABLE runs ADD COLUMN env_metadata TEXT CHECK (env_metadata IS NULL OR json_valid(env_metadata));
)sql";

// runs.status also admits 'crashed' (a run whose process died while it was
// 'running'). SQLite cannot alter a CHECK constraint; widening the allowed set
// by editing the stored CREATE TABLE text is the procedure SQLite documents
// for constraint changes that existing rows already satisfy ("Making Other
// Kinds Of Table Schema Changes"): writable_schema, then a schema_version bump
// so every connection re-reads the schema, then an integrity check.
void AllowCrashedStatus(Db& db) {
  const int64_t version = db.QueryInt("PRAGMA schema_version");
  db.Exec("PRAGMA writable_schema = ON");
  db.Exec(
      "UPDATE sqlite_master SET sql = replace(sql, "
      "'CHECK (status IN (''running'', ''completed'', ''failed'', ''interrupted''))', "
      "'CHECK (status IN (''running'', ''completed'', ''failed'', ''interrupted'', ''crashed''))') "
      "WHERE type = 'table' AND name = 'runs'");
  db.Exec("PRAGMA writable_schema = OFF");
  db.Exec(fmt::format("PRAGMA schema_version = {}", version + 1));
  if (db.QueryText("PRAGMA integrity_check") != "ok")
    throw IoError(fmt::format("'{}': the schema change of migration 4 failed its integrity check", db.path()),
                  "the file was not changed (the migration was rolled back)");
  if (db.QueryInt("SELECT COUNT(*) FROM sqlite_master WHERE name = 'runs' AND sql LIKE '%''crashed''%'") != 1)
    throw IoError(fmt::format("'{}': migration 4 found an unexpected runs table definition", db.path()));
}

}  // namespace

const std::vector<Migration>& Migrations() {
  static const std::vector<Migration> kMigrations = {
      {1, "tables: runs, episodes, prompts, steps, menu_items, memory, metrics, checkpoints",
       kTablesSql},
      {2,
       "views: v_step_provenance, v_memory_lineage, v_split_leaks, v_label_calibration, "
       "v_run_budget",
       kViewsSql},
      {3,
       "memory_items.instance and .pass; steps.realisation, .state_hash, .afterstate_hash, "
       ".optimal; views v_step_realisations, v_transitions, v_step_optimality",
       kProvenanceSql},
      {4, "runs.status 'crashed': a run left 'running' by a process that no longer exists", "",
       AllowCrashedStatus},
      {5,
       "episodes.mode (rollout | greedy | sampled | scripted); steps.history_steps; "
       "v_run_budget counts training (train split) and evaluation (eval_*) apart",
       kEpisodeModeSql},
      {6, "episodes.attempts (plays an env failure caused); runs.env_metadata (the env's metadata)",
       kEnvRecordSql},
  };
  return kMigrations;
}

int LatestSchemaVersion() { return Migrations().back().version; }

std::vector<std::string> ViewNames() {
  return {"v_step_provenance", "v_memory_lineage",    "v_split_leaks", "v_label_calibration",
          "v_run_budget",      "v_step_realisations", "v_transitions", "v_step_optimality"};
}

int SchemaVersionOf(const Db& db) {
  const int64_t has_schema = db.QueryInt(
      "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'rlid_schema'");
  if (has_schema == 0) {
    const int64_t objects = db.QueryInt("SELECT COUNT(*) FROM sqlite_master");
    return objects == 0 ? 0 : -1;
  }
  return static_cast<int>(db.QueryInt("SELECT COALESCE(MAX(version), 0) FROM rlid_schema"));
}

void Migrate(Db& db, int target) {
  if (target > LatestSchemaVersion())
    throw InternalError(
        fmt::format("migration target {} > latest {}", target, LatestSchemaVersion()));
  for (const Migration& m : Migrations()) {
    if (m.version > target) break;
    db.Exec("BEGIN IMMEDIATE", "starting a schema migration");
    try {
      // Re-read under the write lock: another process may have migrated meanwhile.
      const int current = SchemaVersionOf(db);
      if (current < 0)
        throw IoError(fmt::format("'{}' is an SQLite database but not an rlid database (it has "
                                  "tables but no rlid_schema table)",
                                  db.path()),
                      "rlid writes its own rlid.db; pick another file name");
      if (m.version <= current) {
        db.Exec("COMMIT");
        continue;
      }
      if (*m.sql) db.Exec(m.sql, fmt::format("applying schema migration {} ({})", m.version, m.description));
      if (m.after) m.after(db);
      Statement ins = db.Prepare(InsertSql("rlid_schema"));
      ins.Bind(":version", m.version)
          .Bind(":description", m.description)
          .Bind(":applied_at", NowIso8601())
          .Bind(":rlid_version", VersionString());
      ins.Run();
      if (m.version == 1) db.Exec(fmt::format("PRAGMA application_id = {}", kApplicationId));
      db.Exec("COMMIT", "committing a schema migration");
    } catch (...) {
      db.RollbackQuietly();
      throw;
    }
  }
}

const std::vector<TableWrite>& TableWrites() {
  static const std::vector<TableWrite> tables = {
      {"rlid_schema", {"version", "description", "applied_at", "rlid_version"}, {}},
      {"runs",
       {"id", "name", "arm", "kind", "config_toml", "seed", "code_version", "allow_cross_split",
        "started_at", "env_metadata", "status"},
       {"ended_at"}},
      {"episodes",
       {"id", "run_id", "env", "seed", "split", "plane", "policy_version", "iteration", "ret",
        "success", "length", "truncated", "committed_at", "mode", "attempts"},
       {}},
      {"prompts", {"hash", "text", "tokens"}, {}},
      {"steps",
       {"episode_id",     "t",           "observation", "prompt_hash",     "prompt_tokens",
        "action",         "label",       "command",     "generated_text",  "generated_tokens",
        "logp_rollout",   "logp_train",  "value",       "reward",          "invalid",
        "invalid_reason", "realisation", "state_hash",  "afterstate_hash", "optimal",
        "history_steps"},
       {}},
      {"menu_items",
       {"episode_id", "t", "position", "action", "label", "command", "afterstate", "probability",
        "realisations"},
       {}},
      {"memory_items",
       {"id", "run_id", "content", "kind", "source_episode_id", "source_t", "split",
        "policy_version", "created_at", "instance", "pass"},
       {}},
      {"memory_parents", {"item_id", "parent_id"}, {}},
      {"memory_reads", {"episode_id", "t", "rank", "item_id", "score"}, {}},
      {"metrics", {"run_id", "iteration", "key", "value", "wall_time"}, {}},
      {"checkpoints", {"run_id", "iteration", "path", "created_at"}, {"id"}},
  };
  return tables;
}

std::string InsertSql(const std::string& table, bool or_ignore) {
  for (const TableWrite& t : TableWrites()) {
    if (t.table != table) continue;
    std::vector<std::string> params;
    for (const auto& c : t.written) params.push_back(":" + c);
    return fmt::format("INSERT {}INTO {}({}) VALUES ({})", or_ignore ? "OR IGNORE " : "", table,
                       Join(t.written, ", "), Join(params, ", "));
  }
  throw InternalError(
      fmt::format("no column list for table '{}' (memory/schema.cc TableWrites)", table));
}

}  // namespace rlid::memory
