// `rlid loss --json FILE|-` and `rlid advantage --json FILE|-`: evaluate the
// pure loss / advantage functions on one JSON case (float64) and print the
// result as JSON, so numbers can be checked against reference implementations.
// Config sections go through the same Load() as TOML experiment files (via a
// converted TOML document), so the keys, defaults and errors are identical.
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/command.h"
#include "cli/json_output.h"
#include "cli/loss_json.h"
#include "core/config.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/strings.h"
#include "trainers/losses/advantages.h"
#include "trainers/losses/kl.h"
#include "trainers/losses/losses.h"
#include "trainers/losses/tensor_checks.h"

namespace rlid::cli {
namespace {

using nlohmann::json;

// ---- JSON -> config --------------------------------------------------------------

std::optional<double> NonFinite(const std::string& s) {
  std::string l = ToLower(s);
  if (l == "inf" || l == "+inf" || l == "infinity" || l == "+infinity")
    return std::numeric_limits<double>::infinity();
  if (l == "-inf" || l == "-infinity") return -std::numeric_limits<double>::infinity();
  if (l == "nan") return std::numeric_limits<double>::quiet_NaN();
  return std::nullopt;
}

std::string TomlFloat(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", x);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

std::string TomlScalar(const json& v, const std::string& path) {
  switch (v.type()) {
    case json::value_t::boolean:
      return v.get<bool>() ? "true" : "false";
    case json::value_t::number_integer:
      return std::to_string(v.get<int64_t>());
    case json::value_t::number_unsigned: {
      uint64_t u = v.get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::to_string(u);
      return TomlFloat(static_cast<double>(u));
    }
    case json::value_t::number_float:
      return TomlFloat(v.get<double>());
    case json::value_t::string: {
      if (auto x = NonFinite(v.get<std::string>())) return TomlFloat(*x);
      return json(v.get<std::string>()).dump(-1, ' ', /*ensure_ascii=*/true);
    }
    case json::value_t::array: {
      std::vector<std::string> items;
      for (const auto& el : v) items.push_back(TomlScalar(el, path));
      return "[" + Join(items, ", ") + "]";
    }
    default:
      throw ConfigError(fmt::format("'{}' must be a number, string, boolean or array, found {}",
                                    path, v.type_name()));
  }
}

void AppendTable(const json& obj, const std::string& path, const std::string& header,
                 std::string& out) {
  out += header + "\n";
  for (const auto& [key, value] : obj.items())
    if (!value.is_object())
      out += json(key).dump(-1, ' ', true) + " = " + TomlScalar(value, path + "." + key) + "\n";
  for (const auto& [key, value] : obj.items())
    if (value.is_object())
      AppendTable(value, path + "." + key,
                  header.substr(0, header.size() - 1) + "." + json(key).dump(-1, ' ', true) + "]",
                  out);
}

// The document's config sections as a Config (errors cite `source`).
Config ConfigFromJson(const json& doc, const std::vector<std::string>& sections,
                      const std::string& source) {
  std::string toml;
  for (const auto& name : sections) {
    if (!doc.contains(name)) continue;
    const json& section = doc.at(name);
    if (!section.is_object())
      throw ConfigError(
          fmt::format("{}: '{}' must be an object, found {}", source, name, section.type_name()));
    AppendTable(section, name, "[" + json(name).dump() + "]", toml);
  }
  return Config::FromConverted(toml, source);
}

void CheckKeys(const json& obj, const std::vector<std::string>& known, const std::string& where,
               const std::string& source) {
  for (const auto& [key, _] : obj.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    throw ConfigError(
        fmt::format("{}: unknown key '{}'{} in {}", source, key, DidYouMean(key, known), where),
        fmt::format("valid keys there: {}", Join(known, ", ")));
  }
}

// ---- JSON <-> tensors ------------------------------------------------------------

double Number(const json& v, const std::string& name, bool allow_bool) {
  if (v.is_number()) return v.get<double>();
  if (v.is_boolean() && allow_bool) return v.get<bool>() ? 1.0 : 0.0;
  if (v.is_string()) {
    if (auto x = NonFinite(v.get<std::string>())) return *x;
  }
  throw ConfigError(
      fmt::format("{} holds {} '{}' where a number is expected", name, v.type_name(), v.dump()),
      allow_bool ? "use 0/1, true/false" : "use a number or \"inf\", \"-inf\", \"nan\"");
}

torch::Tensor Vector(const json& v, const std::string& name, bool allow_bool = false) {
  if (!v.is_array())
    throw ConfigError(fmt::format("{} must be an array, found {}", name, v.type_name()));
  std::vector<double> data;
  for (const auto& x : v) {
    if (x.is_array()) throw ConfigError(fmt::format("{} must be a flat array [..]", name));
    data.push_back(Number(x, name, allow_bool));
  }
  return torch::tensor(data, torch::kFloat64);
}

torch::Tensor Matrix(const json& v, const std::string& name, bool allow_bool = false) {
  if (!v.is_array() || v.empty() || !v[0].is_array())
    throw ConfigError(fmt::format(
        "{} must be a non-empty [B,T] array of arrays, found {}", name,
        v.is_array() ? (v.empty() ? "an empty array" : "a flat array") : v.type_name()));
  const size_t width = v[0].size();
  std::vector<double> data;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_array() || v[i].size() != width)
      throw ConfigError(fmt::format("{} is ragged: row 0 has {} entries, row {} has {}", name,
                                    width, i, v[i].is_array() ? v[i].size() : 0),
                        "every row is padded to the same width T");
    for (const auto& x : v[i]) data.push_back(Number(x, name, allow_bool));
  }
  return torch::tensor(data, torch::kFloat64)
      .reshape({static_cast<int64_t>(v.size()), static_cast<int64_t>(width)});
}

// [B] or [B,T].
torch::Tensor VectorOrMatrix(const json& v, const std::string& name) {
  if (v.is_array() && !v.empty() && v[0].is_array()) return Matrix(v, name);
  return Vector(v, name);
}

json ToJson(const torch::Tensor& t) {
  torch::Tensor c = t.detach().to(torch::kFloat64).contiguous();
  if (c.dim() == 1) {
    json out = json::array();
    auto a = c.accessor<double, 1>();
    for (int64_t i = 0; i < c.size(0); ++i) out.push_back(JsonNumber(a[i]));
    return out;
  }
  json out = json::array();
  for (int64_t i = 0; i < c.size(0); ++i) out.push_back(ToJson(c[i]));
  return out;
}

torch::Tensor Optional(const json& inputs, const std::string& key, bool allow_bool = false) {
  if (!inputs.contains(key)) return {};
  return Matrix(inputs.at(key), "inputs." + key, allow_bool);
}

const json& Inputs(const json& doc, const std::string& source) {
  if (!doc.contains("inputs") || !doc.at("inputs").is_object())
    throw ConfigError(fmt::format("{}: missing the 'inputs' object", source),
                      "see docs/losses.md for the case format");
  return doc.at("inputs");
}

// inputs.<key>: integer ids or names (groups; gigpo's episodes and anchors,
// where a name may be the observation text itself).
std::vector<int64_t> Ids(const json& v, const char* key) {
  if (!v.is_array())
    throw ConfigError(fmt::format("inputs.{} must be an array, found {}", key, v.type_name()));
  std::vector<int64_t> out;
  std::map<std::string, int64_t> names;
  for (const auto& g : v) {
    if (g.is_number_integer()) {
      out.push_back(g.get<int64_t>());
    } else if (g.is_number_float() && std::floor(g.get<double>()) == g.get<double>()) {
      out.push_back(static_cast<int64_t>(g.get<double>()));
    } else if (g.is_string()) {
      // Names map to ids that cannot collide with integer ids in the same list.
      auto [it, inserted] = names.emplace(g.get<std::string>(), 0);
      if (inserted) it->second = std::numeric_limits<int64_t>::min() + names.size();
      out.push_back(it->second);
    } else {
      throw ConfigError(fmt::format("inputs.{} holds {} '{}'; expected integer ids or names", key,
                                    g.type_name(), g.dump()));
    }
  }
  return out;
}

void RequireObject(const json& doc, const std::string& source) {
  if (!doc.is_object())
    throw ConfigError(
        fmt::format("{}: expected one JSON object, found {}", source, doc.type_name()));
}

}  // namespace

json JsonNumber(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return x;
}

json EvaluateLossCase(const json& doc, const std::string& source) {
  RequireObject(doc, source);
  CheckKeys(doc, {"loss", "kl", "inputs"}, "the top level", source);
  Config cfg = ConfigFromJson(doc, {"loss", "kl"}, source);
  trainers::LossConfig loss;
  trainers::KlConfig kl;
  loss.Load(cfg.Root().Section("loss"));
  kl.Load(cfg.Root().Section("kl"));
  cfg.CheckAllUsed();

  const json& inputs = Inputs(doc, source);
  CheckKeys(inputs,
            {"log_prob", "old_log_prob", "advantages", "response_mask", "rollout_log_prob",
             "ref_log_prob", "behav_log_prob"},
            "'inputs'", source);
  for (const char* key : {"log_prob", "old_log_prob", "advantages"})
    if (!inputs.contains(key))
      throw ConfigError(fmt::format("{}: inputs.{} is missing", source, key));
  trainers::PolicyLossInputs in;
  torch::Tensor log_prob = Matrix(inputs.at("log_prob"), "inputs.log_prob").requires_grad_(true);
  in.log_prob = log_prob;
  in.old_log_prob = Matrix(inputs.at("old_log_prob"), "inputs.old_log_prob");
  in.advantages = VectorOrMatrix(inputs.at("advantages"), "inputs.advantages");
  in.response_mask = Optional(inputs, "response_mask", /*allow_bool=*/true);
  in.rollout_log_prob = Optional(inputs, "rollout_log_prob");
  in.ref_log_prob = Optional(inputs, "ref_log_prob");
  in.behav_log_prob = Optional(inputs, "behav_log_prob");

  trainers::LossResult result = trainers::PolicyLoss(loss, kl, in);
  torch::Tensor grad;
  if (result.loss.requires_grad()) {
    auto grads = torch::autograd::grad({result.loss}, {log_prob}, {}, /*retain_graph=*/false,
                                       /*create_graph=*/false, /*allow_unused=*/true);
    grad = grads[0];
  }
  if (!grad.defined()) grad = torch::zeros_like(log_prob);
  json metrics = json::object();
  for (const auto& [name, value] : result.metrics) metrics[name] = JsonNumber(value);
  return {{"loss", JsonNumber(result.loss.item<double>())},
          {"grad_log_prob", ToJson(grad)},
          {"metrics", metrics}};
}

json EvaluateAdvantageCase(const json& doc, const std::string& source) {
  RequireObject(doc, source);
  CheckKeys(doc, {"advantage", "kl", "inputs"}, "the top level", source);
  Config cfg = ConfigFromJson(doc, {"advantage", "kl"}, source);
  trainers::AdvantageConfig adv;
  trainers::KlConfig kl;
  adv.Load(cfg.Root().Section("advantage"));
  kl.Load(cfg.Root().Section("kl"));
  cfg.CheckAllUsed();

  const json& inputs = Inputs(doc, source);
  CheckKeys(inputs,
            {"scores", "token_rewards", "groups", "episodes", "anchors", "response_mask", "values",
             "end_values", "log_prob", "old_log_prob", "ref_log_prob"},
            "'inputs'", source);
  trainers::AdvantageInputs in;
  if (inputs.contains("scores")) in.scores = Vector(inputs.at("scores"), "inputs.scores");
  in.token_rewards = Optional(inputs, "token_rewards");
  in.response_mask = Optional(inputs, "response_mask", /*allow_bool=*/true);
  in.values = Optional(inputs, "values");
  if (inputs.contains("end_values"))
    in.end_values = Vector(inputs.at("end_values"), "inputs.end_values");
  if (inputs.contains("groups")) in.groups = Ids(inputs.at("groups"), "groups");
  if (inputs.contains("episodes")) in.episodes = Ids(inputs.at("episodes"), "episodes");
  if (inputs.contains("anchors"))
    for (int64_t a : Ids(inputs.at("anchors"), "anchors"))
      in.anchors.push_back(static_cast<uint64_t>(a));

  if (kl.placement == trainers::KlPlacement::kReward && kl.coef > 0) {
    // r_t -= beta kl(log_prob, ref)_t on valid tokens, before the estimator runs.
    if (inputs.contains("log_prob") && inputs.contains("old_log_prob"))
      throw ConfigError(
          fmt::format("{}: give the rollout policy's log-probs once, as "
                      "inputs.log_prob or inputs.old_log_prob",
                      source));
    torch::Tensor policy = Optional(inputs, "log_prob");
    if (!policy.defined()) policy = Optional(inputs, "old_log_prob");
    torch::Tensor ref = Optional(inputs, "ref_log_prob");
    if (!policy.defined() || !ref.defined())
      throw ConfigError(
          fmt::format("{}: kl.placement = 'reward' with kl.coef > 0 needs "
                      "inputs.log_prob and inputs.ref_log_prob",
                      source));
    trainers::AdvantageInputs checked = trainers::CheckAdvantageInputs(adv, in);
    torch::Tensor rewards = trainers::TokenRewards(checked);
    trainers::RequireSameShape("inputs.ref_log_prob", ref, "the response mask", rewards);
    checked.token_rewards =
        trainers::KlShapedRewards(kl, rewards, policy, ref, checked.response_mask);
    checked.scores = torch::Tensor();
    in = checked;
  }
  trainers::AdvantageResult result = trainers::ComputeAdvantages(adv, in);
  return {{"advantages", ToJson(result.advantages)}, {"returns", ToJson(result.returns)}};
}

namespace {

json ReadJson(const std::string& path) {
  std::stringstream text;
  if (path == "-") {
    text << std::cin.rdbuf();
  } else {
    text << ReadRegularFile(path, kMaxJsonFileBytes, "loss input file");
  }
  try {
    return json::parse(text.str());
  } catch (const json::parse_error& e) {
    throw ConfigError(
        fmt::format("{} is not valid JSON: {}", path == "-" ? "<stdin>" : path, e.what()));
  }
}

class CaseCommand : public Command {
 public:
  using Evaluate = json (*)(const json&, const std::string&);
  explicit CaseCommand(Evaluate evaluate) : evaluate_(evaluate) {}
  void Setup(CLI::App& app) override {
    app.add_option("--json", path_, "the case as a JSON file, or - for stdin")->required();
    app.callback([this] {
      json doc = ReadJson(path_);
      std::cout << DumpJson(evaluate_(doc, path_ == "-" ? "<stdin>" : path_)) << "\n";
    });
  }

 private:
  Evaluate evaluate_;
  std::string path_;
};

const Registrar<CommandRegistry> kLoss(
    "loss", "evaluate a policy loss on a JSON case: loss, d loss / d log_prob, metrics",
    [] { return std::make_unique<CaseCommand>(&EvaluateLossCase); });
const Registrar<CommandRegistry> kAdvantage("advantage",
                                            "evaluate an advantage estimator on a JSON case", [] {
                                              return std::make_unique<CaseCommand>(
                                                  &EvaluateAdvantageCase);
                                            });

}  // namespace
}  // namespace rlid::cli
