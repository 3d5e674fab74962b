// The field's benchmark environments: one registered env per adapter, built
// on the external-env client (envs/external.h). See field_envs.h.
#include "envs/field_envs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/registry.h"
#include "core/strings.h"
#include "envs/external.h"

#ifndef RLID_SOURCE_DIR
#define RLID_SOURCE_DIR "."
#endif

namespace rlid::envs {
namespace {

using Kind = AdapterKey::Kind;

std::vector<FieldAdapter> MakeAdapters() {
  return {
      {"openspiel",
       "openspiel_env.py",
       "any sequential OpenSpiel game by name: its legal moves, seeded opponents and chance",
       "open_spiel 2.0.2",
       {{"game", Kind::kString,
         "the pyspiel game (default tic_tac_toe) (pyspiel.registered_names(); at most 26 legal "
         "actions per turn)"},
        {"game_params", Kind::kTable, "parameters of pyspiel.load_game, e.g. {rows = 5}"},
        {"opponent", Kind::kString,
         "the other seats: random (default; seeded by the episode) or first (the first legal "
         "action)"},
        {"player", Kind::kInt, "the agent's seat (default 0), or -1: seat (seed / 2) mod players"},
        {"opening", Kind::kInt,
         "random plies before the agent's first turn (default -1: 0 if the game starts with a "
         "chance event, else 2)"},
        {"step_limit", Kind::kInt, "agent decisions per episode (0: the game's max length)"},
        {"success_return", Kind::kDouble,
         "success = the episode's return reaches this (default: max utility with one player, "
         "a win (> 0) otherwise)"}}},
      {"reasoning_gym",
       "reasoning_gym_env.py",
       "a reasoning-gym task: the verified answer among distractors its verifier rejects",
       "reasoning_gym 0.1.25",
       {{"task", Kind::kString, "the reasoning_gym dataset (default basic_arithmetic)"},
        {"options", Kind::kInt, "menu size: the answer and options - 1 distractors (default 4)"},
        {"task_params", Kind::kTable, "the dataset's config, e.g. {min_terms = 2}"}}},
      {"textarena",
       "textarena_env.py",
       "TextArena games (one player, or two against a seeded opponent): the game's valid moves "
       "as the menu",
       "textarena 0.7.4",
       {{"game", Kind::kString,
         "a TextArena env id of a supported game (default TowerOfHanoi-v0): TowerOfHanoi, "
         "FrozenLake, LightsOut, GuessTheNumber, 2048, TicTacToe, ConnectFour, Nim, KuhnPoker "
         "and their variants"},
        {"game_params", Kind::kTable,
         "overrides of the id's constructor arguments, e.g. {num_disks = 4}"},
        {"opponent", Kind::kString,
         "two-player games: random (default; seeded by the episode) or first (the first valid "
         "move)"},
        {"player", Kind::kInt,
         "two-player games: the agent's seat (default 0), or -1: drawn per episode from the seed"},
        {"opening", Kind::kInt,
         "at most this many seeded random valid moves before the agent's first decision "
         "(default -1: the game's own; 0 where reset varies with the seed)"},
        {"view", Kind::kString,
         "observation: turn (the last turn's messages and the board) or log (all messages and "
         "the board); default: log for GuessTheNumber and KuhnPoker, else turn"},
        {"step_limit", Kind::kInt,
         "agent decisions per episode (0: the game's own bound; 1000 for 2048)"}}},
      {"openenv",
       "openenv_env.py",
       "any OpenEnv server (url, or an app served here) with a discrete action space: enum "
       "field, legal-actions list or MCP tools",
       "openenv-core 0.2.1",
       {{"url", Kind::kString,
         "the running server, http(s)://host:port (required unless server is set)"},
        {"server", Kind::kString,
         "module:app or path/file.py:app: an OpenEnv app the adapter serves on 127.0.0.1 while it "
         "runs"},
        {"action_field", Kind::kString,
         "the action field that carries the choice (default: the one required field)"},
        {"legal_field", Kind::kString,
         "the observation's legal-actions list (default: legal_actions, legal_moves, ... if "
         "present)"},
        {"action_params", Kind::kTable, "fixed values of the action's other fields"},
        {"tools", Kind::kString, "MCP servers: comma-separated tools to offer (default all)"},
        {"reset_params", Kind::kTable, "more reset() arguments besides the seed"},
        {"split_param", Kind::kString,
         "a reset() argument that gets train/test by seed parity (default none)"},
        {"observation_fields", Kind::kString,
         "comma-separated observation fields to show (default all)"},
        {"truncated_field", Kind::kString,
         "a bool observation field marking a time limit (default truncated/is_truncated; none: "
         "never)"},
        {"seeded", Kind::kInt,
         "1: reset honours the seed, 0: it does not, -1 (default): probe at start"},
        {"sessions", Kind::kInt, "WebSocket sessions per adapter process (default 8)"},
        {"step_limit", Kind::kInt, "agent decisions before truncation (default 100)"},
        {"success_return", Kind::kDouble,
         "success = a real end with a return >= this (default 1e-9)"},
        {"server_timeout_s", Kind::kDouble, "seconds one server reply may take (default 25)"},
        {"server_start_timeout_s", Kind::kDouble,
         "seconds the server app may take to start (default 30)"}},
       {"url", "server"}},
      {"babyai_text",
       "babyai_text_env.py",
       "BabyAI levels (minigrid) told in GLAM's BabyAI-Text sentences: the six actions, the "
       "BabyAI bot as oracle",
       "minigrid 3.2.0",
       {{"level", Kind::kString,
         "a BabyAI level (default GoToLocal): any BabyAI-* id minigrid registers, with or without "
         "the BabyAI- prefix and -vN suffix (PickupLoc, PutNextLocal, OpenDoor, ...), or GLAM's "
         "PickupLocal"},
        {"level_params", Kind::kTable,
         "the level's constructor arguments, e.g. {room_size = 6, num_dists = 4}"}}},
      {"textworld",
       "textworld_env.py",
       "TextWorld games generated offline at fixed seeds: the admissible commands as the menu, "
       "exact afterstates",
       "textworld 1.7.0",
       {{"family", Kind::kString,
         "simple (default), cooking, custom, treasure_hunter or coin_collector"},
        {"step_limit", Kind::kInt, "agent decisions before truncation (default 50, 1..1000)"},
        {"games", Kind::kInt,
         "0 (default): every seed its own game; N: each split's seeds cycle through N games"},
        {"cache_dir", Kind::kString,
         "where generated games are kept (default $RLID_TEXTWORLD_CACHE, else "
         "~/.cache/rlid/textworld)"},
        {"rewards", Kind::kString, "simple: dense (default), balanced or sparse"},
        {"goal", Kind::kString, "simple: the objective's text: detailed (default), brief or none"},
        {"recipe", Kind::kInt, "cooking: ingredients in the recipe (default 1, 1..5)"},
        {"take", Kind::kInt, "cooking: ingredients to find first (default 1, 0..recipe)"},
        {"go", Kind::kInt, "cooking: rooms, 1 (default), 6, 9 or 12"},
        {"open", Kind::kInt, "cooking: 1: containers and doors must be opened (default 0)"},
        {"cook", Kind::kInt, "cooking: 1: ingredients must be cooked (default 0)"},
        {"cut", Kind::kInt, "cooking: 1: ingredients must be cut (default 0)"},
        {"drop", Kind::kInt, "cooking: 1: the inventory has limited capacity (default 0)"},
        {"world_size", Kind::kInt, "custom: rooms (default 3, 1..20)"},
        {"nb_objects", Kind::kInt, "custom: minimum objects in the world (default 5, 0..50)"},
        {"quest_length", Kind::kInt, "custom: actions the quest requires (default 3, 1..10)"},
        {"quest_breadth", Kind::kInt, "custom: sub-quests (default 1, 1..5)"},
        {"level", Kind::kInt,
         "treasure_hunter (1..30) / coin_collector (1..300): the difficulty level (default 1)"}}},
      {"scienceworld",
       "scienceworld_env.py",
       "a ScienceWorld task (Java simulator): a capped, documented menu of its valid actions, "
       "train/dev/test variations",
       "scienceworld 1.2.3",
       {{"task", Kind::kString,
         "a ScienceWorld task name or id (default lifespan-longest-lived; \"7-1\", \"boil\", ...)"},
        {"simplification", Kind::kString,
         "ScienceWorld's simplifications, comma-separated (default auto: openDoors, "
         "openContainers, selfWateringFlowerPots, noElectricalAction unless electrical; \"\": "
         "none)"},
        {"step_limit", Kind::kInt, "agent decisions before truncation (default 50)"},
        {"test_split", Kind::kString,
         "the variations of rlid's test seeds: test (default), dev or dev+test"},
        {"menu_size", Kind::kInt, "the menu's cap (default 26, 2..26)"},
        {"engines", Kind::kInt,
         "JVMs in each adapter process's pool (default 4, 1..64; ~0.2-0.5 GB each): episodes in "
         "flight beyond it share one by reloading and replaying"}}},
      {"gymnasium",
       "gymnasium_env.py",
       "any Gymnasium env with text observations and a Discrete action space (its legal "
       "actions by info[\"action_mask\"] when it reports one)",
       "gymnasium 1.4.0",
       {{"id", Kind::kString,
         "a registered Gymnasium id, or \"package.module:Class\" (imported from the adapter's "
         "Python path)"},
        {"env_params", Kind::kTable, "keyword arguments of gymnasium.make (or the class)"},
        {"actions", Kind::kTable,
         "the command of each action, {\"0\" = \"go left\", ...} (default: the env's "
         "action_names or get_action_meanings(), else \"action 0\", ...)"},
        {"step_limit", Kind::kInt,
         "decisions before truncation (default: the id's max_episode_steps, else 100)"},
        {"copy", Kind::kString,
         "deepcopy (default: copies step to show afterstates) or replay (rlid replays the "
         "episode's actions; no afterstates)"},
        {"success_return", Kind::kDouble,
         "success = terminated with a return above this (default 0), unless info says "
         "success or is_success"}}},
  };
}

// The adapter's own keys -> hello params (a key left out keeps the adapter's default).
nlohmann::json ReadAdapterKeys(ConfigNode c, const FieldAdapter& a) {
  nlohmann::json params = nlohmann::json::object();
  if (!a.one_of_required.empty() && std::none_of(a.one_of_required.begin(), a.one_of_required.end(),
                                                 [&](const std::string& k) { return c.Has(k); }))
    throw ConfigError(
        fmt::format("{}: [env] name = \"{}\" needs {}", c.Where(a.one_of_required[0]), a.name,
                    a.one_of_required.size() == 1
                        ? "'" + a.one_of_required[0] + "'"
                        : "one of '" + Join(a.one_of_required, "', '") + "'"),
        fmt::format("e.g. --set env.{}=... (docs/field_envs.md, {})", a.one_of_required[0],
                    a.name));
  for (const AdapterKey& k : a.keys) {
    if (!c.Has(k.name)) {
      c.Declare(k.name);  // listed among the valid keys of an unknown-key error
      continue;
    }
    switch (k.kind) {
      case Kind::kString: {
        std::string v;
        c.Get(k.name, v, k.doc);
        params[k.name] = v;
        break;
      }
      case Kind::kInt: {
        int64_t v = 0;
        c.Get(k.name, v, k.doc);
        params[k.name] = v;
        break;
      }
      case Kind::kDouble: {
        double v = 0;
        c.Get(k.name, v, k.doc);
        params[k.name] = v;
        break;
      }
      case Kind::kTable: {
        nlohmann::json v;
        c.GetTable(k.name, v, k.doc);
        params[k.name] = v;
        break;
      }
    }
  }
  return params;
}

std::unique_ptr<Env> MakeAdapterEnv(ConfigNode c, const FieldAdapter& a) {
  ExternalParams p;
  const std::filesystem::path script = std::filesystem::path(AdapterDir()) / a.script;
  if (!std::filesystem::exists(script))
    throw ConfigError(
        fmt::format("env '{}': its adapter {} does not exist", a.name, script.string()),
        "set RLID_ADAPTERS_DIR to the rlid checkout's envs/external/python/adapters");
  p.command = {AdapterPython(), script.string()};
  // The adapter's own afterstates only: rlid's clone+step would show the outcome of the
  // other seats' and chance's next draws (an adapter sends none where it cannot know them).
  p.afterstates = "env";
  ReadProcessKeys(c, p);
  p.params = ReadAdapterKeys(c, a);
  return MakeExternalEnv(std::move(p));
}

// Registers every adapter at start-up (the registry is how `[env] name` finds envs).
const bool kRegistered = [] {
  for (const FieldAdapter& a : FieldAdapters())
    EnvRegistry::Global().Add(a.name, fmt::format("{} (Python: {})", a.summary, a.packages),
                              [a](ConfigNode c) { return MakeAdapterEnv(c, a); });
  return true;
}();

}  // namespace

const std::vector<FieldAdapter>& FieldAdapters() {
  static const std::vector<FieldAdapter> adapters = MakeAdapters();
  return adapters;
}

bool IsFieldAdapter(const std::string& name) {
  for (const auto& a : FieldAdapters())
    if (a.name == name) return true;
  return false;
}

std::string AdapterPython() {
  if (const char* p = std::getenv("RLID_ADAPTER_PYTHON"); p && *p) return p;
  const std::filesystem::path venv = std::filesystem::path(RLID_SOURCE_DIR) / ".venv/bin/python";
  if (std::filesystem::exists(venv)) return venv.string();
  return "python3";
}

std::string AdapterDir() {
  if (const char* d = std::getenv("RLID_ADAPTERS_DIR"); d && *d) return d;
  return (std::filesystem::path(RLID_SOURCE_DIR) / "envs/external/python/adapters").string();
}

}  // namespace rlid::envs
