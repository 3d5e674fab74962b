// arcgrid: small ARC-like grid puzzles. A seed draws an input grid and a
// target made by composing min_ops..max_ops random whole-grid operations
// (rotate, flip, transpose, crop, gravity, fill, recolour); the agent applies
// one operation per step until the grid equals the target. Afterstates show
// the grid each operation produces. The oracle is a breadth-first search over
// operation sequences that merges equal grids.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "core/check.h"
#include "core/hash.h"
#include "core/rng.h"
#include "core/strings.h"
#include "envs/api/menu_state.h"
#include "envs/api/simple_env.h"

namespace rlid::envs {
namespace {

constexpr int kMaxSide = 6;

// A grid of colours 0..9 (0 = background). Cells past rows*cols stay 0, so
// the defaulted == compares contents and shape.
struct Grid {
  uint8_t rows = 0, cols = 0;
  std::array<uint8_t, kMaxSide * kMaxSide> cells{};

  uint8_t At(int r, int c) const { return cells[r * cols + c]; }
  void Set(int r, int c, uint8_t v) { cells[r * cols + c] = v; }
  int size() const { return rows * cols; }
  bool operator==(const Grid&) const = default;
  // Bit c is set when colour c occurs.
  uint16_t Colours() const {
    uint16_t m = 0;
    for (int i = 0; i < size(); ++i) m |= static_cast<uint16_t>(1u << cells[i]);
    return m;
  }
  bool HasBackground() const { return Colours() & 1u; }
  int Tiles() const {
    int n = 0;
    for (int i = 0; i < size(); ++i) n += cells[i] != 0;
    return n;
  }
  uint64_t Hash() const {
    return HashBytes(std::string_view(reinterpret_cast<const char*>(cells.data()), size()),
                     rows * 16 + cols);
  }
  // Rows joined by `sep`: "120/003/400".
  std::string Text(std::string_view sep) const {
    std::string out;
    for (int r = 0; r < rows; ++r) {
      if (r) out += sep;
      for (int c = 0; c < cols; ++c) out.push_back(static_cast<char>('0' + At(r, c)));
    }
    return out;
  }
};

struct GridHasher {
  size_t operator()(const Grid& g) const { return g.Hash(); }
};

// ---- operations --------------------------------------------------------------------
// Action ids: 0..9 the fixed operations below, 10 + c "fill background with c",
// 100 + 10 a + b "recolour a to b".
enum FixedOp : ActionId {
  kRotateCw = 0,
  kRotateCcw,
  kFlipH,
  kFlipV,
  kTranspose,
  kCrop,
  kGravityDown,
  kGravityUp,
  kGravityLeft,
  kGravityRight,
};
constexpr ActionId kFillBase = 10;
constexpr ActionId kRecolourBase = 100;

// Operation families, as named in env.ops.
enum Family : uint8_t {
  kRotate = 1,
  kFlip = 2,
  kTransposeFamily = 4,
  kCropFamily = 8,
  kGravity = 16,
  kFill = 32,
  kRecolour = 64,
};
constexpr std::array<std::pair<const char*, Family>, 7> kFamilies = {{
    {"rotate", kRotate},
    {"flip", kFlip},
    {"transpose", kTransposeFamily},
    {"crop", kCropFamily},
    {"gravity", kGravity},
    {"fill", kFill},
    {"recolour", kRecolour},
}};

Family FamilyOf(ActionId a) {
  if (a <= kRotateCcw) return kRotate;
  if (a <= kFlipV) return kFlip;
  if (a == kTranspose) return kTransposeFamily;
  if (a == kCrop) return kCropFamily;
  if (a <= kGravityRight) return kGravity;
  if (a < kRecolourBase) return kFill;
  return kRecolour;
}

Grid Crop(const Grid& g) {
  int r0 = g.rows, r1 = -1, c0 = g.cols, c1 = -1;
  for (int r = 0; r < g.rows; ++r)
    for (int c = 0; c < g.cols; ++c)
      if (g.At(r, c)) {
        r0 = std::min(r0, r);
        r1 = std::max(r1, r);
        c0 = std::min(c0, c);
        c1 = std::max(c1, c);
      }
  if (r1 < 0) return g;
  Grid out;
  out.rows = static_cast<uint8_t>(r1 - r0 + 1);
  out.cols = static_cast<uint8_t>(c1 - c0 + 1);
  for (int r = 0; r < out.rows; ++r)
    for (int c = 0; c < out.cols; ++c) out.Set(r, c, g.At(r0 + r, c0 + c));
  return out;
}

// Tiles slide along (dr, dc) as far as they can, keeping their order.
Grid Gravity(const Grid& g, int dr, int dc) {
  Grid out;
  out.rows = g.rows;
  out.cols = g.cols;
  if (dc == 0) {
    for (int c = 0; c < g.cols; ++c) {
      int w = dr > 0 ? g.rows - 1 : 0;
      for (int k = 0; k < g.rows; ++k) {
        int r = dr > 0 ? g.rows - 1 - k : k;
        if (g.At(r, c)) {
          out.Set(w, c, g.At(r, c));
          w -= dr;
        }
      }
    }
  } else {
    for (int r = 0; r < g.rows; ++r) {
      int w = dc > 0 ? g.cols - 1 : 0;
      for (int k = 0; k < g.cols; ++k) {
        int c = dc > 0 ? g.cols - 1 - k : k;
        if (g.At(r, c)) {
          out.Set(r, w, g.At(r, c));
          w -= dc;
        }
      }
    }
  }
  return out;
}

Grid ApplyOp(const Grid& g, ActionId a) {
  Grid out;
  auto shaped = [&](bool swap) {
    out.rows = swap ? g.cols : g.rows;
    out.cols = swap ? g.rows : g.cols;
  };
  switch (a) {
    case kRotateCw:
      shaped(true);
      for (int r = 0; r < out.rows; ++r)
        for (int c = 0; c < out.cols; ++c) out.Set(r, c, g.At(g.rows - 1 - c, r));
      return out;
    case kRotateCcw:
      shaped(true);
      for (int r = 0; r < out.rows; ++r)
        for (int c = 0; c < out.cols; ++c) out.Set(r, c, g.At(c, g.cols - 1 - r));
      return out;
    case kFlipH:
      shaped(false);
      for (int r = 0; r < out.rows; ++r)
        for (int c = 0; c < out.cols; ++c) out.Set(r, c, g.At(r, g.cols - 1 - c));
      return out;
    case kFlipV:
      shaped(false);
      for (int r = 0; r < out.rows; ++r)
        for (int c = 0; c < out.cols; ++c) out.Set(r, c, g.At(g.rows - 1 - r, c));
      return out;
    case kTranspose:
      shaped(true);
      for (int r = 0; r < out.rows; ++r)
        for (int c = 0; c < out.cols; ++c) out.Set(r, c, g.At(c, r));
      return out;
    case kCrop:
      return Crop(g);
    case kGravityDown:
      return Gravity(g, 1, 0);
    case kGravityUp:
      return Gravity(g, -1, 0);
    case kGravityLeft:
      return Gravity(g, 0, -1);
    case kGravityRight:
      return Gravity(g, 0, 1);
    default:
      break;
  }
  uint8_t from = 0, to = 0;
  if (a >= kRecolourBase) {
    from = static_cast<uint8_t>((a - kRecolourBase) / 10);
    to = static_cast<uint8_t>((a - kRecolourBase) % 10);
  } else {
    to = static_cast<uint8_t>(a - kFillBase);
  }
  out = g;
  for (int i = 0; i < out.size(); ++i)
    if (out.cells[i] == from) out.cells[i] = to;
  return out;
}

// The operations offered on grid g: rotations, flips and transpose always;
// crop when it changes the grid; gravity when there are tiles and background;
// fill with a task colour when there is background; recolour of a present
// colour into another task colour. At most 5 + 1 + 4 + 4 + 4 * 3 = 26 items.
struct OpList {
  std::array<ActionId, kMaxMenuSize> ops;
  int size = 0;
  void Add(ActionId a) { ops[size++] = a; }
};

OpList ListOps(const Grid& g, uint16_t palette, uint8_t families) {
  OpList out;
  uint16_t present = g.Colours();
  bool background = present & 1u;
  if (families & kRotate) {
    out.Add(kRotateCw);
    out.Add(kRotateCcw);
  }
  if (families & kFlip) {
    out.Add(kFlipH);
    out.Add(kFlipV);
  }
  if (families & kTransposeFamily) out.Add(kTranspose);
  if ((families & kCropFamily) && present != 1u && !(Crop(g) == g)) out.Add(kCrop);
  if ((families & kGravity) && background && present != 1u)
    for (ActionId a = kGravityDown; a <= kGravityRight; ++a) out.Add(a);
  if ((families & kFill) && background)
    for (int c = 1; c <= 9; ++c)
      if (palette & (1u << c)) out.Add(kFillBase + c);
  if (families & kRecolour)
    for (int a = 1; a <= 9; ++a) {
      if (!(present & (1u << a))) continue;
      for (int b = 1; b <= 9; ++b)
        if (b != a && (palette & (1u << b))) out.Add(kRecolourBase + 10 * a + b);
    }
  return out;
}

ActionSpec MakeSpec(ActionId a) {
  switch (a) {
    case kRotateCw:
      return {a, "rotate clockwise", {"rotate cw", "turn clockwise", "rotate right"}};
    case kRotateCcw:
      return {a, "rotate counterclockwise", {"rotate ccw", "turn counterclockwise", "rotate left"}};
    case kFlipH:
      return {
          a, "flip horizontally", {"flip horizontal", "mirror horizontally", "flip left to right"}};
    case kFlipV:
      return {a, "flip vertically", {"flip vertical", "mirror vertically", "flip upside down"}};
    case kTranspose:
      return {a, "transpose", {"transpose the grid", "flip diagonally", "swap rows and columns"}};
    case kCrop:
      return {a, "crop to content", {"crop", "crop the grid", "crop to bounding box"}};
    case kGravityDown:
      return {a, "gravity down", {"slide tiles down", "push tiles down", "drop tiles down"}};
    case kGravityUp:
      return {a, "gravity up", {"slide tiles up", "push tiles up", "drop tiles up"}};
    case kGravityLeft:
      return {a, "gravity left", {"slide tiles left", "push tiles left", "drop tiles left"}};
    case kGravityRight:
      return {a, "gravity right", {"slide tiles right", "push tiles right", "drop tiles right"}};
    default:
      break;
  }
  if (a >= kRecolourBase) {
    int from = (a - kRecolourBase) / 10, to = (a - kRecolourBase) % 10;
    return {a,
            fmt::format("recolour {} to {}", from, to),
            {fmt::format("recolor {} to {}", from, to), fmt::format("replace {} with {}", from, to),
             fmt::format("change {} to {}", from, to)}};
  }
  int c = a - kFillBase;
  return {a,
          fmt::format("fill background with {}", c),
          {fmt::format("fill 0 with {}", c), fmt::format("paint background {}", c),
           fmt::format("colour background {}", c)}};
}

// Specs are built once: Actions() runs on every Apply, also for afterstates.
constexpr ActionId kNumActionIds = kRecolourBase + 100;
const ActionSpec& SpecOf(ActionId a) {
  static const std::vector<ActionSpec> specs = [] {
    std::vector<ActionSpec> v(kNumActionIds);
    for (ActionId id = 0; id < kNumActionIds; ++id) {
      bool fill = id > kFillBase && id < kFillBase + 10;
      bool recolour =
          id >= kRecolourBase && (id - kRecolourBase) / 10 != 0 && (id - kRecolourBase) % 10 != 0;
      if (id <= kGravityRight || fill || recolour) v[id] = MakeSpec(id);
    }
    return v;
  }();
  RLID_CHECK(a >= 0 && a < kNumActionIds && specs[a].action == a, "no arcgrid action {}", a);
  return specs[a];
}

// Sound dead-end tests from invariants of the operations: no operation
// removes a tile, and only fill adds tiles (it fills every background cell
// with one colour); only crop changes the shape, and it only shrinks it;
// only fill adds a colour.
bool CannotReach(const Grid& g, const Grid& target) {
  if (g.size() < target.size()) return true;
  const int tiles = g.Tiles(), target_tiles = target.Tiles();
  if (tiles > target_tiles) return true;
  const int background = g.size() - tiles;
  // Same shape: no crop on the way, so background stays or is filled away.
  if (g.size() == target.size() && tiles != target_tiles && target_tiles != target.size())
    return true;
  auto colours = [](uint16_t mask) { return std::popcount(static_cast<unsigned>(mask & ~1u)); };
  return colours(target.Colours()) > colours(g.Colours()) + (background > 0 ? 1 : 0);
}

// Breadth-first search from `start` for `target` over at most `budget`
// operations, merging equal grids. first_mask has bit i set when the i-th
// operation offered at `start` begins a shortest plan.
struct Plan {
  int distance = -1;  // -1: the target is not reachable within the budget
  uint32_t first_mask = 0;
  OpList first_ops;
};

Plan ShortestPlan(const Grid& start, const Grid& target, uint16_t palette, uint8_t families,
                  int budget) {
  Plan plan;
  plan.first_ops = ListOps(start, palette, families);
  if (start == target) {
    plan.distance = 0;
    return plan;
  }
  if (budget <= 0 || CannotReach(start, target)) return plan;
  std::unordered_set<Grid, GridHasher> seen = {start};
  std::unordered_map<Grid, uint32_t, GridHasher> layer, next;
  for (int i = 0; i < plan.first_ops.size; ++i) {
    Grid child = ApplyOp(start, plan.first_ops.ops[i]);
    if (!(child == start) && !CannotReach(child, target)) next[child] |= 1u << i;
  }
  for (int depth = 1;; ++depth) {
    if (auto it = next.find(target); it != next.end()) {
      plan.distance = depth;
      plan.first_mask = it->second;
      return plan;
    }
    if (depth >= budget || next.empty()) return plan;
    for (const auto& [g, mask] : next) seen.insert(g);
    layer.swap(next);
    next.clear();
    for (const auto& [g, mask] : layer) {
      OpList ops = ListOps(g, palette, families);
      for (int i = 0; i < ops.size; ++i) {
        Grid child = ApplyOp(g, ops.ops[i]);
        if (!seen.count(child) && !CannotReach(child, target)) next[child] |= mask;
      }
    }
  }
}

// ---- parameters and instances -------------------------------------------------------

struct ArcParams {
  int size = 3;     // side of the square input grid (2..6)
  int colours = 3;  // task palette size, background excluded (1..4)
  int min_ops = 1;  // the target needs exactly k operations, k uniform in [min_ops, max_ops]
  int max_ops = 2;
  uint8_t families =
      kRotate | kFlip | kTransposeFamily | kCropFamily | kGravity | kFill | kRecolour;
  int step_limit = 0;  // default 4 * max_ops
  double success_reward = 1.0;
  double step_cost = 0.01;
};

struct ArcInstance {
  ArcParams params;
  Grid input, target;
  uint16_t palette = 0;  // colours of input and target, background excluded
  uint64_t hash = 0;
};

constexpr int kMaxAttempts = 2000;

std::string FamilyNames(uint8_t families) {
  std::vector<std::string> names;
  for (auto [name, f] : kFamilies)
    if (families & f) names.push_back(name);
  return Join(names, ", ");
}

std::shared_ptr<const ArcInstance> Generate(const ArcParams& p, uint64_t seed) {
  Rng rng = Rng::Stream(seed, "arcgrid");
  const int n = p.size * p.size;
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    auto inst = std::make_shared<ArcInstance>();
    inst->params = p;
    std::vector<int> colours = rng.Permutation(9);
    uint16_t draw_palette = 0;
    for (int i = 0; i < p.colours; ++i)
      draw_palette |= static_cast<uint16_t>(1u << (colours[i] + 1));

    Grid& input = inst->input;
    input.rows = input.cols = static_cast<uint8_t>(p.size);
    int filled = static_cast<int>(rng.UniformRange(std::max(1, n / 3), std::max(1, 2 * n / 3)));
    std::vector<int> cells = rng.Permutation(n);
    for (int i = 0; i < filled; ++i)
      input.cells[cells[i]] = static_cast<uint8_t>(colours[rng.UniformInt(p.colours)] + 1);

    // Compose k operations, family first so that no family dominates by count.
    int k = static_cast<int>(rng.UniformRange(p.min_ops, p.max_ops));
    Grid g = input;
    for (int step = 0; step < k; ++step) {
      OpList ops = ListOps(g, draw_palette, p.families);
      uint8_t offered = 0;
      for (int i = 0; i < ops.size; ++i) offered |= FamilyOf(ops.ops[i]);
      std::vector<Family> fams;
      for (auto [name, f] : kFamilies)
        if (offered & f) fams.push_back(f);
      if (fams.empty()) break;
      Family f = fams[rng.UniformInt(fams.size())];
      std::vector<ActionId> pick;
      for (int i = 0; i < ops.size; ++i)
        if (FamilyOf(ops.ops[i]) == f) pick.push_back(ops.ops[i]);
      g = ApplyOp(g, pick[rng.UniformInt(pick.size())]);
    }
    if (g == input) continue;
    inst->target = g;
    inst->palette = static_cast<uint16_t>((input.Colours() | g.Colours()) & ~1u);
    // The target must need exactly k operations with the task's own palette.
    if (ShortestPlan(input, g, inst->palette, p.families, k).distance != k) continue;
    inst->hash = HashCombine(HashCombine(HashBytes("arcgrid"), g.Hash()),
                             (static_cast<uint64_t>(inst->palette) << 8) | p.families);
    return inst;
  }
  throw ConfigError(
      fmt::format(
          "arcgrid: no task needing {}..{} operations from {{{}}} found for seed {} in {} tries",
          p.min_ops, p.max_ops, FamilyNames(p.families), seed, kMaxAttempts),
      "allow more operation families (env.ops) or lower env.min_ops");
}

// ---- the state --------------------------------------------------------------------

class ArcState final : public MenuState, public OracleState {
 public:
  ArcState(const ArcParams& p, uint64_t seed) : MenuState(p.step_limit), inst_(Generate(p, seed)) {
    grid_ = inst_->input;
  }

  std::string Observation() const override {
    std::string head =
        solved_ ? "Solved: the grid equals the target." : "Goal: make the grid equal the target.";
    return fmt::format("{}\nGrid ({}x{}):\n{}\nTarget ({}x{}):\n{}", head, grid_.rows, grid_.cols,
                       grid_.Text("\n"), inst_->target.rows, inst_->target.cols,
                       inst_->target.Text("\n"));
  }

  std::string AfterstateText() const override {
    return fmt::format("Grid becomes {}x{}: {}", grid_.rows, grid_.cols, grid_.Text("/"));
  }

  std::unique_ptr<State> Clone() const override { return std::make_unique<ArcState>(*this); }

  uint64_t Hash() const override { return HashCombine(inst_->hash, grid_.Hash()); }

  std::vector<ActionId> OptimalActions() const override {
    if (IsTerminal()) return {};
    const Plan& plan = Search();
    if (plan.distance < 0) return {};
    std::vector<ActionId> out;
    if (inst_->params.step_cost > 0) {
      for (int i = 0; i < plan.first_ops.size; ++i)
        if (plan.first_mask & (1u << i)) out.push_back(plan.first_ops.ops[i]);
      return out;
    }
    // Without a step cost, any action that keeps the target reachable in time is optimal.
    int budget = step_limit() - StepCount();
    for (int i = 0; i < plan.first_ops.size; ++i) {
      Grid child = ApplyOp(grid_, plan.first_ops.ops[i]);
      if (ShortestPlan(child, inst_->target, inst_->palette, inst_->params.families, budget - 1)
              .distance >= 0)
        out.push_back(plan.first_ops.ops[i]);
    }
    return out;
  }

  double OptimalReturn() const override {
    if (IsTerminal()) return 0.0;
    const auto& p = inst_->params;
    int d = Search().distance;
    return d >= 0 ? p.success_reward - p.step_cost * d
                  : -p.step_cost * (step_limit() - StepCount());
  }

  const Grid& grid() const { return grid_; }

 protected:
  std::vector<ActionSpec> Actions() const override {
    OpList ops = ListOps(grid_, inst_->palette, inst_->params.families);
    std::vector<ActionSpec> out;
    out.reserve(ops.size);
    for (int i = 0; i < ops.size; ++i) out.push_back(SpecOf(ops.ops[i]));
    return out;
  }

  StepOutcome Transition(ActionId action) override {
    grid_ = ApplyOp(grid_, action);
    plan_.reset();
    solved_ = grid_ == inst_->target;
    double reward = -inst_->params.step_cost + (solved_ ? inst_->params.success_reward : 0.0);
    return {reward, /*terminal=*/solved_, /*success=*/solved_, false};
  }

 private:
  // The oracle search from this grid with the remaining step budget (memoised).
  const Plan& Search() const {
    if (!plan_)
      plan_ = ShortestPlan(grid_, inst_->target, inst_->palette, inst_->params.families,
                           step_limit() - StepCount());
    return *plan_;
  }

  std::shared_ptr<const ArcInstance> inst_;
  Grid grid_;
  bool solved_ = false;
  mutable std::optional<Plan> plan_;
};

// The env: its facts, its rules, and a state per seed.
std::unique_ptr<Env> MakeArcEnv(const ArcParams& p) {
  return std::make_unique<SimpleEnv>(
      EnvInfo{"arcgrid", "ARC-like grid puzzles: compose grid operations to reach a target grid",
              p.step_limit, true},
      "Grid puzzle. Digits are colours and 0 is the empty background. Each step applies one "
      "operation to the whole grid (rotate, flip, transpose, crop, gravity, fill, recolour). "
      "Make the grid equal the target.",
      [p](uint64_t seed) -> std::unique_ptr<State> { return std::make_unique<ArcState>(p, seed); });
}

const BuiltInEnv kRegister(
    "arcgrid", "ARC-like grid puzzles (rotate, flip, crop, gravity, recolour ...)",
    [](ConfigNode c) {
      ArcParams p;
      std::vector<std::string> ops;
      for (auto [name, f] : kFamilies) ops.push_back(name);
      c.Get("size", p.size, "side of the square input grid", IntRange{2, kMaxSide});
      c.Get("colours", p.colours, "colours in a task besides the background 0", IntRange{1, 4});
      c.Get("max_ops", p.max_ops, "most operations a target needs", IntRange{1, 4});
      c.Get("min_ops", p.min_ops,
            "fewest operations a target needs (1 = one afterstate shows it; <= max_ops)",
            IntRange{1, p.max_ops});
      c.Get("ops", ops,
            "operation families: rotate, flip, transpose, crop, gravity, fill, recolour");
      p.step_limit = 4 * p.max_ops;
      c.Get("step_limit", p.step_limit, "decisions per episode (default 4 * max_ops)",
            IntRange{p.max_ops, 1000});
      c.Get("success_reward", p.success_reward, "reward when the grid equals the target",
            Range::Positive());
      c.Get("step_cost", p.step_cost, "cost subtracted on every step", Range::NonNegative());
      p.families = 0;
      std::vector<std::string> known;
      for (auto [name, f] : kFamilies) known.push_back(name);
      for (const auto& name : ops) {
        auto it = std::find(known.begin(), known.end(), name);
        if (it == known.end())
          throw ConfigError(fmt::format("{}: unknown operation family '{}' in env.ops{}",
                                        c.Where("ops"), name, DidYouMean(name, known)),
                            fmt::format("known: {}", Join(known, ", ")));
        p.families |= kFamilies[it - known.begin()].second;
      }
      if (!(p.families & (kRotate | kFlip | kTransposeFamily)))
        throw ConfigError(
            fmt::format("{}: env.ops = [{}] has no operation that applies to every grid",
                        c.Where("ops"), FamilyNames(p.families)),
            "add rotate, flip or transpose, so that no grid is left without a move");
      auto env = MakeArcEnv(p);
      env->NewState(0);  // fails early (ConfigError) when no task fits the operation set
      return env;
    });

}  // namespace
}  // namespace rlid::envs
