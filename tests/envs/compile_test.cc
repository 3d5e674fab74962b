// Menu::Compile: free text -> menu item, the realisation that matched, and why
// other texts are invalid.
#include <gtest/gtest.h>

#include "core/error.h"
#include "envs/api/menu.h"

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

// Two menus: directions with one-word and one-letter aliases, and household
// commands of several words that share words ("take the red key" / "... blue key").
Menu Household() {
  Menu m;
  const std::vector<std::vector<std::string>> realisations = {
      {"take the red key", "take red key", "pick up the red key"},
      {"take the blue key", "take blue key"},
      {"open the door", "open door"},
      {"go to the kitchen", "go to kitchen", "enter the kitchen"}};
  for (size_t i = 0; i < realisations.size(); ++i) {
    MenuItem it;
    it.action = static_cast<ActionId>(i);
    it.command = realisations[i][0];
    it.realisations = realisations[i];
    m.items.push_back(it);
  }
  AssignDefaultLabels(m);
  return m;
}

// The accepted forms of docs/free_text.md, one row each.
TEST(Compile, AcceptsExactlyTheDocumentedForms) {
  Menu m = Compass();
  m.items[3].realisations.push_back("Head West");
  struct Case {
    const char* text;
    ActionId action;
    const char* matched;
    int realisation;  // 0 = label, k = realisations[k - 1]
  } cases[] = {
      {"B", 1, "B", 0},                                           // the label
      {"b", 1, "B", 0},                                           // ... in lower case
      {"  C \n", 2, "C", 0},                                      // surrounding whitespace
      {"(D)", 3, "D", 0},                                         // brackets
      {"**A**", 0, "A", 0},                                       // markdown emphasis
      {"'B'.", 1, "B", 0},                                        // quotes, a full stop
      {"B!", 1, "B", 0},                                          // an exclamation mark
      {"I choose B.", 1, "B", 0},                                 // a lead-in
      {"My answer is: C", 2, "C", 0},                             // a lead-in and a colon
      {"The answer is (C)", 2, "C", 0},                           // a lead-in and brackets
      {"Option b", 1, "B", 0},                                    // a lead-in, lower case
      {"B) go south", 1, "B", 0},                                 // label, separator, its command
      {"B go south", 1, "B", 0},                                  // ... with a space
      {"(B) South.", 1, "B", 0},                                  // ... with its alias
      {"B: go south", 1, "B", 0},                                 // ... with a colon
      {"go north", 0, "go north", 1},                             // the command
      {"GO  NORTH", 0, "go north", 1},                            // other case and spacing
      {"go\tnorth", 0, "go north", 1},                            // a tab is whitespace
      {"go north.", 0, "go north", 1},                            // a full stop
      {"`go north`", 0, "go north", 1},                           // code quotes
      {"I will go east", 2, "go east", 1},                        // a lead-in, the command
      {"Let's go east!", 2, "go east", 1},                        // a lead-in with an apostrophe
      {"west", 3, "west", 2},                                     // an alias
      {"n", 0, "n", 3},                                           // a one-letter alias
      {"head west", 3, "Head West", 4},                           // an alias listed in mixed case
      {"Action: go south", 1, "go south", 1},                     // after the marker
      {"ACTION: GO  SOUTH", 1, "go south", 1},                    // the marker in any case
      {"Let me think. The exit is left.\nAction: D", 3, "D", 0},  // reasoning, then the marker
      {"Answer:\n\n  C\n", 2, "C", 0},                            // the marker ends its line
      {"north is blocked.\nFinal answer: B", 1, "B", 0},          // the last marker counts
      {"B\nBecause south leads to the exit.", 1, "B", 0},         // the first line counts
      {"\n\nB\n", 1, "B", 0},                                     // ... the first non-empty one
  };
  for (const auto& c : cases) {
    auto r = m.Compile(c.text);
    ASSERT_TRUE(r.valid()) << "'" << c.text << "' -> " << r.reason;
    EXPECT_EQ(r.action, c.action) << c.text;
    EXPECT_EQ(r.matched, c.matched) << c.text;
    EXPECT_EQ(r.realisation, c.realisation) << c.text;
    EXPECT_TRUE(r.reason.empty()) << c.text;
  }
  Menu h = Household();
  EXPECT_EQ(h.Compile("Pick up the red key.").action, 0);
  EXPECT_EQ(h.Compile("I choose take blue key").action, 1);
  EXPECT_EQ(h.Compile("C) open the door").action, 2);
  EXPECT_EQ(h.Compile("enter  the KITCHEN").action, 3);
  // With nine items "I" is also a label: "I take ..." is still a lead-in.
  Menu big = Household();
  for (int i = 4; i < 9; ++i) {
    MenuItem it;
    it.action = i;
    it.command = "wait " + std::to_string(i);
    it.realisations = {it.command};
    big.items.push_back(it);
  }
  AssignDefaultLabels(big);
  EXPECT_EQ(big.Compile("I take the blue key").action, 1);
  EXPECT_EQ(big.Compile("I").action, 8);
  EXPECT_EQ(big.Compile("I) wait 8").action, 8);
}

// Texts that look like a choice but are not one: negations, questions,
// hedges, several actions, misspellings, look-alike characters, control bytes,
// markers inside words. Every one must be invalid with a reason. (Before the
// grammar was made exact, 63 of these 121 compiled to an action.)
TEST(Compile, RejectsHostileNearMisses) {
  const std::vector<std::string> compass = {
      // negation
      "don't go north", "do not go north", "not B", "not go north", "never go north", "B is wrong",
      "B is a trap", "avoid B", "anything but B", "no, not B", "go north is a bad idea",
      "I would not go north", "not A but B", "I won't go north", "Action: not B",
      // questions and hedges
      "go north?", "B?", "should I go north?", "Action: B?", "maybe B", "maybe go north",
      "perhaps B", "probably B", "the answer is probably B", "I think B",
      "I think we should go north", "B because it is closer", "B is best", "B is my choice",
      // several actions
      "B or C", "either A or B", "B/C", "B, C", "B and C", "B, or maybe C", "go north or go south",
      "go north, then go south", "go north and go south", "B then C", "first B, then C",
      "north-south", "Answer: B or C", "A) go north B) go south",
      // conditions and wrappers
      "if the door is open, go north", "go north if possible", "go north unless it is locked",
      "go north, please", "please go north", "go north now", "let me go north and see",
      "ignore the menu and go north", "system: go north", "Options: A, B, C, D",
      // misspellings and partial words
      "go nort", "go northh", "go northward", "go northern", "gonorth", "go_north", "go-north",
      "go.north", "go/north", "g north", "go", "north east", "go northeast", "ggo north",
      "go north2",
      // look-alike labels
      "BB", "AB", "B2", "B1", "Option B2", "B.C", "B-C", "B's", "Bee", "bravo", "label B", "Z",
      "AA", "A1", "B) go north", "(B) north",
      // Unicode look-alikes and invisible characters
      "\xEF\xBC\xA2",   // fullwidth B
      "\xD0\x92",       // Cyrillic Ve
      "\xCE\x92",       // Greek Beta
      "B\xE2\x80\x8B",  // B + zero-width space
      "\xE2\x80\x8B"
      "B",                 // zero-width space + B
      "go\xC2\xA0north",   // no-break space
      "go north\xC2\xAD",  // soft hyphen
      "\xEF\xBD\x87\xEF\xBD\x8F \xEF\xBD\x8E\xEF\xBD\x8F\xEF\xBD\x92\xEF\xBD\x94\xEF\xBD\x88",
      "B\xCC\x81",         // B + combining acute
      "\xF0\x9F\x85\xB1",  // negative squared B
      // control bytes
      std::string("B\0", 2), "\x1b[1mB\x1b[0m", "B\x07", std::string("go\0north", 8), "B\b",
      "go north\x7f",
      // markers and placeholders
      "reaction: B", "transaction: go north", "Interaction: B", "Action: <letter>",
      "Action: [label]", "Action:", "Answer: none"};
  const std::vector<std::string> household = {"take the key",
                                              "take the red",
                                              "take the red key and open the door",
                                              "take the red keys",
                                              "take the red key?",
                                              "do not take the red key",
                                              "take the green key",
                                              "red key",
                                              "take the red key twice",
                                              "open the door or go to the kitchen",
                                              "take the red key, B",
                                              "A) take the blue key",
                                              "open the doors",
                                              "go to the kitchen sink"};
  int accepted = 0;
  auto expect_invalid = [&](const Menu& m, const std::string& t) {
    auto r = m.Compile(t);
    if (r.valid()) ++accepted;
    EXPECT_FALSE(r.valid()) << "'" << t << "' compiled to " << r.matched;
    EXPECT_FALSE(r.reason.empty()) << t;
    EXPECT_EQ(r.item, -1) << t;
    EXPECT_TRUE(r.matched.empty()) << t;
    EXPECT_EQ(r.realisation, -1) << t;
  };
  for (const auto& t : compass) expect_invalid(Compass(), t);
  for (const auto& t : household) expect_invalid(Household(), t);
  EXPECT_EQ(compass.size() + household.size(), 121u);
  EXPECT_EQ(accepted, 0);
}

// An invalid answer's reason names what it mentions, so a reader of the
// episode sees why it failed.
TEST(Compile, ReasonsSayWhatTheTextMentions) {
  Menu m = Compass();
  EXPECT_NE(m.Compile("").reason.find("empty"), std::string::npos);
  EXPECT_NE(m.Compile("go north or go south").reason.find("ambiguous"), std::string::npos);
  EXPECT_NE(m.Compile("B or C").reason.find("B (go south) and C (go east)"), std::string::npos);
  const std::string neg = m.Compile("don't go north").reason;
  EXPECT_NE(neg.find("mentions A (go north)"), std::string::npos) << neg;
  EXPECT_NE(m.Compile("B go north").reason.find("label B does not match 'go north' (that is A)"),
            std::string::npos);
  EXPECT_NE(m.Compile("fly up").reason.find("no menu action matches 'fly up'"), std::string::npos);
  EXPECT_NE(m.Compile(std::string(600, 'x')).reason.find("too long"), std::string::npos);
  Menu empty;
  EXPECT_FALSE(empty.Compile("A").valid());
  EXPECT_NE(empty.Compile("A").reason.find("empty"), std::string::npos);
}

// A realisation may start with a separator character: after "B)" the run ") -"
// is tried whole ("150", item A) and then shorter ("-150", item B).
TEST(Compile, ALabelBeforeARealisationThatStartsWithASeparator) {
  Menu m;
  for (const char* answer : {"150", "-150", "-2427"}) {
    MenuItem it;
    it.action = static_cast<ActionId>(m.items.size());
    it.command = answer;
    it.realisations = {answer};
    m.items.push_back(it);
  }
  AssignDefaultLabels(m);
  EXPECT_EQ(m.Compile("B) -150").action, 1);
  EXPECT_EQ(m.Compile("B: -150").action, 1);
  EXPECT_EQ(m.Compile("C) -2427").action, 2);
  EXPECT_EQ(m.Compile("-150").action, 1);
  EXPECT_EQ(m.Compile("A) 150").action, 0);
  EXPECT_FALSE(m.Compile("C) -150").valid());
  EXPECT_NE(m.Compile("C) -150").reason.find("label C does not match '-150' (that is B)"),
            std::string::npos)
      << m.Compile("C) -150").reason;
}

TEST(Compile, PermuteMenuRelabels) {
  Menu m = Compass();
  PermuteMenu(m, {3, 2, 1, 0});
  EXPECT_EQ(m.items[0].command, "go west");
  EXPECT_EQ(m.items[0].label, "A");
  EXPECT_EQ(m.Compile("A").action, 3);
  EXPECT_EQ(m.Compile("go west").action, 3);
}

// Items that show no afterstate (an env that cannot copy its state) are not
// "the same afterstate" as each other; items that lead to one state are.
TEST(Compile, SameAfterstatesOnlyAmongItemsThatShowOne) {
  Menu m = Compass();
  MarkSameAfterstates(m);
  for (const auto& it : m.items) EXPECT_EQ(it.same_afterstate_as, -1) << it.command;
  m.items[1].afterstate = m.items[3].afterstate = "a wall";
  m.items[1].afterstate_hash = m.items[3].afterstate_hash = 42;
  MarkSameAfterstates(m);
  EXPECT_EQ(m.items[0].same_afterstate_as, -1);
  EXPECT_EQ(m.items[2].same_afterstate_as, -1);
  EXPECT_EQ(m.items[3].same_afterstate_as, 1);
}

// Actions whose commands are single letters (a Gymnasium env with actions
// "A", "B", "C"): once labels are shuffled, "C" may be the label of another
// item. The menu contract refuses such a menu, whatever the labels, and the
// compiler never turns an item's own command into another item.
TEST(Compile, ALetterCommandNeverCompilesToAnotherItemsLabel) {
  Menu m;
  for (int i = 0; i < 3; ++i) {
    MenuItem it;
    it.action = i;
    it.command = std::string(1, static_cast<char>('A' + i));
    it.realisations = {it.command};
    m.items.push_back(it);
  }
  PermuteMenu(m, {1, 2, 0});  // shown as A) B, B) C, C) A
  ASSERT_EQ(m.items[1].label, "B");
  ASSERT_EQ(m.items[1].command, "C");
  try {
    ValidateMenu(m);
    ADD_FAILURE() << "a menu whose command 'C' is another item's label passed the contract";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is also a label of this menu"), std::string::npos)
        << e.what();
  }
  AssignDefaultLabels(m);  // unshuffled (A) A, B) B, C) C): still refused, a shuffle would break it
  EXPECT_THROW(ValidateMenu(m), Error);
  PermuteMenu(m, {1, 2, 0});
  for (const char* text : {"C", "Action: C", "(C)", "**C**"}) {
    const CompileResult r = m.Compile(text);
    EXPECT_TRUE(!r.valid() || r.action == 2) << text << " compiled to action " << r.action;
  }
  // Letters that are no label of the menu stay fine (the compass's "n", "e" with four items).
  EXPECT_NO_THROW(ValidateMenu(Compass()));
}

// A reason quotes the answer as written: accents and other scripts stay
// (they printed as '?'), control bytes do not, and no character is cut.
TEST(Compile, ReasonsQuoteNonAsciiAnswersAsWritten) {
  Menu m;
  MenuItem it;
  it.action = 0;
  it.command = "take the key";
  it.realisations = {it.command};
  m.items.push_back(it);
  it.action = 1;
  it.command = "open the door";
  it.realisations = {it.command};
  m.items.push_back(it);
  AssignDefaultLabels(m);
  const CompileResult r = m.Compile("prends la clé\x01 de la porte");
  ASSERT_FALSE(r.valid());
  EXPECT_NE(r.reason.find("prends la clé? de la porte"), std::string::npos) << r.reason;
  std::string long_answer(59, 'x');
  long_answer += "\u00e9\u00e9";  // the 60th character is two bytes
  const CompileResult cut = m.Compile(long_answer);
  EXPECT_NE(cut.reason.find(std::string(59, 'x') + "\u00e9..."), std::string::npos) << cut.reason;
}

}  // namespace
}  // namespace rlid::envs
