// maze: grid navigation. The walls are a random spanning tree of the grid
// graph (Kruskal over seeded random edge weights, Boost.Graph) plus a fraction
// of extra openings that create loops. The agent moves north/east/south/west
// through open passages to the exit; with view_radius > 0 only nearby cells
// are described (partial observability). Oracle: BFS distances to the exit.
#include <fmt/format.h>

#include <array>
#include <bit>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/kruskal_min_spanning_tree.hpp>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <iterator>
#include <memory>

#include "core/check.h"
#include "core/hash.h"
#include "core/rng.h"
#include "envs/api/menu_state.h"
#include "envs/api/simple_env.h"

namespace rlid::envs {
namespace {

constexpr int kMinSize = 2;
constexpr int kMaxSize = 12;

// Directions double as action ids (menu order).
enum Dir : int { kNorth = 0, kEast = 1, kSouth = 2, kWest = 3 };
constexpr std::array<int, 4> kDr = {-1, 0, 1, 0};
constexpr std::array<int, 4> kDc = {0, 1, 0, -1};
constexpr std::array<const char*, 4> kDirName = {"north", "east", "south", "west"};
constexpr std::array<const char*, 4> kDirLetter = {"n", "e", "s", "w"};
constexpr std::array<const char*, 4> kDirScreen = {"up", "right", "down", "left"};

struct MazeParams {
  int size = 5;               // the maze has size x size cells
  double extra_edges = 0.25;  // fraction of the non-tree walls that are opened (loops)
  int view_radius = 0;        // 0: whole maze described; r > 0: cells within r rows and columns
  int step_limit = 0;         // set by the factory (default 3 * size^2)
  double success_reward = 1.0;
  double step_cost = 0.01;
};

// One generated instance; immutable and shared by every state of an episode.
struct MazeLayout {
  MazeParams params;
  int n = 0;
  std::vector<uint8_t> open;  // per cell: bit d set when the passage in direction d is open
  std::vector<int> dist;      // BFS distance to the exit along open passages
  int exit = 0;
  int start = 0;
  uint64_t fingerprint = 0;  // hash of walls, exit and start

  int Row(int cell) const { return cell / n; }
  int Col(int cell) const { return cell % n; }
  bool IsOpen(int cell, int d) const { return (open[cell] >> d) & 1; }
  int Neighbour(int cell, int d) const { return cell + kDr[d] * n + kDc[d]; }
  int Openings(int cell) const { return std::popcount(static_cast<unsigned>(open[cell])); }
  bool DeadEnd(int cell) const { return cell != exit && Openings(cell) == 1; }
  // 1-based "(row,col)".
  std::string Pos(int cell) const { return fmt::format("({},{})", Row(cell) + 1, Col(cell) + 1); }
  bool Visible(int from, int cell) const {
    int r = params.view_radius;
    return r == 0 || (std::abs(Row(from) - Row(cell)) <= r && std::abs(Col(from) - Col(cell)) <= r);
  }
};

// Walls from Kruskal over random distinct weights, then extra openings, then
// exit and start. The start is at least half the largest exit distance away
// (when the step limit allows), so episodes need real navigation.
std::shared_ptr<const MazeLayout> Generate(const MazeParams& p, uint64_t seed) {
  auto m = std::make_shared<MazeLayout>();
  m->params = p;
  const int n = m->n = p.size;
  Rng rng = Rng::Stream(seed, "maze");

  using Graph =
      boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS, boost::no_property,
                            boost::property<boost::edge_weight_t, int>>;
  using Edge = boost::graph_traits<Graph>::edge_descriptor;
  std::vector<std::pair<int, int>> pairs;  // (cell, east or south neighbour)
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < n; ++c) {
      if (c + 1 < n) pairs.emplace_back(r * n + c, r * n + c + 1);
      if (r + 1 < n) pairs.emplace_back(r * n + c, (r + 1) * n + c);
    }
  std::vector<int> weights = rng.Permutation(static_cast<int>(pairs.size()));  // distinct: no ties
  Graph g(pairs.begin(), pairs.end(), weights.begin(), n * n);
  std::vector<Edge> tree;
  boost::kruskal_minimum_spanning_tree(g, std::back_inserter(tree));
  RLID_CHECK_EQ(tree.size(), static_cast<size_t>(n * n - 1));

  m->open.assign(n * n, 0);
  auto open_between = [&](int a, int b) {
    int d = b == a + 1 ? kEast : kSouth;
    m->open[a] |= 1 << d;
    m->open[b] |= 1 << ((d + 2) % 4);
  };
  std::vector<bool> in_tree(pairs.size(), false);
  for (const Edge& e : tree) {
    int a = static_cast<int>(boost::source(e, g)), b = static_cast<int>(boost::target(e, g));
    if (a > b) std::swap(a, b);
    open_between(a, b);
  }
  std::vector<std::pair<int, int>> walls;
  for (const auto& [a, b] : pairs) {
    int d = b == a + 1 ? kEast : kSouth;
    if (!((m->open[a] >> d) & 1)) walls.emplace_back(a, b);
  }
  rng.Shuffle(walls);
  const auto extra =
      static_cast<size_t>(std::lround(p.extra_edges * static_cast<double>(walls.size())));
  for (size_t i = 0; i < extra && i < walls.size(); ++i)
    open_between(walls[i].first, walls[i].second);

  m->exit = static_cast<int>(rng.UniformInt(n * n));
  m->dist.assign(n * n, -1);
  std::deque<int> queue = {m->exit};
  m->dist[m->exit] = 0;
  int max_dist = 0;
  while (!queue.empty()) {
    int u = queue.front();
    queue.pop_front();
    max_dist = std::max(max_dist, m->dist[u]);
    for (int d = 0; d < 4; ++d) {
      if (!m->IsOpen(u, d)) continue;
      int v = m->Neighbour(u, d);
      if (m->dist[v] < 0) {
        m->dist[v] = m->dist[u] + 1;
        queue.push_back(v);
      }
    }
  }
  // Reachable within the step limit by construction: the exit always has a
  // neighbour at distance 1 and p.step_limit >= 1.
  const int hi = std::min(max_dist, p.step_limit);
  const int lo = std::max(1, std::min((max_dist + 1) / 2, hi));
  std::vector<int> starts;
  for (int c = 0; c < n * n; ++c)
    if (m->dist[c] >= lo && m->dist[c] <= hi) starts.push_back(c);
  RLID_CHECK(!starts.empty(), "no start cell at distance {}..{}", lo, hi);
  m->start = starts[rng.UniformInt(starts.size())];

  uint64_t h = HashCombine(HashBytes("maze"), static_cast<uint64_t>(n));
  for (uint8_t o : m->open) h = HashCombine(h, o);
  m->fingerprint = HashCombine(HashCombine(h, m->exit), m->start);
  return m;
}

class MazeState final : public MenuState, public OracleState, public FactSource {
 public:
  explicit MazeState(std::shared_ptr<const MazeLayout> m)
      : MenuState(m->params.step_limit), m_(std::move(m)), pos_(m_->start) {}

  std::string Observation() const override {
    if (pos_ == m_->exit) return fmt::format("You reached the exit at {}.", m_->Pos(pos_));
    std::string out = fmt::format(
        "Exit at {}. You are at {}. Open: {}.\nMap (@ you, X exit, # wall{}):", m_->Pos(m_->exit),
        m_->Pos(pos_), OpenList(pos_), m_->params.view_radius > 0 ? ", ? unseen" : "");
    for (const auto& row : MapRows()) out += "\n" + row;
    return out;
  }

  std::string AfterstateText() const override {
    if (pos_ == m_->exit) return fmt::format("{}: the exit.", m_->Pos(pos_));
    const bool dead = m_->DeadEnd(pos_);
    return fmt::format("{}: {} {}; exit {}.", m_->Pos(pos_), dead ? "dead end, open" : "open",
                       OpenList(pos_), ExitOffset());
  }

  std::unique_ptr<State> Clone() const override { return std::make_unique<MazeState>(*this); }
  uint64_t Hash() const override {
    return HashCombine(m_->fingerprint, static_cast<uint64_t>(pos_));
  }

  std::vector<ActionId> OptimalActions() const override {
    std::vector<ActionId> out;
    if (IsTerminal() || m_->dist[pos_] > Remaining()) return out;
    for (int d = 0; d < 4; ++d)
      if (m_->IsOpen(pos_, d) && m_->dist[m_->Neighbour(pos_, d)] == m_->dist[pos_] - 1)
        out.push_back(d);
    return out;
  }
  double OptimalReturn() const override {
    if (IsTerminal()) return 0.0;
    const auto& p = m_->params;
    const int d = m_->dist[pos_];
    if (d > Remaining()) return -p.step_cost * Remaining();  // truncation comes first
    return p.success_reward - p.step_cost * d;
  }

  // Dead ends and walls between cells the current observation describes.
  std::vector<std::string> Facts() const override {
    std::vector<std::string> out;
    const int n = m_->n;
    for (int c = 0; c < n * n; ++c) {
      if (!m_->Visible(pos_, c)) continue;
      if (m_->DeadEnd(c)) out.push_back(fmt::format("{} is a dead end", m_->Pos(c)));
      for (int d : {kEast, kSouth}) {
        const bool inside = d == kEast ? m_->Col(c) + 1 < n : m_->Row(c) + 1 < n;
        if (!inside || m_->IsOpen(c, d)) continue;
        const int nb = m_->Neighbour(c, d);
        if (m_->Visible(pos_, nb))
          out.push_back(fmt::format("wall between {} and {}", m_->Pos(c), m_->Pos(nb)));
      }
    }
    return out;
  }

 protected:
  std::vector<ActionSpec> Actions() const override {
    std::vector<ActionSpec> out;
    for (int d = 0; d < 4; ++d) {
      if (!m_->IsOpen(pos_, d)) continue;
      const std::string dir = kDirName[d];
      out.push_back({d,
                     "go " + dir,
                     {dir, kDirLetter[d], "move " + dir, "walk " + dir, "head " + dir,
                      std::string("go ") + kDirScreen[d]}});
    }
    return out;
  }

  StepOutcome Transition(ActionId action) override {
    RLID_CHECK(action >= 0 && action < 4 && m_->IsOpen(pos_, action), "illegal move {}", action);
    pos_ = m_->Neighbour(pos_, action);
    StepOutcome out;
    out.reward = -m_->params.step_cost;
    if (pos_ == m_->exit) {
      out.reward += m_->params.success_reward;
      out.terminal = out.success = true;
    }
    return out;
  }

 private:
  int Remaining() const { return step_limit() - StepCount(); }

  std::string OpenList(int cell) const {
    std::string out;
    for (int d = 0; d < 4; ++d)
      if (m_->IsOpen(cell, d)) out += (out.empty() ? "" : ", ") + std::string(kDirName[d]);
    return out;
  }

  // "2 south, 1 east" (rows first), "here" when on the exit.
  std::string ExitOffset() const {
    const int dr = m_->Row(m_->exit) - m_->Row(pos_), dc = m_->Col(m_->exit) - m_->Col(pos_);
    std::string out;
    if (dr != 0) out = fmt::format("{} {}", std::abs(dr), dr > 0 ? "south" : "north");
    if (dc != 0)
      out +=
          fmt::format("{}{} {}", out.empty() ? "" : ", ", std::abs(dc), dc > 0 ? "east" : "west");
    return out.empty() ? "here" : out;
  }

  // (2n-1) x (2n-1) characters: cells at even (row, col), passages between
  // them, '#' for walls and wall corners, '?' for what is out of view.
  std::vector<std::string> MapRows() const {
    const int n = m_->n, w = 2 * n - 1;
    std::vector<std::string> rows(w, std::string(w, '#'));
    auto vis = [&](int r, int c) { return m_->Visible(pos_, r * n + c); };
    for (int y = 0; y < w; ++y)
      for (int x = 0; x < w; ++x) {
        const int r = y / 2, c = x / 2;
        char& ch = rows[y][x];
        if (y % 2 == 0 && x % 2 == 0) {  // a cell
          const int cell = r * n + c;
          ch = cell == pos_ ? '@' : cell == m_->exit ? 'X' : !vis(r, c) ? '?' : '.';  // exit: known
        } else if (y % 2 == 0) {  // passage between (r,c) and (r,c+1)
          ch = !(vis(r, c) && vis(r, c + 1)) ? '?' : m_->IsOpen(r * n + c, kEast) ? '.' : '#';
        } else if (x % 2 == 0) {  // passage between (r,c) and (r+1,c)
          ch = !(vis(r, c) && vis(r + 1, c)) ? '?' : m_->IsOpen(r * n + c, kSouth) ? '.' : '#';
        } else {  // a wall corner: shown when any of its four cells is in view
          ch = vis(r, c) || vis(r + 1, c) || vis(r, c + 1) || vis(r + 1, c + 1) ? '#' : '?';
        }
      }
    return rows;
  }

  std::shared_ptr<const MazeLayout> m_;
  int pos_;
};

// The env: its facts, its rules, and a state per seed.
std::unique_ptr<Env> MakeMazeEnv(const MazeParams& p) {
  return std::make_unique<SimpleEnv>(
      EnvInfo{"maze", "grid maze: walk through open passages to the exit", p.step_limit, true},
      fmt::format("You are in a maze of {0}x{0} cells. Move north, east, south or west through "
                  "open passages "
                  "to reach the exit. Positions are (row,column): row 1 is the north edge, column "
                  "1 the west "
                  "edge.",
                  p.size),
      [p](uint64_t seed) -> std::unique_ptr<State> {
        return std::make_unique<MazeState>(Generate(p, seed));
      });
}

const BuiltInEnv kRegister(
    "maze", "grid maze from a random spanning tree plus loops (optionally partially observable)",
    [](ConfigNode c) {
      MazeParams p;
      c.Get("size", p.size, "the maze has size x size cells", IntRange{kMinSize, kMaxSize});
      c.Get("extra_edges", p.extra_edges,
            "fraction of the non-tree walls opened as loops (0 = a perfect maze, 1 = no inner "
            "walls)",
            Range::Unit());
      c.Get("view_radius", p.view_radius,
            "0: the whole maze is described; r > 0: only cells within r rows and columns",
            IntRange::NonNegative());
      p.step_limit = 3 * p.size * p.size;  // >= 3x the longest possible shortest path
      c.Get("step_limit", p.step_limit,
            "episodes are truncated after this many moves (default 3*size^2)",
            IntRange::Positive());
      // The oracle assumes the shortest path is optimal: a positive reward, no step bonus.
      c.Get("success_reward", p.success_reward, "reward for reaching the exit", Range::Positive());
      c.Get("step_cost", p.step_cost, "cost subtracted on every move", Range::NonNegative());
      return MakeMazeEnv(p);
    });

}  // namespace
}  // namespace rlid::envs
