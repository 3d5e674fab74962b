// Menu::Compile: free text -> menu item, the wording that matched, and why
// other texts are invalid.
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

TEST(Compile, ReportsTheWordingThatMatchedAsTheMenuListsIt) {
  Menu m = Compass();
  // Mixed case: `matched` is the menu's own text, never the answer's.
  m.items[3].realisations.push_back("Head West");
  struct Case {
    const char* text;
    ActionId action;
    const char* matched;
    int realisation;  // 0 = label, k = realisations[k - 1]
  } cases[] = {
      {"B", 1, "B", 0},                                    // bare label
      {"(D)", 3, "D", 0},                                  // decorated label
      {"b", 1, "B", 0},                                    // lowercase label
      {"I choose C.", 2, "C", 0},                          // label after a lead-in
      {"B) go south", 1, "B", 0},                          // label then its command
      {"I think C", 2, "C", 0},                            // the one label among the words
      {"go north", 0, "go north", 1},                      // the command
      {"ACTION: GO  SOUTH", 1, "go south", 1},             // command, other case and spacing
      {"I choose go east", 2, "go east", 1},               // command after a lead-in
      {"west", 3, "west", 2},                              // alias
      {"n", 0, "n", 3},                                    // one-letter alias
      {"head west", 3, "Head West", 4},                    // alias listed in mixed case
      {"I think we should go east now", 2, "go east", 1},  // mentioned in a sentence
      {"we head west today", 3, "Head West", 4},           // alias mentioned in a sentence
      {"south is best, surely south", 1, "south", 2},      // mentioned twice
  };
  for (const auto& c : cases) {
    auto r = m.Compile(c.text);
    ASSERT_TRUE(r.valid()) << c.text << " -> " << r.reason;
    EXPECT_EQ(r.action, c.action) << c.text;
    EXPECT_EQ(r.matched, c.matched) << c.text;
    EXPECT_EQ(r.realisation, c.realisation) << c.text;
    const auto& item = m.items[r.item];
    EXPECT_EQ(r.matched, r.realisation == 0 ? item.label : item.realisations[r.realisation - 1])
        << c.text;
  }
  // "go east" contains the alias "east": the longer mention is the one reported.
  auto r = m.Compile("we go east");
  EXPECT_EQ(r.matched, "go east");
  EXPECT_EQ(r.realisation, 1);
}

TEST(Compile, InvalidWithReasons) {
  Menu m = Compass();
  for (const char* t :
       {"", "   ", "fly up", "go north or go south", "A and B", "B go north", "Z"}) {
    auto r = m.Compile(t);
    EXPECT_FALSE(r.valid()) << t << " matched " << r.matched;
    EXPECT_FALSE(r.reason.empty()) << t;
    EXPECT_TRUE(r.matched.empty()) << t;
    EXPECT_EQ(r.realisation, -1) << t;
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
