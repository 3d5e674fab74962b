// craft: make a target item from a recipe DAG. The recipe world is fixed
// (10 base materials gathered from sources, 34 items each made by combining
// two ingredients); a seed picks the target of the requested depth, the
// starting inventory, and the recipe book shown to the agent (the target's
// recipes plus decoys). The menu mixes gathers, valid crafts and wrong
// combinations that waste a step. The oracle counts the exact shortest plan.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/topological_sort.hpp>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <string_view>

#include "core/check.h"
#include "core/hash.h"
#include "core/rng.h"
#include "core/strings.h"
#include "envs/api/menu_state.h"
#include "envs/api/simple_env.h"

namespace rlid::envs {
namespace {

// ---- the recipe world ------------------------------------------------------------

struct ItemDef {
  const char* name;
  const char* article;  // "a", "an", or "" for a mass noun
  const char* first;    // ingredients; nullptr for a base material
  const char* second;
  const char* verb;  // how a base material is gathered ("chop wood")
};

constexpr ItemDef kItems[] = {
    // Base materials: gathered from their sources, one unit per step.
    {"wood", "", nullptr, nullptr, "chop"},
    {"stone", "", nullptr, nullptr, "quarry"},
    {"iron ore", "", nullptr, nullptr, "mine"},
    {"coal", "", nullptr, nullptr, "dig"},
    {"sand", "", nullptr, nullptr, "shovel"},
    {"clay", "", nullptr, nullptr, "dig"},
    {"wool", "", nullptr, nullptr, "shear"},
    {"flax", "", nullptr, nullptr, "harvest"},
    {"resin", "", nullptr, nullptr, "tap"},
    {"flint", "", nullptr, nullptr, "pick"},
    // Depth 1.
    {"plank", "a", "wood", "wood", nullptr},
    {"iron", "", "iron ore", "coal", nullptr},
    {"glass", "", "sand", "coal", nullptr},
    {"brick", "a", "clay", "coal", nullptr},
    {"rope", "a", "flax", "flax", nullptr},
    {"cloth", "", "wool", "wool", nullptr},
    {"blade", "a", "flint", "stone", nullptr},
    {"pitch", "", "resin", "coal", nullptr},
    // Depth 2.
    {"stick", "a", "plank", "blade", nullptr},
    {"nail", "a", "iron", "stone", nullptr},
    {"lens", "a", "glass", "cloth", nullptr},
    {"wall", "a", "brick", "stone", nullptr},
    {"torch", "a", "plank", "pitch", nullptr},
    {"sail", "a", "cloth", "rope", nullptr},
    {"bottle", "a", "glass", "pitch", nullptr},
    {"kiln", "a", "brick", "brick", nullptr},
    {"hammer", "a", "iron", "plank", nullptr},
    {"bucket", "a", "plank", "rope", nullptr},
    // Depth 3.
    {"axe", "an", "iron", "stick", nullptr},
    {"lantern", "a", "torch", "glass", nullptr},
    {"ladder", "a", "stick", "rope", nullptr},
    {"fence", "a", "stick", "nail", nullptr},
    {"boat", "a", "plank", "sail", nullptr},
    {"telescope", "a", "lens", "iron", nullptr},
    {"chest", "a", "plank", "nail", nullptr},
    {"oven", "an", "kiln", "iron", nullptr},
    {"window", "a", "glass", "stick", nullptr},
    {"arrow", "an", "stick", "blade", nullptr},
    // Depth 4.
    {"ship", "a", "boat", "nail", nullptr},
    {"house", "a", "wall", "chest", nullptr},
    {"workshop", "a", "oven", "chest", nullptr},
    {"lighthouse", "a", "lantern", "wall", nullptr},
    {"crossbow", "a", "arrow", "rope", nullptr},
    {"observatory", "an", "telescope", "wall", nullptr},
};
constexpr int kNumItems = static_cast<int>(std::size(kItems));
constexpr int kMaxDepth = 4;
// Action ids: gathering base item b is b; combining items i <= j is
// kCombineBase + i * kNumItems + j.
constexpr ActionId kCombineBase = 100;

using Inventory = std::array<uint8_t, kNumItems>;

int PairKey(int i, int j) { return i <= j ? i * kNumItems + j : j * kNumItems + i; }

// The world as a DAG (ingredient -> product edges), with per-item depth
// (longest chain of crafts from base materials) and full cost (steps to make
// one unit from an empty inventory), both computed in topological order.
struct World {
  std::array<std::array<int, 2>, kNumItems> recipe;  // {-1, -1} for base materials
  std::array<int, kNumItems> depth;
  std::array<int, kNumItems> full_cost;
  std::array<int16_t, kNumItems * kNumItems> product_of;  // PairKey -> product, or -1
  std::vector<ActionSpec> specs;  // by action id; built once (Actions() runs on every Apply)
  std::array<int, kMaxDepth + 1> max_full_cost{};  // over items of each depth

  bool IsBase(int i) const { return recipe[i][0] < 0; }
};

World BuildWorld() {
  World w;
  w.product_of.fill(-1);
  std::map<std::string_view, int> index;
  for (int i = 0; i < kNumItems; ++i) {
    RLID_CHECK(index.emplace(kItems[i].name, i).second, "duplicate item '{}'", kItems[i].name);
  }
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;
  Graph g(kNumItems);
  for (int i = 0; i < kNumItems; ++i) {
    const ItemDef& d = kItems[i];
    RLID_CHECK((d.first == nullptr) == (d.verb != nullptr), "item '{}': base iff gathered", d.name);
    if (d.first == nullptr) {
      w.recipe[i] = {-1, -1};
      continue;
    }
    int a = index.at(d.first), b = index.at(d.second);
    w.recipe[i] = {a, b};
    RLID_CHECK(w.product_of[PairKey(a, b)] < 0, "two recipes for {} + {}", d.first, d.second);
    w.product_of[PairKey(a, b)] = static_cast<int16_t>(i);
    boost::add_edge(a, i, g);
    if (b != a) boost::add_edge(b, i, g);
  }
  std::vector<Graph::vertex_descriptor> order;
  boost::topological_sort(g, std::back_inserter(order));  // products first
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    int i = static_cast<int>(*it);
    if (w.IsBase(i)) {
      w.depth[i] = 0;
      w.full_cost[i] = 1;
    } else {
      auto [a, b] = w.recipe[i];
      w.depth[i] = 1 + std::max(w.depth[a], w.depth[b]);
      w.full_cost[i] = 1 + w.full_cost[a] + w.full_cost[b];
    }
  }
  for (int i = 0; i < kNumItems; ++i) {
    RLID_CHECK_LE(w.depth[i], kMaxDepth);
    w.max_full_cost[w.depth[i]] = std::max(w.max_full_cost[w.depth[i]], w.full_cost[i]);
  }
  // Menu specs. Every combination gets four realisations so that no action has
  // more text mass than another.
  w.specs.resize(kCombineBase + kNumItems * kNumItems);
  for (int i = 0; i < kNumItems; ++i) {
    std::string x = kItems[i].name;
    if (w.IsBase(i))
      w.specs[i] = {
          i, "gather " + x, {fmt::format("{} {}", kItems[i].verb, x), "get " + x, "collect " + x}};
    for (int j = i; j < kNumItems; ++j) {
      std::string y = kItems[j].name;
      std::string other = i == j ? "combine two " + x : fmt::format("combine {} and {}", y, x);
      w.specs[kCombineBase + PairKey(i, j)] = {
          kCombineBase + PairKey(i, j),
          fmt::format("combine {} and {}", x, y),
          {fmt::format("{} and {}", x, y), fmt::format("{} + {}", x, y), other}};
    }
  }
  return w;
}

const World& TheWorld() {
  static const World world = BuildWorld();
  return world;
}

std::string Name(int i) { return kItems[i].name; }

// "a lantern", "an axe", "iron".
std::string WithArticle(int i) {
  const char* art = kItems[i].article;
  return art[0] ? fmt::format("{} {}", art, kItems[i].name) : Name(i);
}

// "2 planks", "2 coal", "lens".
std::string Counted(int i, int n) {
  if (n == 1) return Name(i);
  std::string name = Name(i);
  if (kItems[i].article[0]) {
    bool es =
        name.ends_with("s") || name.ends_with("sh") || name.ends_with("ch") || name.ends_with("x");
    name += es ? "es" : "s";
  }
  return fmt::format("{} {}", n, name);
}

// ---- parameters and instances --------------------------------------------------------

struct CraftParams {
  int depth = 2;          // recipe depth of the target (1..4)
  int distractors = 3;    // wrong combinations offered per menu (at most)
  int extra_recipes = 1;  // decoy recipes in the book that do not lead to the target
  int step_limit = 0;     // decisions per episode; default 4x the longest plan at `depth`
  double success_reward = 1.0;
  double step_cost = 0.01;
};

// Per-seed constants, shared by a state and its clones.
struct CraftInstance {
  CraftParams params;
  int target = -1;
  std::vector<int> book;     // items whose recipes are shown; target first
  std::vector<int> sources;  // base materials that can be gathered, ascending
  int cap = 2;               // most units of one item the agent can hold
  uint64_t hash = 0;
  std::string goal_text;  // "Goal: ...\nRecipes: ..."
  std::array<bool, kNumItems> in_book{};
};

constexpr double kHeldProbability = 0.25;  // a needed item (and its subtree) starts in the bag

// Shortest plan length: every needed item not covered by the inventory costs
// one step (a gather or a craft). Recipes are unique, so every unit of an item
// saves the same subtree wherever it is used; covering greedily top-down is
// optimal.
int PlanLength(const CraftInstance& inst, Inventory inv) {
  const World& w = TheWorld();
  int cost = 0;
  std::array<int, 64> stack;
  int top = 0;
  stack[top++] = inst.target;
  while (top > 0) {
    int x = stack[--top];
    if (x != inst.target && inv[x] > 0) {
      --inv[x];
      continue;
    }
    ++cost;
    if (!w.IsBase(x)) {
      RLID_CHECK_LE(top + 2, static_cast<int>(stack.size()));
      stack[top++] = w.recipe[x][1];
      stack[top++] = w.recipe[x][0];
    }
  }
  return cost;
}

// The full recipe tree of a target: multiplicity of every item, products in BFS order.
struct RecipeTree {
  std::array<int, kNumItems> mult{};
  std::vector<int> products;
};
RecipeTree TreeOf(int target) {
  const World& w = TheWorld();
  RecipeTree tree;
  std::vector<int> queue = {target};
  for (size_t q = 0; q < queue.size(); ++q) {
    int x = queue[q];
    if (tree.mult[x]++ == 0 && !w.IsBase(x)) tree.products.push_back(x);
    if (!w.IsBase(x)) {
      queue.push_back(w.recipe[x][0]);
      queue.push_back(w.recipe[x][1]);
    }
  }
  return tree;
}

// Starting inventory: some needed items (their subtrees are then not
// needed) and one unrelated item.
void DrawHeld(int target, const RecipeTree& tree, Inventory& held, Rng& rng) {
  const World& w = TheWorld();
  std::vector<int> stack = {w.recipe[target][1], w.recipe[target][0]};
  while (!stack.empty()) {
    int x = stack.back();
    stack.pop_back();
    if (rng.Bernoulli(kHeldProbability)) {
      ++held[x];
    } else if (!w.IsBase(x)) {
      stack.push_back(w.recipe[x][1]);
      stack.push_back(w.recipe[x][0]);
    }
  }
  std::vector<int> unrelated;
  for (int i = 0; i < kNumItems; ++i)
    if (w.depth[i] <= 1 && tree.mult[i] == 0) unrelated.push_back(i);
  if (!unrelated.empty()) ++held[unrelated[rng.UniformInt(unrelated.size())]];
}

// Decoy recipes: products off the tree whose ingredients are obtainable
// (base, in the tree, or held); those sharing an ingredient with the tree
// come first because they look most plausible. At most `extra_recipes`.
std::vector<int> DrawDecoys(const RecipeTree& tree, const Inventory& held, int extra_recipes,
                            Rng& rng) {
  const World& w = TheWorld();
  const auto& mult = tree.mult;
  std::vector<int> near, far;
  for (int i = 0; i < kNumItems; ++i) {
    if (w.IsBase(i) || mult[i] > 0) continue;
    auto [a, b] = w.recipe[i];
    auto obtainable = [&](int x) { return w.IsBase(x) || mult[x] > 0 || held[x] > 0; };
    if (!obtainable(a) || !obtainable(b)) continue;
    bool shares = (mult[a] > 0) || (mult[b] > 0);
    (shares ? near : far).push_back(i);
  }
  rng.Shuffle(near);
  rng.Shuffle(far);
  near.insert(near.end(), far.begin(), far.end());
  if (static_cast<int>(near.size()) > extra_recipes) near.resize(extra_recipes);
  return near;
}

// The recipe book (the target first, then the tree's other products and the
// decoys in random order) and the base materials its recipes use.
void DrawBook(CraftInstance& inst, const RecipeTree& tree, const std::vector<int>& decoys,
              Rng& rng) {
  const World& w = TheWorld();
  std::vector<int> rest(tree.products.begin() + 1, tree.products.end());
  rest.insert(rest.end(), decoys.begin(), decoys.end());
  rng.Shuffle(rest);
  inst.book = {inst.target};
  inst.book.insert(inst.book.end(), rest.begin(), rest.end());
  std::vector<bool> source(kNumItems, false);
  for (int b : inst.book) {
    inst.in_book[b] = true;
    for (int x : w.recipe[b])
      if (w.IsBase(x)) source[x] = true;
  }
  for (int i = 0; i < kNumItems; ++i)
    if (source[i]) inst.sources.push_back(i);
}

// The instance's hash and its goal text with the recipe book.
void Describe(CraftInstance& inst) {
  const World& w = TheWorld();
  std::vector<std::string> recipes;
  uint64_t h = HashCombine(HashBytes("craft"), inst.target);
  for (int b : inst.book) {
    recipes.push_back(
        fmt::format("{} = {} + {}", Name(b), Name(w.recipe[b][0]), Name(w.recipe[b][1])));
    h = HashCombine(h, b);
  }
  for (int s : inst.sources) h = HashCombine(h, 1000 + s);
  inst.hash = HashCombine(h, inst.cap);
  inst.goal_text =
      fmt::format("Goal: make {}.\nRecipes: {}.", WithArticle(inst.target), Join(recipes, "; "));
}

// The first attempt of the seed's stream whose plan takes at least two steps;
// `held` receives its starting inventory.
std::shared_ptr<const CraftInstance> Generate(const CraftParams& p, uint64_t seed,
                                              Inventory& held) {
  const World& w = TheWorld();
  Rng rng = Rng::Stream(seed, "craft");
  std::vector<int> targets;
  for (int i = 0; i < kNumItems; ++i)
    if (w.depth[i] == p.depth) targets.push_back(i);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    auto inst = std::make_shared<CraftInstance>();
    inst->params = p;
    held.fill(0);
    int target = targets[rng.UniformInt(targets.size())];
    inst->target = target;
    const RecipeTree tree = TreeOf(target);
    inst->cap = 2;
    for (int i = 0; i < kNumItems; ++i)
      if (i != target) inst->cap = std::max(inst->cap, tree.mult[i]);
    DrawHeld(target, tree, held, rng);
    DrawBook(*inst, tree, DrawDecoys(tree, held, p.extra_recipes, rng), rng);
    if (PlanLength(*inst, held) < 2) continue;  // a one-step task is no decision
    Describe(*inst);
    return inst;
  }
  throw InternalError(
      fmt::format("craft: no instance with a plan of >= 2 steps for seed {}", seed));
}

// ---- the state --------------------------------------------------------------------

class CraftState final : public MenuState, public OracleState, public FactSource {
 public:
  CraftState(const CraftParams& p, uint64_t seed) : MenuState(p.step_limit) {
    inst_ = Generate(p, seed, inv_);
  }

  std::string Observation() const override {
    if (made_) return fmt::format("You made {}. Goal reached.", WithArticle(inst_->target));
    return fmt::format("{}\nYou have: {} (at most {} of each).", inst_->goal_text, InventoryText(),
                       inst_->cap);
  }

  std::string AfterstateText() const override {
    const auto& e = last_;
    switch (e.kind) {
      case Event::kGather:
        return fmt::format("You gather {}. You have: {}.", Name(e.item), InventoryText());
      case Event::kCraft:
        if (made_) return fmt::format("You make {}: goal reached.", WithArticle(e.item));
        return fmt::format("You make {}. You have: {}.", WithArticle(e.item), InventoryText());
      case Event::kFail:
        return fmt::format("Nothing is made: {} and {} do not combine. You have: {}.", Name(e.a),
                           Name(e.b), InventoryText());
      case Event::kNone:
        break;
    }
    return fmt::format("You have: {}.", InventoryText());
  }

  std::unique_ptr<State> Clone() const override { return std::make_unique<CraftState>(*this); }

  uint64_t Hash() const override {
    return HashCombine(inst_->hash, HashBytes(std::string_view(
                                        reinterpret_cast<const char*>(inv_.data()), inv_.size())));
  }

  std::vector<ActionId> OptimalActions() const override {
    if (IsTerminal()) return {};
    int budget = step_limit() - StepCount();
    if (PlanLength(*inst_, inv_) > budget) return {};
    std::vector<std::pair<ActionId, double>> q;
    double best = -std::numeric_limits<double>::infinity();
    for (ActionId a : LegalActions()) {
      Inventory child = inv_;
      bool success = Simulate(child, a).success;
      double value = -inst_->params.step_cost +
                     (success ? inst_->params.success_reward : Value(child, budget - 1));
      q.emplace_back(a, value);
      best = std::max(best, value);
    }
    std::vector<ActionId> out;
    for (auto [a, value] : q)
      if (value >= best - 1e-9) out.push_back(a);
    return out;
  }

  double OptimalReturn() const override {
    if (IsTerminal()) return 0.0;
    return Value(inv_, step_limit() - StepCount());
  }

  // The book's recipes and the wrong pairs tried so far; both hold in every
  // episode because the world is fixed.
  std::vector<std::string> Facts() const override {
    const World& w = TheWorld();
    std::vector<std::string> out;
    for (int b : inst_->book)
      out.push_back(fmt::format("combining {} and {} makes {}", Name(w.recipe[b][0]),
                                Name(w.recipe[b][1]), WithArticle(b)));
    for (int key : failed_)
      out.push_back(
          fmt::format("{} and {} do not combine", Name(key / kNumItems), Name(key % kNumItems)));
    return out;
  }

 protected:
  std::vector<ActionSpec> Actions() const override {
    const World& w = TheWorld();
    std::vector<int> ids;
    for (int b : inst_->sources)
      if (inv_[b] < inst_->cap) ids.push_back(b);
    size_t gathers = ids.size();
    for (int p : inst_->book) {
      auto [a, b] = w.recipe[p];
      if (CanCombine(a, b) && (p == inst_->target || inv_[p] < inst_->cap))
        ids.push_back(kCombineBase + PairKey(a, b));
    }
    int wanted = std::min(inst_->params.distractors, kMaxMenuSize - static_cast<int>(ids.size()));
    if (wanted > 0) {
      std::vector<int> held, wrong;
      for (int i = 0; i < kNumItems; ++i)
        if (inv_[i] > 0) held.push_back(i);
      for (size_t x = 0; x < held.size(); ++x)
        for (size_t y = x; y < held.size(); ++y) {
          int key = PairKey(held[x], held[y]);
          if (CanCombine(held[x], held[y]) && w.product_of[key] < 0)
            wrong.push_back(kCombineBase + key);
        }
      // Which wrong pairs are shown is a function of the state content.
      Rng rng(Hash());
      rng.Shuffle(wrong);
      if (static_cast<int>(wrong.size()) > wanted) wrong.resize(wanted);
      ids.insert(ids.end(), wrong.begin(), wrong.end());
    }
    std::sort(ids.begin() + gathers, ids.end());  // real and wrong pairs interleaved
    RLID_CHECK_LE(ids.size(), static_cast<size_t>(kMaxMenuSize));
    std::vector<ActionSpec> out;
    out.reserve(ids.size());
    for (int id : ids) out.push_back(w.specs[id]);
    return out;
  }

  StepOutcome Transition(ActionId action) override {
    Outcome o = Simulate(inv_, action);
    last_ = o.event;
    if (o.event.kind == Event::kFail) {
      int key = PairKey(o.event.a, o.event.b);
      if (std::find(failed_.begin(), failed_.end(), key) == failed_.end()) failed_.push_back(key);
    }
    made_ = o.success;
    double reward = -inst_->params.step_cost + (o.success ? inst_->params.success_reward : 0.0);
    return {reward, /*terminal=*/o.success, /*success=*/o.success, false};
  }

 private:
  struct Event {
    enum Kind { kNone, kGather, kCraft, kFail } kind = kNone;
    int item = -1, a = -1, b = -1;
  };
  struct Outcome {
    Event event;
    bool success = false;
  };

  bool CanCombine(int a, int b) const { return a == b ? inv_[a] >= 2 : inv_[a] > 0 && inv_[b] > 0; }

  // Applies a legal action to `inv` (gather, craft, or a wrong combination
  // that changes nothing).
  Outcome Simulate(Inventory& inv, ActionId action) const {
    Outcome o;
    if (action < kCombineBase) {
      ++inv[action];
      o.event = {Event::kGather, action, -1, -1};
      return o;
    }
    int key = action - kCombineBase;
    int a = key / kNumItems, b = key % kNumItems;
    int product = TheWorld().product_of[key];
    if (product < 0 || !inst_->in_book[product]) {
      o.event = {Event::kFail, -1, a, b};
      return o;
    }
    --inv[a];
    --inv[b];
    ++inv[product];
    o.event = {Event::kCraft, product, a, b};
    o.success = product == inst_->target;
    return o;
  }

  // Optimal return from inventory `inv` with `budget` decisions left.
  double Value(const Inventory& inv, int budget) const {
    int len = PlanLength(*inst_, inv);
    const auto& p = inst_->params;
    return len <= budget ? p.success_reward - p.step_cost * len : -p.step_cost * budget;
  }

  std::string InventoryText() const {
    std::vector<std::string> parts;
    for (int i = 0; i < kNumItems; ++i)
      if (inv_[i] > 0) parts.push_back(Counted(i, inv_[i]));
    return parts.empty() ? "nothing" : Join(parts, ", ");
  }

  std::shared_ptr<const CraftInstance> inst_;
  Inventory inv_{};
  Event last_;               // what the last step did (afterstate text only; not hashed)
  std::vector<int> failed_;  // wrong pairs tried this episode, in order (facts only; not hashed)
  bool made_ = false;        // the target was made
};

// The env: its facts, its rules, and a state per seed.
std::unique_ptr<Env> MakeCraftEnv(const CraftParams& p) {
  return std::make_unique<SimpleEnv>(
      EnvInfo{"craft", "craft a target item from a recipe DAG: gather, combine, avoid wrong pairs",
              p.step_limit, true},
      "You are crafting. Gather base materials and combine two items by a recipe to make "
      "the goal item; combining uses up both items. Combining items that are not a recipe "
      "wastes a step.",
      [p](uint64_t seed) -> std::unique_ptr<State> {
        return std::make_unique<CraftState>(p, seed);
      });
}

const BuiltInEnv kRegister(
    "craft", "crafting from a recipe DAG (gather, combine, wrong combinations)", [](ConfigNode c) {
      CraftParams p;
      c.Get("depth", p.depth, "recipe depth of the target item (the world's items)",
            IntRange{1, kMaxDepth});
      int longest = TheWorld().max_full_cost[p.depth];
      p.step_limit = 4 * longest;
      c.Get("distractors", p.distractors, "wrong combinations offered per menu (at most)",
            IntRange{0, 10});
      c.Get("extra_recipes", p.extra_recipes,
            "decoy recipes in the book that do not lead to the goal", IntRange{0, 4});
      c.Get("step_limit", p.step_limit,
            fmt::format("decisions per episode; every plan at depth {} fits in {} (default 4x)",
                        p.depth, longest),
            IntRange{longest, 10000});
      c.Get("success_reward", p.success_reward, "reward for making the goal item",
            Range::Positive());
      c.Get("step_cost", p.step_cost, "cost subtracted on every step", Range::NonNegative());
      return MakeCraftEnv(p);
    });

}  // namespace
}  // namespace rlid::envs
