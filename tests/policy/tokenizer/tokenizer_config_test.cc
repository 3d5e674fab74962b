// The model-directory layer of the tokenizer: tokenizer_config.json and
// generation_config.json (Qwen3's real files), special tokens encoded as their
// ids (against Hugging Face's ids for chat renderings), chat prompts from the
// model's own template, BOS from Llama-3's post-processor, and clear errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "envs/api/env.h"
#include "jinja/jinja.h"
#include "policy/reading/prompt.h"
#include "policy/tokenizer/tokenizer.h"
#include "tests/agents/fixtures.h"
#include "tests/test_paths.h"

namespace rlid::policy {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

std::string SourceDir() {
  if (const char* env = std::getenv("RLID_SOURCE_DIR")) return env;
  return RLID_SOURCE_DIR;
}
fs::path Data(const std::string& name) { return fs::path(SourceDir()) / "tests" / "data" / name; }
fs::path Qwen3TokenizerJson() { return fs::path(SourceDir()) / "build/assets/qwen3/tokenizer.json"; }

json ReadJson(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

// A Qwen3 model directory's tokenizer files (tokenizer.json is a fetched asset).
class Qwen3Dir {
 public:
  Qwen3Dir() : tmp_("qwen3tok") {
    if (!fs::exists(Qwen3TokenizerJson())) return;
    fs::copy_file(Qwen3TokenizerJson(), tmp_.path() / "tokenizer.json");
    fs::copy_file(Data("tokenizer/qwen3_tokenizer_config.json"), tmp_.path() / "tokenizer_config.json");
    std::ofstream(tmp_.path() / "generation_config.json")
        << R"({"bos_token_id": 151643, "eos_token_id": [151645, 151643], "do_sample": true})";
    ok_ = true;
  }
  bool ok() const { return ok_; }
  std::string path() const { return tmp_.path().string(); }

 private:
  testing::TempDir tmp_;
  bool ok_ = false;
};

#define REQUIRE_QWEN3_DIR(d)                                                                   \
  Qwen3Dir d;                                                                                  \
  ASSERT_TRUE(d.ok()) << "missing " << Qwen3TokenizerJson()                                    \
                      << ": run scripts/fetch_test_assets.sh to unpack it"

TEST(TokenizerConfig, Qwen3FilesGiveItsSpecialTokensAndStops) {
  REQUIRE_QWEN3_DIR(dir);
  const Tokenizer plain = Tokenizer::FromFile(Qwen3TokenizerJson().string());
  const Tokenizer tok = Tokenizer::FromDirectory(dir.path());
  EXPECT_EQ(plain.eos_id(), 151643);  // <|endoftext|> without the config
  EXPECT_EQ(tok.eos_id(), 151645);    // <|im_end|>: the end of a chat answer
  EXPECT_EQ(tok.pad_id(), 151643);
  EXPECT_FALSE(tok.bos_id().has_value());
  EXPECT_FALSE(tok.config().add_bos);
  EXPECT_EQ(tok.stop_ids(), (std::vector<TokenId>{151645, 151643}));
  EXPECT_TRUE(tok.IsStop(151643));
  EXPECT_FALSE(tok.IsStop(872));
  EXPECT_NE(tok.config().chat_template.find("<|im_start|>"), std::string::npos);
  EXPECT_NE(tok.Fingerprint(), plain.Fingerprint());
}

TEST(TokenizerConfig, SpecialTokensInTextEncodeAsTheirIds) {
  REQUIRE_QWEN3_DIR(dir);
  const Tokenizer tok = Tokenizer::FromDirectory(dir.path());
  // Ids from Hugging Face's tokenizer (@lenml/tokenizers, add_special_tokens=false).
  const std::vector<TokenId> want = {151644, 872, 198, 6023, 220, 151645, 198, 151667, 271, 151668, 271, 2512, 25, 425};
  EXPECT_EQ(tok.Encode("<|im_start|>user\nhi <|im_end|>\n<think>\n\n</think>\n\nAction: B"), want);
  // allow_special = false keeps them as plain text (rlid's own plain prompts).
  EXPECT_GT(tok.Encode("<|im_start|>", false).size(), 1u);
}

TEST(TokenizerConfig, ChatRenderingsTokenizeAsHuggingFaceDoes) {
  REQUIRE_QWEN3_DIR(dir);
  const Tokenizer tok = Tokenizer::FromDirectory(dir.path());
  std::ifstream gin(Data("chat_templates/golden.json"));
  const auto golden = nlohmann::ordered_json::parse(gin);  // tojson keeps the key order
  const json cases = ReadJson(Data("tokenizer/qwen3_chat_golden.json"));
  const auto tmpl = jinja::Template::Parse(tok.config().chat_template);
  ASSERT_GE(cases.size(), 20u);
  for (const auto& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    const auto& g = golden.at(c.at("golden_index").get<size_t>());
    // transformers (jinja2) is the reference for rendering: its strip('\n') keeps the space in
    // "then \n</think>" that the JS engine behind these files stripped (jinja/jinja_test.cc).
    std::string rendered_by_js = tmpl.Render(g.at("context"));
    if (const std::string py = "unclosed think, then \n</think>";
        rendered_by_js.find(py) != std::string::npos)
      rendered_by_js.replace(rendered_by_js.find(py), py.size(), "unclosed think, then\n</think>");
    EXPECT_EQ(rendered_by_js + "Action:", text) << c.at("golden_index");
    EXPECT_EQ(tok.Encode(text), c.at("ids").get<std::vector<TokenId>>()) << c.at("golden_index");
  }
}

// prompt.history_steps with a chat template: each earlier step is a user turn
// (its observation) and an assistant turn (the action taken), before the
// current user turn.
TEST(TokenizerConfig, HistoryBecomesChatTurns) {
  REQUIRE_QWEN3_DIR(dir);
  const Tokenizer tok = Tokenizer::FromDirectory(dir.path());
  auto env = envs::MakeEnv("bandit");
  auto st = env->NewState(3);
  const auto menu = st->CompileMenu();
  PromptConfig pc;
  pc.history_steps = 2;
  PromptRenderer chat(pc, tok);
  const std::vector<HistoryTurn> history = {{"first sight", "go north"}, {"second sight", "go east"},
                                            {"third sight", ""}};
  const auto p = chat.Render(env->Instructions(), st->Observation(), {}, menu, Plane::kDecision, history);
  EXPECT_EQ(std::count(p.tokens.begin(), p.tokens.end(), 151644), 3 + 2 * 2) << p.text;
  EXPECT_EQ(p.text.find("first sight"), std::string::npos) << p.text;
  const size_t second = p.text.find("<|im_start|>user\nsecond sight<|im_end|>\n<|im_start|>assistant\n");
  ASSERT_NE(second, std::string::npos) << p.text;
  const size_t east = p.text.find("Action: go east<|im_end|>", second);
  const size_t third = p.text.find("<|im_start|>user\nthird sight<|im_end|>", second);
  const size_t none = p.text.find("Action: (no valid action)<|im_end|>", second);
  const size_t now = p.text.find(st->Observation(), second);
  EXPECT_TRUE(second < east && east < third && third < none && none < now) << p.text;
}

TEST(TokenizerConfig, PromptsUseTheModelsChatTemplate) {
  REQUIRE_QWEN3_DIR(dir);
  const Tokenizer tok = Tokenizer::FromDirectory(dir.path());
  auto env = envs::MakeEnv("bandit");
  auto st = env->NewState(3);
  const auto menu = st->CompileMenu();
  PromptConfig pc;
  PromptRenderer chat(pc, tok);
  ASSERT_TRUE(chat.uses_chat_template());
  const auto p = chat.Render(env->Instructions(), st->Observation(), {}, menu, Plane::kDecision);
  EXPECT_EQ(p.text.rfind("<|im_start|>system\n" + env->Instructions() + "<|im_end|>\n<|im_start|>user\n", 0), 0u)
      << p.text;
  const std::string tail = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nAction:";
  ASSERT_GE(p.text.size(), tail.size());
  EXPECT_EQ(p.text.substr(p.text.size() - tail.size()), tail);
  EXPECT_EQ(p.tokens.front(), 151644);  // <|im_start|> as one id
  EXPECT_EQ(std::count(p.tokens.begin(), p.tokens.end(), 151644), 3);
  // The token-plane answer ends with <|im_end|>.
  EXPECT_EQ(chat.AnswerTokens(menu.items[0]).back(), 151645);
  pc.enable_thinking = true;
  const auto think = PromptRenderer(pc, tok).Render(env->Instructions(), st->Observation(), {}, menu, Plane::kDecision);
  EXPECT_EQ(think.text.find("<think>"), std::string::npos);  // Qwen3 leaves the block to the model
  pc.chat_template = policy::ChatTemplateUse::kNone;
  PromptRenderer plain(pc, tok);
  EXPECT_FALSE(plain.uses_chat_template());
  const auto q = plain.Render(env->Instructions(), st->Observation(), {}, menu, Plane::kDecision);
  EXPECT_EQ(q.text.find("<|im_start|>"), std::string::npos);
  EXPECT_EQ(q.text, RenderPromptText(pc, env->Instructions(), st->Observation(), {}, menu, Plane::kDecision));
}

TEST(TokenizerConfig, PlainPromptsStartWithBosWhenThePostProcessorAddsIt) {
  testing::TempDir tmp("llamatok");
  fs::copy_file(Data("tokenizer/llama3_style_tokenizer.json"), tmp.path() / "tokenizer.json");
  std::ofstream(tmp.path() / "tokenizer_config.json")
      << R"({"bos_token": "<|begin_of_text|>", "eos_token": "<|endoftext|>"})";
  const Tokenizer tok = Tokenizer::FromDirectory(tmp.path().string());
  ASSERT_TRUE(tok.bos_id().has_value());
  EXPECT_TRUE(tok.config().add_bos);  // from TemplateProcessing, as HF's fast tokenizer
  std::ofstream(tmp.path() / "tokenizer_config.json")
      << R"({"bos_token": "<|begin_of_text|>", "add_bos_token": false})";
  EXPECT_FALSE(Tokenizer::FromDirectory(tmp.path().string()).config().add_bos);
}

TEST(TokenizerConfig, BadFilesNameTheField) {
  testing::TempDir tmp("badtok");
  fs::copy_file(Data("tokenizer/llama3_style_tokenizer.json"), tmp.path() / "tokenizer.json");
  auto expect_error = [&](const std::string& config, const std::string& generation, const std::string& field) {
    std::ofstream(tmp.path() / "tokenizer_config.json") << config;
    if (generation.empty()) fs::remove(tmp.path() / "generation_config.json");
    else std::ofstream(tmp.path() / "generation_config.json") << generation;
    try {
      Tokenizer::FromDirectory(tmp.path().string());
      ADD_FAILURE() << config << " " << generation << ": accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  expect_error(R"({"eos_token": "<|no_such|>"})", "", "eos_token");
  expect_error(R"({"pad_token": {"content": "<nope>"}})", "", "pad_token");
  expect_error(R"({"bos_token": 7})", "", "bos_token");
  expect_error(R"({"chat_template": 3})", "", "chat_template");
  expect_error(R"({"add_bos_token": true})", "", "add_bos_token");
  expect_error(R"({})", R"({"eos_token_id": [99999]})", "eos_token_id");
  expect_error(R"({})", R"({"eos_token_id": "x"})", "eos_token_id");
  expect_error(R"([1, 2])", "", "tokenizer_config.json");
}

TEST(TokenizerConfig, SaveDirectoryRoundTrips) {
  REQUIRE_QWEN3_DIR(dir);
  const Tokenizer tok = Tokenizer::FromDirectory(dir.path());
  testing::TempDir out("tok_save");
  tok.SaveDirectory(out.path().string());
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    EXPECT_TRUE(fs::exists(out.path() / f)) << f;
  const Tokenizer back = Tokenizer::FromDirectory(out.path().string());
  EXPECT_EQ(back.Fingerprint(), tok.Fingerprint());
  EXPECT_EQ(back.stop_ids(), tok.stop_ids());
  EXPECT_EQ(back.config().chat_template, tok.config().chat_template);
  // A tokenizer.json alone writes no config files.
  testing::TempDir out2("tok_save2");
  Tokenizer::FromFile(Qwen3TokenizerJson().string()).SaveDirectory(out2.path().string());
  EXPECT_FALSE(fs::exists(out2.path() / "tokenizer_config.json"));
}

TEST(TokenizerConfig, LabelCheckNamesTheLabelsThatAreNotOneToken) {
  // Qwen3's pre-tokeniser gives " X" a token of its own after any prefix.
  REQUIRE_QWEN3_DIR(dir);
  const Tokenizer qwen = Tokenizer::FromDirectory(dir.path());
  PromptConfig pc;
  for (const char* prefix : {"Action:", "Answer:", "Choice", "->", "Action:\n"}) {
    pc.answer_prefix = prefix;
    EXPECT_NO_THROW(PromptRenderer(pc, qwen)) << prefix;
  }
  // A tokenizer without " A".." Z" merges: every label fails, and no prefix helps.
  const Tokenizer hand = Tokenizer::FromFile(Data("tokenizer/llama3_style_tokenizer.json").string());
  pc.answer_prefix = "Action:";
  try {
    PromptRenderer r(pc, hand);
    ADD_FAILURE() << "accepted labels that are several tokens";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("label(s) "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Z"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.hint()).find("rlid tokenizer train"), std::string::npos) << e.hint();
  }
}

}  // namespace
}  // namespace rlid::policy
