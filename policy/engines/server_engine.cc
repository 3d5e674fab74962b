#include "policy/engines/server_engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/http.h"
#include "core/rng.h"
#include "policy/engines/engine_error.h"
#include "policy/engines/probe.h"
#include "policy/engines/vllm_server.h"
#include "policy/engines/weight_sync.h"

namespace rlid::policy {

using nlohmann::json;

namespace {

// One sample being generated, possibly over several requests.
struct Row {
  const std::vector<TokenId>* prompt = nullptr;
  uint64_t seed = 0;
  SampleResult* out = nullptr;
  bool done = false;
};

HttpRequest Post(const ServerTarget& t, const std::string& path, const json& body, double timeout_s) {
  return ServerPost(t, path, body.dump(), timeout_s);
}

[[noreturn]] void Fail(const std::string& engine, const ServerTarget& t, const std::string& what) {
  throw EngineError(fmt::format("rollout engine \"{}\" at {}: {}", engine, t.base_url, what),
                    t.log_hint.empty() ? "check that the server runs and serves model '" + t.model + "'"
                                       : t.log_hint);
}

json ParseBody(const std::string& engine, const ServerTarget& t, const HttpResponse& r) {
  if (!r.ok()) Fail(engine, t, r.Describe());
  try {
    return json::parse(r.body);
  } catch (const json::exception& e) {
    Fail(engine, t, fmt::format("the answer is not JSON ({}): {}", e.what(), r.body.substr(0, 200)));
  }
}

// The logit bias that keeps padded embedding rows (ids at or above
// options.vocab_limit) from being sampled, as rlid's engine never samples
// them: -100, the strongest a server accepts. Null when there are none.
json PaddedIdsBias(const SamplerOptions& o, int64_t vocab) {
  if (o.vocab_limit <= 0 || o.vocab_limit >= vocab) return nullptr;
  json bias = json::object();
  for (int64_t id = o.vocab_limit; id < vocab; ++id) bias[std::to_string(id)] = -100;
  return bias;
}

// The sampling request of one row's next round.
json CompletionBody(const ServerTarget& t, const SamplerOptions& o, const json& bias, const Row& row, int round,
                    const StopRule& stop) {
  std::vector<TokenId> prompt = *row.prompt;
  prompt.insert(prompt.end(), row.out->tokens.begin(), row.out->tokens.end());
  json b = {{"model", t.model},
            {"prompt", prompt},
            {"max_tokens", o.max_new_tokens - static_cast<int>(row.out->tokens.size())},
            {"temperature", o.temperature},
            {"top_p", o.top_p},
            {"top_k", o.top_k > 0 ? o.top_k : -1},
            {"n", 1},
            // vLLM takes a signed 64-bit seed; the row's stream and the round make it.
            {"seed", static_cast<int64_t>(Rng::DeriveSeed(row.seed, "engine_round", round) >> 1)},
            {"logprobs", 0},
            {"return_token_ids", true},
            {"return_tokens_as_token_ids", true},  // no detokenising: the server has no tokenizer
            {"ignore_eos", true},
            {"skip_special_tokens", false}};
  if (!stop.at.empty()) b["stop_token_ids"] = stop.at;
  if (!bias.is_null()) b["logit_bias"] = bias;
  return b;
}

// Appends what the server sampled to the row; returns its finish reason.
std::string Absorb(const std::string& engine, const ServerTarget& t, const json& body, Row& row) {
  try {
    const json& c = body.at("choices").at(0);
    const auto ids = c.at("token_ids").get<std::vector<TokenId>>();
    const json& lps = c.at("logprobs").at("token_logprobs");
    if (lps.size() != ids.size())
      Fail(engine, t, fmt::format("{} token ids but {} log-probs", ids.size(), lps.size()));
    for (size_t i = 0; i < ids.size(); ++i) {
      row.out->tokens.push_back(ids[i]);
      row.out->logprobs.push_back(lps[i].is_null() ? std::nanf("") : lps[i].get<float>());
    }
    return c.value("finish_reason", std::string());
  } catch (const json::exception& e) {
    Fail(engine, t,
         fmt::format("malformed completion ({}): {}", e.what(), body.dump().substr(0, 300)));
  }
}

}  // namespace

HttpRequest ServerPost(const ServerTarget& target, const std::string& path, std::string body, double timeout_s) {
  HttpRequest r;
  r.url = target.base_url + path;
  r.body = std::move(body);
  r.timeout_s = timeout_s;
  if (!target.api_key.empty()) r.headers.push_back("Authorization: Bearer " + target.api_key);
  return r;
}

ForwardCost ServerWork(const std::vector<std::vector<TokenId>>& prompts,
                       const std::vector<std::vector<SampleResult>>& results) {
  ForwardCost c;
  int64_t rounds = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const auto P = static_cast<int64_t>(prompts[p].size());
    c.tokens += P;
    c.attention_pairs += CausalPairs(P);
    c.logit_rows += 1;  // the first logits, shared by the prompt's rows
    for (const auto& r : results[p]) {
      const auto g = static_cast<int64_t>(r.tokens.size());
      rounds = std::max(rounds, g - 1);
      for (int64_t k = 0; k + 1 < g; ++k) {  // feeds token k, which sees P + k + 1 keys
        c.tokens += 1;
        c.attention_pairs += P + k + 1;
        c.logit_rows += 1;
      }
    }
  }
  c.calls = prompts.empty() ? 0 : 1 + rounds;
  return c;
}

ServerEngine::ServerEngine(std::string name, const ModelConfig& config, SamplerOptions options,
                           ServerOptions server, ServerTarget target, std::unique_ptr<WeightSync> sync,
                           std::unique_ptr<VllmServer> owned)
    : name_(std::move(name)),
      config_(config),
      options_(std::move(options)),
      server_(server),
      target_(std::move(target)),
      owned_(std::move(owned)),
      sync_(std::move(sync)) {
  SetOptions(options_);
}

ServerEngine::~ServerEngine() = default;

void ServerEngine::SetOptions(const SamplerOptions& o) {
  if (!(o.temperature >= 0.0) || !(o.top_p > 0.0 && o.top_p <= 1.0) || o.top_k < 0 || o.max_new_tokens < 1)
    throw ConfigError(fmt::format("rollout engine \"{}\": invalid sampling settings (temperature {}, top_p {}, "
                                  "top_k {}, max_new_tokens {})",
                                  name_, o.temperature, o.top_p, o.top_k, o.max_new_tokens));
  if (o.dtype != options_.dtype)
    throw InternalError("ServerEngine::SetOptions cannot change the engine dtype");
  options_ = o;
}

std::vector<std::vector<SampleResult>> ServerEngine::Sample(const std::vector<std::vector<TokenId>>& prompts,
                                                            int n, const StopRule& stop,
                                                            const std::vector<uint64_t>& row_seeds) {
  if (n < 1) throw ConfigError(fmt::format("samples per prompt must be >= 1, found {}", n));
  if (row_seeds.size() != prompts.size() * static_cast<size_t>(n))
    throw InternalError(fmt::format("{} row seeds for {} prompts x {} samples", row_seeds.size(), prompts.size(), n));
  if (stop.done && stop.at.empty())
    throw ConfigError(fmt::format("rollout engine \"{}\" needs the tokens a stop rule can fire at", name_),
                      "a server cannot call rlid back after every token");
  std::vector<std::vector<SampleResult>> results(prompts.size(), std::vector<SampleResult>(n));
  std::vector<Row> rows;
  for (size_t p = 0; p < prompts.size(); ++p) {
    if (prompts[p].empty()) throw ConfigError(fmt::format("sampler prompt {} is empty", p));
    for (int j = 0; j < n; ++j) rows.push_back({&prompts[p], row_seeds[p * n + j], &results[p][j], false});
  }
  const json bias = PaddedIdsBias(options_, config_.vocab_size);
  for (int round = 0;; ++round) {
    std::vector<Row*> open;
    std::vector<HttpRequest> requests;
    for (auto& r : rows)
      if (!r.done) {
        open.push_back(&r);
        requests.push_back(Post(target_, "/completions",
                                CompletionBody(target_, options_, bias, r, round, stop),
                                server_.request_timeout_s));
      }
    if (open.empty()) break;
    const auto answers = HttpPerform(requests, server_.max_parallel_requests);
    for (size_t i = 0; i < open.size(); ++i) {
      Row& r = *open[i];
      if (!answers[i].ok()) CheckOwnedServer();
      const std::string finish = Absorb(name_, target_, ParseBody(name_, target_, answers[i]), r);
      const auto& toks = r.out->tokens;
      const bool full = static_cast<int>(toks.size()) >= options_.max_new_tokens;
      const bool at_stop = finish == "stop" && !toks.empty();
      if (at_stop && (!stop.done || stop.done(toks))) {
        r.out->finish = "stop";
        r.done = true;
      } else if (full || finish != "stop") {
        // max_new_tokens, or the server's own limit (max_model_len).
        r.out->finish = "length";
        r.done = true;
      }
    }
  }
  for (const auto& p : prompts) prompt_tokens_ += static_cast<int64_t>(p.size());
  for (const auto& group : results)
    for (const auto& r : group) tokens_generated_ += static_cast<int64_t>(r.tokens.size());
  work_ += ServerWork(prompts, results);
  return results;
}

void ServerEngine::CheckOwnedServer() {
  if (!owned_ || owned_->Alive()) return;
  throw EngineError(fmt::format("the vLLM server rlid started for this run died; the end of its log ({}):{}",
                                owned_->options().log_path, owned_->LogTail()),
                    "out of memory? a smaller [sampler.vllm] max_model_len or cpu_kv_cache_gib needs less");
}

std::vector<float> ServerEngine::PromptLogProbs(const std::vector<TokenId>& tokens) {
  json b = {{"model", target_.model}, {"prompt", tokens}, {"max_tokens", 1},   {"temperature", 1.0},
            {"prompt_logprobs", 0},   {"return_token_ids", true}, {"return_tokens_as_token_ids", true},
            {"ignore_eos", true}};
  const HttpResponse answer = HttpPerform(Post(target_, "/completions", b, server_.request_timeout_s));
  if (!answer.ok()) CheckOwnedServer();
  const json body = ParseBody(name_, target_, answer);
  std::vector<float> out;
  try {
    const json& pl = body.at("choices").at(0).at("prompt_logprobs");
    for (size_t i = 1; i < tokens.size(); ++i) {
      // Keyed by the token id ("17"), or "token_id:17" where the server says so.
      const json& entry = pl.at(i);
      const std::string id = std::to_string(tokens[i]);
      const json& lp = entry.contains(id) ? entry.at(id) : entry.at("token_id:" + id);
      out.push_back(lp.at("logprob").get<float>());
    }
  } catch (const json::exception& e) {
    Fail(name_, target_, fmt::format("malformed prompt_logprobs ({}): {}", e.what(), body.dump().substr(0, 300)));
  }
  return out;
}

EngineSync ServerEngine::Sync(TransformerLM& model, int64_t version) {
  const double t0 = MonotonicSeconds();
  EngineSync report;
  report.version = version;
  target_ = sync_->Apply(model, version, target_, report);
  if (sync_->follows()) {
    report.probe_max_abs_diff = ProbeMaxAbsDiff(*this, model);
    if (!(report.probe_max_abs_diff <= server_.probe_tolerance))
      Fail(name_, target_,
           fmt::format("after loading version {} as '{}', the engine's log-probs on the probe differ from the "
                       "trainer's by up to {:.4g} (tolerance {}): it does not serve the weights it was sent",
                       version, target_.model, report.probe_max_abs_diff, server_.probe_tolerance));
  }
  report.seconds = MonotonicSeconds() - t0;
  return report;
}

}  // namespace rlid::policy
