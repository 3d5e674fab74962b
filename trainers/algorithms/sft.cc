#include "trainers/algorithms/sft.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "core/check.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/interrupt.h"
#include "core/log.h"
#include "core/rng.h"
#include "policy/model/checkpoint.h"
#include "policy/reading/scoring.h"
#include "trainers/runtime/diagnostics.h"

namespace rlid::trainers {
namespace fs = std::filesystem;

SftResult RunSft(Run& s, bool quiet) {
  const SftConfig& c = s.cfg.sft;
  SftResult result;

  // ---- demonstrations ----------------------------------------------------------
  std::vector<agents::EpisodeSpec> specs;
  for (int64_t i = 0; i < c.episodes; ++i) {
    agents::EpisodeSpec spec;
    spec.env_seed = envs::SplitSeed(envs::Split::kTrain, static_cast<uint64_t>(i));
    spec.stream = (uint64_t{1} << 41) + static_cast<uint64_t>(i);
    specs.push_back(spec);
  }
  agents::Chooser oracle = [&](const envs::State& state, const agents::StepData& step, Rng& rng) {
    auto* o = dynamic_cast<const envs::OracleState*>(&state);
    if (!o)
      throw ConfigError(
          fmt::format("env '{}' has no oracle; rlid sft needs one", s.env->Info().name));
    if (rng.Bernoulli(c.random_action_frac))
      return static_cast<int>(rng.UniformInt(step.menu.size()));
    auto best = o->OptimalActions();
    if (best.empty()) return static_cast<int>(rng.UniformInt(step.menu.size()));
    int idx = step.menu.IndexOfAction(best[rng.UniformInt(best.size())]);
    RLID_CHECK_GE(idx, 0, "oracle action not on the menu");
    return idx;
  };
  agents::AgentContext ctx = s.Agent(policy::Plane::kDecision, 0);
  Progress demos("sft demonstrations (oracle episodes)", c.episodes, !quiet);
  ctx.on_episode_end = [&](int64_t done, int64_t) { demos.Update(done); };
  agents::Budget demo_budget;
  auto episodes = agents::RunScriptedEpisodes(ctx, specs, envs::Split::kTrain, oracle, demo_budget);
  s.recorder().Episodes(episodes, ctx);
  std::vector<const agents::StepData*> steps;
  for (const auto& e : episodes) {
    result.demo_success += e.success;
    for (const auto& st : e.steps) steps.push_back(&st);
  }
  result.demo_success /= std::max<size_t>(episodes.size(), 1);
  if (auto w = DemonstrationsWarning(result.demo_success, c.random_action_frac)) spdlog::warn("sft: {}", *w);
  result.examples = static_cast<int64_t>(steps.size());
  if (steps.empty())
    throw ConfigError("rlid sft: the demonstrations contain no decisions", "raise sft.episodes");

  // With reasoning prompts, the same states as arms without reasoning see them
  // (plain prompt, label readout right after the answer prefix).
  const bool plain = s.cfg.prompt.reasoning && c.plain_weight > 0 && c.label_weight > 0;
  std::vector<agents::StepData> plain_steps;
  if (plain) {
    policy::PromptConfig pc = s.cfg.prompt;
    pc.reasoning = false;
    const policy::PromptRenderer plain_renderer(pc, s.tokenizer);
    for (const auto* st : steps) {
      agents::StepData p;
      p.menu = st->menu;
      std::vector<std::string> memory;
      for (const auto& r : st->memory) memory.push_back(r.item.content);
      p.history = st->history;
      p.prompt = plain_renderer.Render(s.env->Instructions(), st->observation, memory, st->menu,
                                       policy::Plane::kDecision, st->history);
      plain_steps.push_back(std::move(p));
    }
  }

  // ---- training ----------------------------------------------------------------
  const int64_t N = result.examples;
  const int64_t steps_per_epoch = (N + c.batch_size - 1) / c.batch_size;
  OptimConfig oc = s.cfg.trainer.optim;
  oc.lr = c.lr;
  oc.schedule = "cosine";
  oc.warmup_steps = std::min<int64_t>(20, steps_per_epoch);
  auto trainable = TrainableParameters(s.model);
  Optimizer opt(trainable.tensors, oc, c.epochs * steps_per_epoch, trainable.names);
  const auto ropts = agents::ReadoutOptionsFor(s.cfg.readout, false);
  Rng shuffle = Rng::Stream(s.cfg.run.seed, "sft_batches");
  s.model->train();
  int64_t step_no = 0;
  Progress progress("sft steps", c.epochs * steps_per_epoch, !quiet);
  for (int64_t epoch = 0; epoch < c.epochs; ++epoch) {
    auto perm = shuffle.Permutation(static_cast<int>(N));
    double epoch_loss = 0;
    int64_t batches = 0;
    for (int64_t b0 = 0; b0 < N; b0 += c.batch_size) {
      ThrowIfInterrupted();
      int64_t b1 = std::min(N, b0 + c.batch_size);
      std::vector<policy::ReadoutRequest> reqs, plain_reqs;
      // One LM pass covers the prompt text (lm_weight) and the answer (answer_weight).
      std::vector<policy::ScoreRequest> texts;
      std::vector<int64_t> targets, prompt_len;
      const double flops_before = s.budget.update.flops;
      for (int64_t k = b0; k < b1; ++k) {
        const auto* st = steps[perm[k]];
        reqs.push_back(agents::ReadoutRequestFor(*s.renderer, *st, s.cfg.readout, false));
        targets.push_back(st->item);
        if (plain)
          plain_reqs.push_back(
              agents::ReadoutRequestFor(*s.renderer, plain_steps[perm[k]], s.cfg.readout, false));
        const auto& p = st->prompt.tokens;
        std::vector<policy::TokenId> rest(p.begin() + 1, p.end());
        // With reasoning prompts the answer is the worked scratchpad, then the action.
        auto answer = s.renderer->AnswerTokens(st->menu.items[st->item], c.answer == "command",
                                               st->readout_suffix.empty() ? "" : st->response_text);
        rest.insert(rest.end(), answer.begin(), answer.end());
        texts.push_back({{p.front()}, rest});
        prompt_len.push_back(static_cast<int64_t>(p.size()) - 1);
      }
      torch::Tensor loss = torch::zeros({}, torch::TensorOptions().device(s.device));
      if (c.label_weight > 0) {
        auto rb = policy::Readout(s.model, reqs, ropts);
        s.budget.update.AddForward(s.model->config(), rb.cost);
        auto t = torch::tensor(targets, torch::kInt64).to(rb.log_p.device());
        // NLL of the demonstrated decision: -log p(a|s), or with a scratchpad
        // the joint -(log π(z|s) + log p(a|s,z)).
        loss = loss + c.label_weight * -(rb.log_p.gather(1, t.unsqueeze(1)).squeeze(1) + rb.span_logp).mean();
        if (plain) {
          auto pb = policy::Readout(s.model, plain_reqs, ropts);
          s.budget.update.AddForward(s.model->config(), pb.cost);
          loss = loss + c.label_weight * c.plain_weight * -pb.log_p.gather(1, t.unsqueeze(1)).mean();
        }
      }
      if (c.answer_weight > 0 || c.lm_weight > 0) {
        auto sb = policy::ScoreResponses(s.model, texts);
        s.budget.update.AddForward(s.model->config(), sb.cost);
        auto pos = torch::arange(sb.logp.size(1), torch::kInt64).unsqueeze(0).to(sb.logp.device());
        auto is_answer =
            pos >= torch::tensor(prompt_len, torch::kInt64).unsqueeze(1).to(sb.logp.device());
        auto answer_mask = sb.mask * is_answer.to(sb.mask.scalar_type());
        auto prompt_mask = sb.mask - answer_mask;
        if (c.answer_weight > 0)
          loss = loss +
                 c.answer_weight * -(sb.logp * answer_mask).sum() / answer_mask.sum().clamp_min(1);
        if (c.lm_weight > 0)
          loss =
              loss + c.lm_weight * -(sb.logp * prompt_mask).sum() / prompt_mask.sum().clamp_min(1);
      }
      CheckFinite(loss, "sft loss", epoch);
      opt.ZeroGrad();
      loss.backward();
      s.budget.update.backwards += 1;  // one backward through both forwards: 2x their FLOPs
      s.budget.update.flops += 2 * (s.budget.update.flops - flops_before);
      opt.Step(step_no++, epoch);
      epoch_loss += loss.item<double>();
      ++batches;
      progress.Update(step_no, fmt::format("epoch {}/{} loss {:.4f}", epoch + 1, c.epochs,
                                           epoch_loss / static_cast<double>(batches)));
    }
    result.final_loss = epoch_loss / std::max<int64_t>(batches, 1);
    Metrics m = {{"sft/loss", result.final_loss}, {"charts/lr", opt.current_lr()}};
    for (const auto& kv : s.budget.Metrics()) m.push_back(kv);
    s.recorder().Metrics(epoch, m);
    if (!quiet)
      spdlog::info("sft epoch {}/{}: loss {:.4f}", epoch + 1, c.epochs, result.final_loss);
  }

  // ---- evaluation and checkpoint -------------------------------------------------
  s.SyncSampler();  // a reasoning decision plane made its rollout engine for the demonstrations
  const int64_t n_eval = s.cfg.trainer.eval_episodes;
  result.decision_greedy = Evaluate(s.Agent(policy::Plane::kDecision, c.epochs),
                                    policy::Plane::kDecision, n_eval, true, s.budget, &s.recorder());
  result.token_greedy = Evaluate(s.Agent(policy::Plane::kToken, c.epochs), policy::Plane::kToken,
                                 n_eval, true, s.budget, &s.recorder());
  Metrics m = {{"eval/success", result.decision_greedy.success},
               {"eval/token_success", result.token_greedy.success},
               {"eval/token_invalid_rate", result.token_greedy.invalid_rate},
               {"sft/demo_success", result.demo_success}};
  for (const auto& kv : s.budget.Metrics()) m.push_back(kv);
  s.recorder().Metrics(c.epochs, m);
  fs::path dir = fs::path(s.dir) / "checkpoints" / "sft";
  policy::SaveCheckpoint(
      dir.string(), s.model, s.tokenizer,
      {{"kind", "sft"},
       {"examples", result.examples},
       {"seed", s.cfg.run.seed},
       {"config_toml", s.cfg.raw.ResolvedToml()}});
  s.recorder().Checkpoint(c.epochs, dir.string());
  s.recorder().Flush();
  result.checkpoint = dir.string();
  return result;
}

}  // namespace rlid::trainers
