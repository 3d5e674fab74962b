// `rlid loss` / `rlid advantage`: every public reference case (verl, TRL,
// OpenRLHF numbers in tests/data/oracle) must match within its tolerance, both
// in-process and through the real binary; plus the JSON contract (non-finite
// strings, mask types, unknown keys, shapes, exit codes).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/loss_json.h"
#include "core/error.h"
#include "tests/test_paths.h"

namespace rlid::cli {
namespace {

using nlohmann::json;

json LoadCases() {
  std::ifstream in(std::string(RLID_SOURCE_DIR) + "/tests/data/oracle/loss_cases_public.json");
  EXPECT_TRUE(in.good());
  return json::parse(in);
}

double AsDouble(const json& v) {
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    if (s == "nan") return std::nan("");
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
  }
  return v.get<double>();
}

struct Tolerance {
  double rtol, atol;
};

Tolerance TolFor(const json& tol, const std::string& key) {
  if (tol.contains("per_key") && tol["per_key"].contains(key)) {
    const json& k = tol["per_key"][key];
    return {k.value("rtol", tol["rtol"].get<double>()), k.value("atol", tol["atol"].get<double>())};
  }
  return {tol["rtol"].get<double>(), tol["atol"].get<double>()};
}

// how_to_check: |got - expected| <= atol + rtol |expected| elementwise.
void Compare(const json& got, const json& expected, Tolerance tol, const std::string& key,
             std::vector<std::string>& errors) {
  if (expected.is_array()) {
    if (!got.is_array() || got.size() != expected.size()) {
      errors.push_back(key + ": shape differs");
      return;
    }
    for (size_t i = 0; i < expected.size(); ++i)
      Compare(got[i], expected[i], tol, key + "[" + std::to_string(i) + "]", errors);
    return;
  }
  double g = AsDouble(got), e = AsDouble(expected);
  if (std::isnan(e) && std::isnan(g)) return;
  if (std::isinf(e) && g == e) return;
  if (!(std::abs(g - e) <= tol.atol + tol.rtol * std::abs(e)))
    errors.push_back(fmt::format("{}: got {:.17g}, expected {:.17g}", key, g, e));
}

std::vector<std::string> Check(const json& c, const json& got) {
  std::vector<std::string> errors;
  for (const auto& [key, value] : c["expected"].items()) {
    if (key == "metrics") {
      for (const auto& [name, v] : value.items()) {
        if (!got["metrics"].contains(name)) {
          errors.push_back("metrics." + name + " missing");
          continue;
        }
        Compare(got["metrics"][name], v, TolFor(c["tolerance"], "metrics." + name),
                "metrics." + name, errors);
      }
    } else {
      Compare(got[key], value, TolFor(c["tolerance"], key), key, errors);
    }
  }
  return errors;
}

json Evaluate(const json& c) {
  return c["kind"] == "loss" ? EvaluateLossCase(c["input"], c["name"])
                             : EvaluateAdvantageCase(c["input"], c["name"]);
}

TEST(OracleCases, EveryPublicCaseMatchesInProcess) {
  json cases = LoadCases();
  ASSERT_GE(cases["cases"].size(), 14u);
  for (const auto& c : cases["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    auto errors = Check(c, Evaluate(c));
    EXPECT_TRUE(errors.empty()) << fmt::format("{}", fmt::join(errors, "\n"));
  }
}

struct Process {
  int exit_code;
  std::string out;
};

std::string Binary() {
  const char* env = std::getenv("RLID_BIN");
  return env ? env : std::string(RLID_BINARY_DIR) + "/rlid";
}

Process RunRlid(const std::string& args) {
  std::string cmd = Binary() + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string WriteCase(const json& doc, const std::string& name) {
  std::string path = ::testing::TempDir() + "/rlid_case_" + name + ".json";
  std::ofstream(path) << doc.dump();
  return path;
}

// The binary runs the same code as EvaluateLossCase; one case of each kind checks
// the plumbing (each start loads LibTorch, ~1 s on a busy machine).
TEST(OracleCases, OneCaseOfEachKindMatchesThroughTheBinary) {
  json cases = LoadCases();
  for (const std::string kind : {"loss", "advantage"}) {
    auto it = std::find_if(cases["cases"].begin(), cases["cases"].end(),
                           [&](const json& c) { return c["kind"] == kind; });
    ASSERT_NE(it, cases["cases"].end()) << kind;
    const json& c = *it;
    SCOPED_TRACE(c["name"].get<std::string>());
    Process p = RunRlid(kind + " --json " + WriteCase(c["input"], kind));
    ASSERT_EQ(p.exit_code, 0) << p.out;
    auto errors = Check(c, json::parse(p.out));
    EXPECT_TRUE(errors.empty()) << fmt::format("{}", fmt::join(errors, "\n"));
  }
}

json SmallLoss() {
  return json::parse(R"({
    "loss": {"policy_loss": "ppo_clip", "clip_high": 0.28, "dual_clip": 3},
    "inputs": {"log_prob": [[-1.0, -0.5, 7.0]], "old_log_prob": [[-1.2, -0.4, 1e300]],
               "advantages": [0.7], "response_mask": [[1, 1, 0]]}})");
}

TEST(LossCommand, MaskTypesAndAdvantageShapesAgree) {
  json base = EvaluateLossCase(SmallLoss());
  json doc = SmallLoss();
  doc["inputs"]["response_mask"] = json::parse("[[true, true, false]]");
  EXPECT_EQ(EvaluateLossCase(doc), base);
  doc["inputs"]["response_mask"] = json::parse("[[1.0, 1.0, 0.0]]");
  EXPECT_EQ(EvaluateLossCase(doc), base);
  doc["inputs"]["advantages"] = json::parse("[[0.7, 0.7, \"nan\"]]");
  EXPECT_EQ(EvaluateLossCase(doc), base);
  // r = [e^0.2, e^-0.1], A = 0.7: L = [-0.7 e^0.2, -0.7 e^-0.1] (both inside [0.8, 1.28]).
  EXPECT_NEAR(base["loss"].get<double>(), -0.35 * (std::exp(0.2) + std::exp(-0.1)), 1e-15);
  EXPECT_NEAR(base["grad_log_prob"][0][1].get<double>(), -0.35 * std::exp(-0.1), 1e-15);
  EXPECT_EQ(base["grad_log_prob"][0][2].get<double>(), 0.0);
  EXPECT_EQ(base["metrics"]["clip_frac"].get<double>(), 0.0);
}

TEST(LossCommand, NonFiniteNumbersAreStringsBothWays) {
  EXPECT_EQ(JsonNumber(INFINITY), "inf");
  EXPECT_EQ(JsonNumber(-INFINITY), "-inf");
  EXPECT_EQ(JsonNumber(std::nan("")), "nan");
  EXPECT_EQ(JsonNumber(1.5), 1.5);
  json doc = SmallLoss();
  doc["inputs"]["advantages"] = json::parse(R"(["inf"])");
  json out = EvaluateLossCase(doc);
  EXPECT_EQ(out["loss"], "-inf");
  // Config values too: a TIS cap of "inf" means no cap.
  doc = SmallLoss();
  doc["loss"]["engine"] = json::parse(R"({"kind": "tis", "cap": "inf"})");
  doc["inputs"]["rollout_log_prob"] = json::parse("[[-5.2, -0.4, 0]]");
  out = EvaluateLossCase(doc);
  EXPECT_NEAR(out["metrics"]["engine/weight_mean"].get<double>(), (std::exp(4.0) + 1) / 2, 1e-12);

  json adv = json::parse(R"({"advantage": {"estimator": "grpo", "std_norm": false},
    "inputs": {"scores": ["nan", 1.0, 2.0, 4.0], "groups": [0, 0, "b", "b"],
               "response_mask": [[1], [1], [1], [1]]}})");
  json a = EvaluateAdvantageCase(adv);
  EXPECT_EQ(a["advantages"][0][0], "nan");
  EXPECT_EQ(a["advantages"][2][0].get<double>(), -1.0);
  EXPECT_EQ(a["advantages"][3][0].get<double>(), 1.0);
}

TEST(AdvantageCommand, KlInTheRewardIsSubtractedBeforeTheEstimator) {
  // k1 with beta 0.1: row 0 kl = [1, 0] -> rewards [-0.1, 1] (score 1 at its last token),
  // sum 0.9; row 1 kl = [0] (the 5 / 7 are padding) -> 0. Dr. GRPO: [0.45, -0.45].
  json doc = json::parse(R"({"advantage": {"estimator": "grpo", "std_norm": false},
    "kl": {"coef": 0.1, "placement": "reward", "estimator": "k1"},
    "inputs": {"scores": [1, 0], "groups": [0, 0], "response_mask": [[1, 1], [1, 0]],
               "log_prob": [[-1, -1], [-1, 5]], "ref_log_prob": [[-2, -1], [-1, 7]]}})");
  json a = EvaluateAdvantageCase(doc);
  EXPECT_NEAR(a["advantages"][0][0].get<double>(), 0.45, 1e-15);
  EXPECT_NEAR(a["advantages"][1][0].get<double>(), -0.45, 1e-15);
  EXPECT_EQ(a["advantages"][1][1].get<double>(), 0.0);
  // placement = loss leaves the rewards alone.
  doc["kl"]["placement"] = "loss";
  EXPECT_NEAR(EvaluateAdvantageCase(doc)["advantages"][0][0].get<double>(), 0.5, 1e-15);
  doc["kl"]["placement"] = "reward";
  doc["inputs"].erase("ref_log_prob");
  EXPECT_THROW(EvaluateAdvantageCase(doc), ConfigError);
}

// A row cut by a time limit continues from its end value: gamma = lambda = 1,
// rewards [1, 0], V = [0.5, 0.5]. Terminal: A = [0.5, -0.5]; end value 2:
// A_1 = 0 + 2 - 0.5 = 1.5, A_0 = (1 + 0.5 - 0.5) + A_1 = 2.5.
TEST(AdvantageCommand, GaeBootstrapsFromEndValues) {
  json doc = json::parse(R"({"advantage": {"estimator": "gae", "gamma": 1, "lambda": 1},
    "inputs": {"token_rewards": [[1, 0]], "response_mask": [[1, 1]], "values": [[0.5, 0.5]]}})");
  json a = EvaluateAdvantageCase(doc);
  EXPECT_DOUBLE_EQ(a["advantages"][0][0].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(a["advantages"][0][1].get<double>(), -0.5);
  doc["inputs"]["end_values"] = {2};
  a = EvaluateAdvantageCase(doc);
  EXPECT_DOUBLE_EQ(a["advantages"][0][0].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(a["advantages"][0][1].get<double>(), 1.5);
  doc["inputs"]["end_values"] = {2, 3};
  EXPECT_THROW(EvaluateAdvantageCase(doc), ConfigError);
}

// gigpo from `rlid advantage`: anchors may be the observation texts, as in
// verl-agent. Steps (one row each): A in "hall" then "kitchen" (rewards 0, 1),
// B in "hall" then "garden" (0, 0); gamma 0.5, mean_norm: A^E = +-0.5, and the
// "hall" step group compares returns-to-go 0.5 and 0: +-0.25.
TEST(AdvantageCommand, GigpoTakesNamedEpisodesAndAnchors) {
  json doc = json::parse(R"({"advantage": {"estimator": "gigpo", "gamma": 0.5, "std_norm": false},
    "inputs": {"scores": [0, 1, 0, 0], "response_mask": [[1], [1], [1], [1]], "groups": [0, 0, 0, 0],
               "episodes": ["A", "A", "B", "B"], "anchors": ["hall", "kitchen", "hall", "garden"]}})");
  json a = EvaluateAdvantageCase(doc);
  const double want[] = {0.75, 0.5, -0.75, -0.5};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(a["advantages"][i][0].get<double>(), want[i], 1e-15) << i;
  doc["inputs"]["anchors"] = {"hall", "kitchen", "hall", 1.5};
  EXPECT_THROW(EvaluateAdvantageCase(doc), ConfigError);
}

void ExpectConfigError(const json& doc, const std::string& needle, bool loss = true) {
  try {
    loss ? EvaluateLossCase(doc, "case.json") : EvaluateAdvantageCase(doc, "case.json");
    ADD_FAILURE() << "no error for " << doc.dump();
  } catch (const ConfigError& e) {
    std::string m = std::string(e.what()) + " | " + e.hint();
    EXPECT_NE(m.find(needle), std::string::npos) << m;
  }
}

TEST(LossCommand, UnknownKeysAndShapeMismatchesAreConfigErrors) {
  json doc = SmallLoss();
  doc["loss"]["clip_hihg"] = 0.3;
  ExpectConfigError(doc, "unknown key 'loss.clip_hihg' (did you mean 'clip_high'?)");
  doc = SmallLoss();
  doc["loss"]["engine"] = json::parse(R"({"kind": "tis", "capp": 3})");
  ExpectConfigError(doc, "'loss.engine.capp'");
  doc = SmallLoss();
  doc["kl"] = json::parse(R"({"estimator": "k9"})");
  ExpectConfigError(doc, "k3");
  doc = SmallLoss();
  doc["extra"] = 1;
  ExpectConfigError(doc, "unknown key 'extra'");
  doc = SmallLoss();
  doc["inputs"]["mask"] = json::parse("[[1, 1, 0]]");
  ExpectConfigError(doc, "unknown key 'mask'");
  doc = SmallLoss();
  doc["inputs"]["old_log_prob"] = json::parse("[[-1.2, -0.4]]");
  ExpectConfigError(doc, "old_log_prob has shape [1, 2], expected [1, 3]");
  doc = SmallLoss();
  doc["inputs"]["log_prob"] = json::parse("[[-1.0, -0.5], [0.1]]");
  ExpectConfigError(doc, "ragged");
  doc = SmallLoss();
  doc["inputs"]["advantages"] = json::parse("[1, 2]");
  ExpectConfigError(doc, "advantages has shape [2]");
  doc = SmallLoss();
  doc["inputs"]["response_mask"] = json::parse("[[1, 2, 0]]");
  ExpectConfigError(doc, "0/1");
  doc = SmallLoss();
  doc["inputs"]["log_prob"][0][0] = "big";
  ExpectConfigError(doc, "where a number is expected");

  json adv = json::parse(R"({"advantage": {"estimator": "rloo", "std_eps": 0.1},
    "inputs": {"scores": [1, 0], "groups": [0, 0], "response_mask": [[1], [1]]}})");
  EXPECT_NO_THROW(EvaluateAdvantageCase(adv));
  adv["advantage"]["lamda"] = 0.9;
  ExpectConfigError(adv, "did you mean 'lambda'", false);
  adv["advantage"].erase("lamda");
  adv["inputs"]["groups"] = json::parse("[0]");
  ExpectConfigError(adv, "1 ids for 2 responses", false);
  adv["inputs"]["groups"] = json::parse("[0, 0]");
  adv["inputs"]["response_mask"] = json::parse("[[1], [1], [1]]");
  ExpectConfigError(adv, "response_mask has shape [3, 1]", false);
}

TEST(LossCommand, ExitCodesAndStdinThroughTheBinary) {
  json bad = SmallLoss();
  bad["loss"]["clip_hihg"] = 0.3;
  Process p = RunRlid("loss --json " + WriteCase(bad, "bad"));
  EXPECT_EQ(p.exit_code, 2) << p.out;
  EXPECT_NE(p.out.find("clip_hihg"), std::string::npos) << p.out;
  json shape = SmallLoss();
  shape["inputs"]["old_log_prob"] = json::parse("[[-1.2]]");
  p = RunRlid("loss --json " + WriteCase(shape, "shape"));
  EXPECT_EQ(p.exit_code, 2) << p.out;
  p = RunRlid("advantage --json /nonexistent/case.json");
  EXPECT_EQ(p.exit_code, 3) << p.out;
  // `-` reads the case from stdin and prints the same result as in-process.
  std::string path = WriteCase(SmallLoss(), "stdin");
  p = RunRlid("loss --json - < " + path);
  ASSERT_EQ(p.exit_code, 0) << p.out;
  EXPECT_EQ(json::parse(p.out), EvaluateLossCase(SmallLoss()));
}

}  // namespace
}  // namespace rlid::cli
