// The `external` environment: a child process per worker speaks rlid's env
// protocol (docs/external_env.md) and rlid sees an ordinary Env. Each State is
// a handle inside one worker process; NewState puts it on the least-loaded
// worker, so many episodes' steps run at once across workers (AsyncState).
// Every call has a timeout; a crashed, silent or confused worker is an
// EnvError naming the env, the message and its last output, never a hang.
// The processes and their messages are worker.h's (Worker, Pool); this file
// is the env and its states over them.
#include "envs/external/external.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "core/check.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/interrupt.h"
#include "core/log.h"
#include "core/strings.h"
#include "core/subprocess.h"
#include "core/utf8.h"
#include "envs/api/conformance.h"
#include "envs/api/reasoning_oracle.h"
#include "envs/api/simple_env.h"
#include "envs/external/worker.h"

namespace rlid::envs {
namespace {

using namespace protocol;  // Worker, Pool, Hello (worker.h)
using json = nlohmann::json;

enum class Afterstates { kEnv, kClone, kNone };

struct Shared {
  std::shared_ptr<Pool> pool;
  Hello hello;
  AfterstateSource afterstates = AfterstateSource::kAuto;  // the [env] setting
  bool can_clone = false;   // through the env's clone, or by replay
};

// The parts of a state reply (reset and step).
struct Snapshot {
  std::string task, observation;
  Menu menu;
  std::vector<std::string> facts;
  uint64_t hash = 0;
  bool env_afterstates = false;  // every item came with an afterstate
};

class ExternalState : public State, public CutState, public AsyncState, public FactSource {
 public:
  ExternalState(std::shared_ptr<const Shared> env, uint64_t seed)
      : env_(std::move(env)), seed_(seed) {
    worker_ = env_->pool->Pick();
    const std::string what = fmt::format("reset (seed {})", seed);
    const json r = worker_->Call(
        {{"op", "reset"}, {"seed", seed}, {"split", SplitName(SplitOf(seed))}}, what);
    Adopt(r, what);
    if (worker_->Terminated(r, what))
      worker_->Fail(what, "the reset state is terminal (an episode needs at least one decision)",
                    false);
  }
  ~ExternalState() override {
    if (handle_ < 0 || !worker_->healthy()) return;
    try {
      if (pending_ >= 0) {
        // A rollout unwinding (an error, Ctrl-C) with this step in flight: its
        // reply is read and dropped, or the worker is given up when stopping.
        if (PendingSignal() != 0) {
          worker_->Abandon("rlid was stopped with a step in flight");
          return;
        }
        worker_->Receive(pending_, "step (discarded)", std::min(2.0, env_->pool->params().timeout_s));
      }
      if (env_->hello.Has("close"))
        worker_->Call({{"op", "close"}, {"handle", handle_}}, fmt::format("close (handle {})", handle_));
    } catch (const Error& e) {
      spdlog::debug("closing an external state: {}", e.what());
    }
    --worker_->live;
  }
  ExternalState(const ExternalState&) = delete;
  ExternalState& operator=(const ExternalState&) = delete;

  std::string Observation() const override {
    return snap_.task.empty() ? snap_.observation : snap_.task + "\n" + snap_.observation;
  }
  std::vector<ActionId> LegalActions() const override {
    std::vector<ActionId> out;
    if (done_) return out;
    for (const auto& it : snap_.menu.items) out.push_back(it.action);
    return out;
  }
  Menu CompileMenu() const override {
    if (done_) return Menu{};
    return MenuWithAfterstates();
  }
  bool WasCut() const override { return cut_; }
  Menu MenuAtCut() const override {
    RLID_CHECK(cut_, "MenuAtCut() on a state the step limit did not cut");
    return MenuWithAfterstates();
  }
  StepOutcome Apply(ActionId action) override {
    StartApply(action);
    return FinishApply();
  }
  void StartApply(ActionId action) override {
    RLID_CHECK(!done_, "Apply({}) on a terminal state", action);
    RLID_CHECK(pending_ < 0, "Apply({}) while a step is pending", action);
    RLID_CHECK(snap_.menu.IndexOfAction(action) >= 0, "action {} is not legal here", action);
    pending_what_ = fmt::format("step (handle {}, action {})", handle_, action);
    pending_ = worker_->Send({{"op", "step"}, {"handle", handle_}, {"action", action}},
                             pending_what_);
    pending_action_ = action;
  }
  StepOutcome FinishApply() override {
    RLID_CHECK(pending_ >= 0, "FinishApply() without StartApply()");
    const int64_t id = std::exchange(pending_, -1);
    const json r = worker_->Receive(id, pending_what_);
    StepOutcome out;
    out.reward = worker_->Number(r, "reward", pending_what_, true);
    if (!std::isfinite(out.reward))
      worker_->Fail(pending_what_, fmt::format("a non-finite reward {}", out.reward), false);
    out.terminal = worker_->Terminated(r, pending_what_);
    out.success = Bool(r, "success", pending_what_);
    out.truncated = Bool(r, "truncated", pending_what_);
    if (out.truncated) out.terminal = true;
    history_.push_back(pending_action_);
    ++steps_;
    invalidate_oracle();
    if (out.terminal) {
      // A terminal state offers nothing; whatever menu came along is ignored,
      // except after a truncation, where it is the menu at the cut.
      Adopt(r, pending_what_, /*menu=*/out.truncated && r.contains("menu") &&
                                  r["menu"].is_array() && !r["menu"].empty());
      cut_ = out.truncated && !snap_.menu.items.empty();
    } else {
      Adopt(r, pending_what_);
      if (steps_ >= env_->hello.step_limit) {
        out.terminal = out.truncated = true;
        cut_ = true;
      }
    }
    done_ = out.terminal;
    return out;
  }
  bool IsTerminal() const override { return done_; }
  CompileResult Compile(std::string_view text) const override {
    CompileResult r = snap_.menu.Compile(text);
    if (!r.valid() && !done_ && env_->hello.Has("compile")) return EnvCompile(text);
    return r;
  }
  uint64_t Hash() const override { return snap_.hash; }
  int StepCount() const override { return steps_; }
  std::vector<std::string> Facts() const override { return snap_.facts; }

  // ---- what the capability mixins call -----------------------------------------
  CompileResult EnvCompile(std::string_view text) const {
    CompileResult res;
    if (done_) {
      res.reason = "the episode is over";
      return res;
    }
    const std::string what = fmt::format("compile (handle {})", handle_);
    const json r = worker_->Call(
        {{"op", "compile"}, {"handle", handle_}, {"text", std::string(text)}}, what);
    if (r.contains("invalid") && !r["invalid"].is_null()) {
      res.reason = r["invalid"].is_string() ? r["invalid"].get<std::string>() : r["invalid"].dump();
      if (Trim(res.reason).empty()) res.reason = "the env's compiler rejected the text";
      return res;
    }
    const auto action = static_cast<ActionId>(worker_->Int(r, "action", what, true, 0, INT32_MAX));
    const int item = snap_.menu.IndexOfAction(action);
    if (item < 0)
      worker_->Fail(what, fmt::format("compiled the text to action {}, which is not on the menu "
                                      "(actions: {})",
                                      action, fmt::join(LegalActions(), ", ")),
                    false);
    res.action = action;
    res.item = item;
    res.matched = Shorten(Trim(text), kMaxRealisationBytes);
    return res;
  }
  // The env's worked reasoning for its optimal action: one line, at most 4000 bytes.
  std::string EnvReasoning() const {
    RLID_CHECK(!done_, "OracleReasoning() on a terminal state");
    const std::string what = fmt::format("reasoning (handle {})", handle_);
    const json r = worker_->Call({{"op", "reasoning"}, {"handle", handle_}}, what);
    std::string text = worker_->String(r, "reasoning", what, true, 4000);
    if (!IsValidUtf8(text) || text.find('\n') != std::string::npos || Trim(text).empty())
      worker_->Fail(what,
                    "'reasoning' must be one non-empty line of UTF-8 (it is the scratchpad "
                    "line a policy writes before it decides)",
                    false);
    return text;
  }
  std::vector<ActionId> EnvOptimalActions() const {
    if (done_) return {};
    LoadOracle();
    return oracle_actions_;
  }
  double EnvOptimalReturn() const {
    if (done_) return 0.0;
    LoadOracle();
    if (oracle_return_) return *oracle_return_;
    // No "return" in the reply: play the oracle's first choice out on a copy.
    auto copy = Clone();
    auto* s = static_cast<ExternalState*>(copy.get());
    double ret = 0;
    while (!s->IsTerminal()) {
      const auto best = s->EnvOptimalActions();
      if (best.empty()) break;
      ret += s->Apply(best[0]).reward;
    }
    oracle_return_ = ret;
    return ret;
  }

 protected:
  // A copy of `from` in a new handle (the env's clone, or a replay of the
  // actions from reset when the env is deterministic).
  explicit ExternalState(const ExternalState& from, int)
      : env_(from.env_), seed_(from.seed_), worker_(from.worker_) {
    RLID_CHECK(from.pending_ < 0, "Clone() while a step is pending");
    if (env_->hello.Has("clone")) {
      const std::string what = fmt::format("clone (handle {})", from.handle_);
      const json r = worker_->Call({{"op", "clone"}, {"handle", from.handle_}}, what);
      handle_ = worker_->Int(r, "handle", what, true, INT64_MIN, INT64_MAX);
      ++worker_->live;
    } else {
      Replay(from);
    }
    CopyEpisodeFrom(from);
  }

 private:
  bool Bool(const json& r, const char* key, const std::string& what) const {
    return worker_->Bool(r, key, what, false);
  }

  void Replay(const ExternalState& from) {
    if (!env_->hello.deterministic)
      throw EnvError(
          fmt::format("env '{}' cannot copy a state: it has no 'clone' capability and is not "
                      "deterministic, so rlid cannot replay its actions",
                      env_->hello.name),
          "offer 'clone' (the Python helper clones by deepcopy), or set [env] afterstates = "
          "\"env\" or \"none\" so no copies are needed");
    const std::string what = fmt::format("reset (seed {}, replaying {} actions)", seed_,
                                         from.history_.size());
    json r = worker_->Call({{"op", "reset"}, {"seed", seed_}, {"split", SplitName(SplitOf(seed_))}},
                           what);
    handle_ = worker_->Int(r, "handle", what, true, INT64_MIN, INT64_MAX);
    ++worker_->live;
    for (ActionId a : from.history_)
      r = worker_->Call({{"op", "step"}, {"handle", handle_}, {"action", a}},
                        fmt::format("step (handle {}, action {}, replaying)", handle_, a));
    Snapshot again = Parse(r, what, !from.done_);
    if (again.observation != from.snap_.observation || again.hash != from.snap_.hash)
      worker_->Fail(what, "replaying the episode's actions from reset gave a different state; "
                          "the env is not deterministic (say \"deterministic\": false in hello, "
                          "or offer 'clone')",
                    false);
  }

  // Takes a state reply (reset, or a step's new state) as this state's own.
  void Adopt(const json& r, const std::string& what, bool with_menu = true) {
    if (handle_ < 0) {
      handle_ = worker_->Int(r, "handle", what, true, INT64_MIN, INT64_MAX);
      ++worker_->live;
    }
    snap_ = Parse(r, what, with_menu);
    afterstates_.reset();
  }

  // Observation, task, facts, hash and menu (labels A, B, ... by position).
  Snapshot Parse(const json& r, const std::string& what, bool with_menu) const {
    Snapshot s;
    s.task = worker_->String(r, "task", what, false);
    s.observation = worker_->String(r, "observation", what, true);
    if (!IsValidUtf8(s.observation) || !IsValidUtf8(s.task))
      worker_->Fail(what, "'observation' and 'task' must be valid UTF-8", false);
    if (r.contains("facts") && !r["facts"].is_null()) {
      if (!r["facts"].is_array())
        worker_->Fail(what, fmt::format("'facts' must be an array of strings, found {}",
                                        JsonTypeName(r["facts"])), false);
      for (const auto& f : r["facts"]) {
        if (!f.is_string() || !IsValidUtf8(f.get<std::string>()))
          worker_->Fail(what, "'facts' must be an array of UTF-8 strings", false);
        s.facts.push_back(f.get<std::string>());
      }
    }
    s.hash = r.contains("state_hash") && !r["state_hash"].is_null()
                 ? HashId(r["state_hash"])
                 : HashBytes(s.task + "\x1f" + s.observation, kHashSeed);
    if (!with_menu) return s;
    if (!r.contains("menu") || !r["menu"].is_array())
      worker_->Fail(what, r.contains("menu") ? fmt::format("'menu' must be an array, found {}",
                                                           JsonTypeName(r["menu"]))
                                             : "a non-terminal state's reply has no 'menu'",
                    false);
    const json& items = r["menu"];
    if (items.empty()) worker_->Fail(what, "a non-terminal state has an empty 'menu'", false);
    if (items.size() > static_cast<size_t>(kMaxMenuSize))
      worker_->Fail(what, fmt::format("the menu has {} items, more than the {} labels A-Z",
                                      items.size(), kMaxMenuSize), false);
    s.env_afterstates = true;
    for (size_t k = 0; k < items.size(); ++k) {
      const json& it = items[k];
      const std::string at = fmt::format("{}: menu item {}", what, k);
      if (!it.is_object()) worker_->Fail(at, "must be an object", false);
      MenuItem item;
      item.action = static_cast<ActionId>(worker_->Int(it, "action", at, true, 0, INT32_MAX));
      item.command = CheckedRealisation(worker_->String(it, "command", at, true), at, "command");
      item.realisations.push_back(item.command);
      if (it.contains("realisations") && !it["realisations"].is_null()) {
        if (!it["realisations"].is_array())
          worker_->Fail(at, "'realisations' must be an array of strings", false);
        for (const auto& w : it["realisations"]) {
          if (!w.is_string()) worker_->Fail(at, "'realisations' must be an array of strings", false);
          std::string word = CheckedRealisation(w.get<std::string>(), at, "realisation");
          if (std::find(item.realisations.begin(), item.realisations.end(), word) ==
              item.realisations.end())
            item.realisations.push_back(std::move(word));
        }
      }
      if (it.contains("afterstate") && !it["afterstate"].is_null()) {
        const std::string text = worker_->String(it, "afterstate", at, false);
        // Without an afterstate_hash, the id a state with this observation would have.
        item.afterstate_hash = it.contains("afterstate_hash") && !it["afterstate_hash"].is_null()
                                   ? HashId(it["afterstate_hash"])
                                   : HashBytes(s.task + "\x1f" + text, kHashSeed);
        item.afterstate = OneLine(text);
      }
      if (item.afterstate.empty()) s.env_afterstates = false;
      s.menu.items.push_back(std::move(item));
    }
    // The menu rules, in the author's terms (ValidateMenu's are rlid's own).
    std::map<ActionId, size_t> item_of_action;
    std::map<std::string, size_t> item_of_realisation;  // lower-cased, as the compiler matches
    for (size_t k = 0; k < s.menu.items.size(); ++k) {
      const MenuItem& item = s.menu.items[k];
      if (auto [at, fresh] = item_of_action.emplace(item.action, k); !fresh)
        worker_->Fail(what,
                      fmt::format("duplicate action {}: menu items {} and {} both have it; "
                                  "give each item its own action id",
                                  item.action, at->second, k),
                      false);
      for (const auto& w : item.realisations)
        if (auto [at, fresh] = item_of_realisation.emplace(ToLower(w), k);
            !fresh && at->second != k)
          worker_->Fail(what,
                        fmt::format("the realisation '{}' names two actions ({} in menu item {}, "
                                    "{} in item {}): a command or realisation must name one "
                                    "action; drop it from one of the items",
                                    w, s.menu.items[at->second].action, at->second, item.action, k),
                        false);
    }
    AssignDefaultLabels(s.menu);
    try {
      ValidateMenu(s.menu);
    } catch (const InternalError& e) {
      worker_->Fail(what, fmt::format("an invalid menu: {}", AuthorMessage(e.what())), false);
    }
    return s;
  }

  std::string CheckedRealisation(std::string w, const std::string& at, const char* field) const {
    const std::string_view t = Trim(w);
    if (t.empty() || t.size() > kMaxRealisationBytes || !IsValidUtf8(t) ||
        std::any_of(t.begin(), t.end(),
                    [](char c) { return static_cast<unsigned char>(c) < 0x20; }))
      worker_->Fail(at,
                    fmt::format("a {} must be one line of 1-{} bytes of UTF-8 text, found '{}'",
                                field, kMaxRealisationBytes, Shorten(w, 80)),
                    false);
    return std::string(t);
  }

  // The menu with afterstates per [env] afterstates (computed once per state).
  Menu MenuWithAfterstates() const {
    if (afterstates_) return *afterstates_;
    Menu m = snap_.menu;
    const AfterstateSource mode = env_->afterstates;
    const bool compute = mode == AfterstateSource::kClone || (mode == AfterstateSource::kAuto && !snap_.env_afterstates &&
                                             env_->hello.Has("clone"));
    if (mode == AfterstateSource::kNone) {
      for (auto& it : m.items) it.afterstate.clear(), it.afterstate_hash = 0;
    } else if (compute) {
      // One copy per item, or with 'restore' one scratch copy reset to this
      // state before each item (2K+1 calls instead of 3K).
      const bool restore = env_->hello.Has("restore");
      std::unique_ptr<State> scratch;
      for (size_t k = 0; k < m.items.size(); ++k) {
        if (!scratch || !restore)
          scratch = Clone();
        else
          static_cast<ExternalState*>(scratch.get())->RestoreFrom(*this);
        scratch->Apply(m.items[k].action);
        auto* c = static_cast<const ExternalState*>(scratch.get());
        m.items[k].afterstate = OneLine(c->snap_.observation);
        m.items[k].afterstate_hash = c->Hash();
      }
    }
    MarkSameAfterstates(m);
    afterstates_ = m;
    return m;
  }

  // rlid's side of the episode (the env's side is the worker's handle).
  void CopyEpisodeFrom(const ExternalState& from) {
    snap_ = from.snap_;
    afterstates_ = from.afterstates_;
    history_ = from.history_;
    steps_ = from.steps_;
    done_ = from.done_;
    cut_ = from.cut_;
  }

  // Makes this state (a copy on the same worker) equal to `from` again.
  void RestoreFrom(const ExternalState& from) {
    RLID_CHECK(worker_ == from.worker_ && pending_ < 0 && from.pending_ < 0,
               "restore needs two idle states of one worker");
    worker_->Call({{"op", "restore"}, {"handle", handle_}, {"from", from.handle_}},
                  fmt::format("restore (handle {} from {})", handle_, from.handle_));
    CopyEpisodeFrom(from);
    invalidate_oracle();
  }

  void LoadOracle() const {
    if (oracle_loaded_) return;
    const std::string what = fmt::format("oracle (handle {})", handle_);
    const json r = worker_->Call({{"op", "oracle"}, {"handle", handle_}}, what);
    if (!r.contains("actions") || !r["actions"].is_array())
      worker_->Fail(what, "the reply needs 'actions', an array of action ids", false);
    oracle_actions_.clear();
    for (const auto& a : r["actions"]) {
      if (!a.is_number_integer() || snap_.menu.IndexOfAction(a.get<ActionId>()) < 0)
        worker_->Fail(what, fmt::format("'actions' holds {}, which is not an action on the menu",
                                        Shorten(a.dump())), false);
      oracle_actions_.push_back(a.get<ActionId>());
    }
    oracle_return_.reset();
    if (r.contains("return") && !r["return"].is_null()) {
      const double v = worker_->Number(r, "return", what, true);
      if (!std::isfinite(v)) worker_->Fail(what, "'return' must be finite", false);
      oracle_return_ = v;
    }
    oracle_loaded_ = true;
  }
  void invalidate_oracle() {
    oracle_loaded_ = false;
    oracle_actions_.clear();
    oracle_return_.reset();
  }

  std::shared_ptr<const Shared> env_;
  uint64_t seed_;
  std::shared_ptr<Worker> worker_;
  int64_t handle_ = -1;
  Snapshot snap_;
  mutable std::optional<Menu> afterstates_;
  std::vector<ActionId> history_;
  int steps_ = 0;
  bool done_ = false, cut_ = false;
  int64_t pending_ = -1;  // id of the step request in flight
  ActionId pending_action_ = kNoAction;
  std::string pending_what_;
  mutable bool oracle_loaded_ = false;
  mutable std::vector<ActionId> oracle_actions_;
  mutable std::optional<double> oracle_return_;
};

// Optional capabilities, present on a state's type only when the env offers them.
class WithOracle : public OracleState {
 public:
  std::vector<ActionId> OptimalActions() const override { return Self().EnvOptimalActions(); }
  double OptimalReturn() const override { return Self().EnvOptimalReturn(); }

 private:
  const ExternalState& Self() const { return dynamic_cast<const ExternalState&>(*this); }
};
class WithCompiler : public TextCompiler {
 public:
  CompileResult CompileText(std::string_view text) const override { return Self().EnvCompile(text); }

 private:
  const ExternalState& Self() const { return dynamic_cast<const ExternalState&>(*this); }
};
class WithReasoning : public ReasoningOracle {
 public:
  std::string OracleReasoning() const override { return Self().EnvReasoning(); }

 private:
  const ExternalState& Self() const { return dynamic_cast<const ExternalState&>(*this); }
};

template <class... Caps>
class ExternalStateOf final : public ExternalState, public Caps... {
 public:
  ExternalStateOf(std::shared_ptr<const Shared> env, uint64_t seed)
      : ExternalState(std::move(env), seed) {}
  ExternalStateOf(const ExternalStateOf& from, int tag) : ExternalState(from, tag) {}
  std::unique_ptr<State> Clone() const override {
    return std::unique_ptr<State>(new ExternalStateOf(*this, 0));
  }
};

class ExternalEnv final : public Env {
 public:
  explicit ExternalEnv(ExternalParams p) {
    auto shared = std::make_shared<Shared>();
    shared->afterstates = p.afterstates;
    shared->pool = std::make_shared<Pool>(std::move(p));
    shared->hello = shared->pool->hello();
    shared->can_clone = shared->hello.Has("clone") || shared->hello.deterministic;
    if (shared->afterstates == AfterstateSource::kClone && !shared->can_clone)
      throw ConfigError(
          fmt::format("[env] afterstates = \"clone\", but env '{}' has no 'clone' capability and is "
                      "not deterministic, so rlid cannot compute afterstates",
                      shared->hello.name),
          "use afterstates = \"env\" (the env's own) or \"none\"");
    shared_ = std::move(shared);
    const Hello& h = shared_->hello;
    const bool oracle = h.Has("oracle"), compiler = h.Has("compile");
    const bool reasoning = oracle && h.Has("reasoning");  // worked reasoning of the oracle's action
    make_ = reasoning && compiler ? &Make<WithOracle, WithReasoning, WithCompiler>
            : reasoning           ? &Make<WithOracle, WithReasoning>
            : oracle && compiler  ? &Make<WithOracle, WithCompiler>
            : oracle              ? &Make<WithOracle>
            : compiler            ? &Make<WithCompiler>
                                  : &Make<>;
  }
  EnvInfo Info() const override {
    const Hello& h = shared_->hello;
    EnvInfo info{h.name, h.summary.empty() ? "external environment" : h.summary, h.step_limit,
                 h.deterministic};
    const ExternalParams& p = shared_->pool->params();
    info.drop_failed_episodes = p.on_error == OnEnvError::kDropEpisode;
    info.episode_retries = p.retries;
    info.retry_backoff_s = p.retry_backoff_s;
    info.metadata = h.metadata;
    info.concurrency = p.workers;
    return info;
  }
  std::string Instructions() const override { return shared_->hello.instructions; }
  std::unique_ptr<State> NewState(uint64_t seed) const override { return make_(shared_, seed); }

 private:
  template <class... Caps>
  static std::unique_ptr<State> Make(const std::shared_ptr<const Shared>& s, uint64_t seed) {
    return std::make_unique<ExternalStateOf<Caps...>>(s, seed);
  }
  std::shared_ptr<const Shared> shared_;
  std::unique_ptr<State> (*make_)(const std::shared_ptr<const Shared>&, uint64_t) = nullptr;
};

const Registrar<EnvRegistry> kRegister(
    "external", "any program speaking rlid's env protocol over stdin/stdout (JSON lines)",
    [](ConfigNode c) -> std::unique_ptr<Env> {
      ExternalParams p;
      c.Get("command", p.command,
            "the program and its arguments, e.g. [\"python3\", \"my_env.py\"] (docs/external_env.md)");
      if (p.command.empty() || p.command[0].empty())
        throw ConfigError(fmt::format("{}: [env] name = \"external\" needs 'command', the program "
                                      "to run and its arguments",
                                      c.Where("command")),
                          "e.g. command = [\"python3\", \"envs/external/python/examples/courier.py\"]");
      ReadProcessKeys(c, p);
      c.GetTable("params", p.params, "parameters sent to the env in its hello message");
      return MakeExternalEnv(std::move(p));
    });

}  // namespace

void ReadProcessKeys(ConfigNode c, ExternalParams& p) {
  c.Get("cwd", p.cwd, "working directory of the env processes (\"\" = rlid's own)");
  c.Get("workers", p.workers, "env processes; episodes spread over them and their steps overlap",
        IntRange{1, 256});
  c.Get("timeout_s", p.timeout_s, "seconds a reply may take before the env counts as hung",
        Range::Positive());
  c.Get("start_timeout_s", p.start_timeout_s, "seconds the hello reply may take at start",
        Range::Positive());
  c.GetEnum("afterstates", p.afterstates,
            "menu afterstates: the env's own when it sends them, else clone+step (auto); only "
            "the env's (env); always clone+step (clone); none");
  c.GetEnum("on_error", p.on_error,
            "once its retries are spent, a broken episode stops the run, or is dropped");
  c.Get("retries", p.retries,
        "plays of an episode an env failure broke again from reset (same seed), at most",
        IntRange{0, 100});
  c.Get("retry_backoff_s", p.retry_backoff_s, "the i-th retry waits i times this many seconds",
        Range::NonNegative());
}

std::unique_ptr<Env> MakeExternalEnv(ExternalParams p) {
  return std::make_unique<ExternalEnv>(std::move(p));
}

}  // namespace rlid::envs
