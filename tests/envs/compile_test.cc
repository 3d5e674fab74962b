#include <gtest/gtest.h>

#include "envs/menu.h"

namespace rlid::envs {
namespace {

Menu Compass() {
  Menu m;
  const char* dirs[] = {"north", "south", "east", "west"};
  for (int i = 0; i < 4; ++i) {
    MenuItem it;
    it.action = i;
    it.command = std::string("go ") + dirs[i];
    it.realisations = {it.command, dirs[i], std::string(1, dirs[i][0])};
    m.items.push_back(it);
  }
  AssignDefaultLabels(m);
  return m;
}

TEST(Compile, LabelsWordingsAndSurroundingText) {
  Menu m = Compass();
  struct Case {
    const char* text;
    ActionId want;
  } cases[] = {{"B", 1},
               {"b", 1},
               {"  C \n", 2},
               {"(D)", 3},
               {"**A**", 0},
               {"I choose B.", 1},
               {"Action: go north", 0},
               {"ACTION: GO  SOUTH", 1},
               {"B) go south", 1},
               {"B go south", 1},
               {"n", 0},
               {"west", 3},
               {"I think we should go east now", 2},
               {"Let me think. The exit is left.\nAction: D", 3},
               {"My answer is C", 2}};
  for (const auto& c : cases) {
    auto r = m.Compile(c.text);
    EXPECT_TRUE(r.valid()) << c.text << " -> " << r.reason;
    EXPECT_EQ(r.action, c.want) << c.text;
  }
}

TEST(Compile, InvalidWithReasons) {
  Menu m = Compass();
  for (const char* t :
       {"", "   ", "fly up", "go north or go south", "A and B", "B go north", "Z"}) {
    auto r = m.Compile(t);
    EXPECT_FALSE(r.valid()) << t << " matched " << r.matched;
    EXPECT_FALSE(r.reason.empty()) << t;
  }
  EXPECT_NE(m.Compile("go north or go south").reason.find("ambiguous"), std::string::npos);
  EXPECT_NE(m.Compile("").reason.find("empty"), std::string::npos);
  Menu empty;
  EXPECT_FALSE(empty.Compile("A").valid());
}

TEST(Compile, PermuteMenuRelabels) {
  Menu m = Compass();
  PermuteMenu(m, {3, 2, 1, 0});
  EXPECT_EQ(m.items[0].command, "go west");
  EXPECT_EQ(m.items[0].label, "A");
  EXPECT_EQ(m.Compile("A").action, 3);
  EXPECT_EQ(m.Compile("go west").action, 3);
}

}  // namespace
}  // namespace rlid::envs
