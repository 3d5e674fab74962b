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
namespace {

// The decisions SFT clones. `steps` points into `episodes` (a moved vector
// keeps its elements in place); with reasoning prompts and a plain loss,
// `plain_steps[i]` is `*steps[i]` rendered without reasoning.
struct Demonstrations {
  std::vector<agents::EpisodeData> episodes;
  std::vector<const agents::StepData*> steps;
  std::vector<agents::StepData> plain_steps;
};

// The oracle's choice (an optimal action, ties broken at random), or with
// probability sft.random_action_frac a uniformly random one. With
// random_action_frac = 1 (a warm start that teaches the answer format, not
// the task) the env needs no oracle.
agents::Chooser OracleChooser(const Run& s) {
  return [&s](const envs::State& state, const agents::StepData& step, Rng& rng) {
    auto* o = dynamic_cast<const envs::OracleState*>(&state);
    if (!o && s.cfg.sft.random_action_frac < 1)
      throw ConfigError(
          fmt::format("env '{}' has no oracle; rlid sft needs one to demonstrate the task",
                      s.env->Info().name),
          "set sft.random_action_frac = 1 for a warm start that teaches the answer format only "
          "(uniformly random menu items, no oracle needed)");
    if (rng.Bernoulli(s.cfg.sft.random_action_frac))
      return static_cast<int>(rng.UniformInt(step.menu.size()));
    auto best = o->OptimalActions();
    if (best.empty()) return static_cast<int>(rng.UniformInt(step.menu.size()));
    int idx = step.menu.IndexOfAction(best[rng.UniformInt(best.size())]);
    RLID_CHECK_GE(idx, 0, "oracle action not on the menu");
    return idx;
  };
}

// sft.episodes oracle episodes on train seeds, recorded in the run; sets
// result.demo_success and result.examples.
Demonstrations OracleDemonstrations(Run& s, bool quiet, SftResult& result) {
  const SftConfig& c = s.cfg.sft;
  std::vector<agents::EpisodeSpec> specs;
  for (int64_t i = 0; i < c.episodes; ++i) {
    agents::EpisodeSpec spec;
    spec.env_seed = envs::SplitSeed(envs::Split::kTrain, static_cast<uint64_t>(i));
    spec.stream = (uint64_t{1} << 41) + static_cast<uint64_t>(i);
    specs.push_back(spec);
  }
  agents::Chooser oracle = OracleChooser(s);
  agents::AgentContext ctx = s.Agent(policy::Plane::kDecision, 0);
  Progress demos("sft demonstrations (oracle episodes)", c.episodes, !quiet);
  ctx.on_episode_end = [&](int64_t done, int64_t) { demos.Update(done); };
  agents::Budget demo_budget;
  Demonstrations d;
  d.episodes = agents::RunScriptedEpisodes(ctx, specs, envs::Split::kTrain, oracle, demo_budget);
  s.recorder().Episodes(d.episodes, ctx);
  for (const auto& e : d.episodes) {
    result.demo_success += e.success;
    for (const auto& st : e.steps) d.steps.push_back(&st);
  }
  result.demo_success /= std::max<size_t>(d.episodes.size(), 1);
  if (auto w = DemonstrationsWarning(result.demo_success, c.random_action_frac)) spdlog::warn("sft: {}", *w);
  result.examples = static_cast<int64_t>(d.steps.size());
  if (d.steps.empty())
    throw ConfigError("rlid sft: the demonstrations contain no decisions", "raise sft.episodes");
  return d;
}

// With reasoning prompts, the same states as arms without reasoning see them
// (plain prompt, label readout right after the answer prefix).
std::vector<agents::StepData> PlainSteps(const Run& s,
                                         const std::vector<const agents::StepData*>& steps) {
  policy::PromptConfig pc = s.cfg.prompt;
  pc.reasoning = false;
  const policy::PromptRenderer plain_renderer(pc, s.tokenizer);
  std::vector<agents::StepData> plain_steps;
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
  return plain_steps;
}

// One batch of demonstrated decisions in both planes' forms.
struct SftBatch {
  std::vector<policy::ReadoutRequest> reqs, plain_reqs;  // label readouts (plain: see PlainSteps)
  // One LM pass covers the prompt text (lm_weight) and the answer (answer_weight).
  std::vector<policy::ScoreRequest> texts;
  std::vector<int64_t> targets, prompt_len;  // demonstrated item; prompt tokens scored in texts
};

// The demonstrations perm[b0..b1) as one batch.
SftBatch MakeBatch(const Run& s, const Demonstrations& d, const std::vector<int>& perm, int64_t b0,
                   int64_t b1) {
  const SftConfig& c = s.cfg.sft;
  SftBatch b;
  for (int64_t k = b0; k < b1; ++k) {
    const auto* st = d.steps[perm[k]];
    b.reqs.push_back(agents::ReadoutRequestFor(*s.renderer, *st, s.cfg.readout, false));
    b.targets.push_back(st->item);
    if (!d.plain_steps.empty())
      b.plain_reqs.push_back(
          agents::ReadoutRequestFor(*s.renderer, d.plain_steps[perm[k]], s.cfg.readout, false));
    const auto& p = st->prompt.tokens;
    std::vector<policy::TokenId> rest(p.begin() + 1, p.end());
    // With reasoning prompts the answer is the worked scratchpad, then the action.
    auto answer =
        s.renderer->AnswerTokens(st->menu.items[st->item], c.answer == SftAnswer::kCommand,
                                 st->decision.readout_suffix.empty() ? "" : st->text.response_text);
    rest.insert(rest.end(), answer.begin(), answer.end());
    b.texts.push_back({{p.front()}, rest});
    b.prompt_len.push_back(static_cast<int64_t>(p.size()) - 1);
  }
  return b;
}

// loss + the decision-plane terms: label_weight * NLL of the demonstrated
// decision, -log p(a|s), or with a scratchpad the joint -(log π(z|s) +
// log p(a|s,z)); plus, with plain requests, plain_weight times the plain
// prompt's NLL.
torch::Tensor AddLabelLoss(Run& s, const SftBatch& b, const policy::ReadoutOptions& ropts,
                           torch::Tensor loss) {
  const SftConfig& c = s.cfg.sft;
  auto rb = policy::Readout(s.model, b.reqs, ropts);
  auto t = torch::tensor(b.targets, torch::kInt64).to(rb.log_p.device());
  loss = loss +
         c.label_weight * -(rb.log_p.gather(1, t.unsqueeze(1)).squeeze(1) + rb.span_logp).mean();
  if (!b.plain_reqs.empty()) {
    auto pb = policy::Readout(s.model, b.plain_reqs, ropts);
    loss = loss + c.label_weight * c.plain_weight * -pb.log_p.gather(1, t.unsqueeze(1)).mean();
  }
  return loss;
}

// loss + the token-plane terms from one LM pass: answer_weight * mean NLL of
// the answer tokens, lm_weight * mean NLL of the prompt tokens.
torch::Tensor AddTextLoss(Run& s, const SftBatch& b, torch::Tensor loss) {
  const SftConfig& c = s.cfg.sft;
  auto sb = policy::ScoreResponses(s.model, b.texts);
  auto pos = torch::arange(sb.logp.size(1), torch::kInt64).unsqueeze(0).to(sb.logp.device());
  auto is_answer =
      pos >= torch::tensor(b.prompt_len, torch::kInt64).unsqueeze(1).to(sb.logp.device());
  auto answer_mask = sb.mask * is_answer.to(sb.mask.scalar_type());
  auto prompt_mask = sb.mask - answer_mask;
  if (c.answer_weight > 0)
    loss = loss + c.answer_weight * -(sb.logp * answer_mask).sum() / answer_mask.sum().clamp_min(1);
  if (c.lm_weight > 0)
    loss = loss + c.lm_weight * -(sb.logp * prompt_mask).sum() / prompt_mask.sum().clamp_min(1);
  return loss;
}

// The optimisation: sft.epochs passes over shuffled batches of the
// demonstrations, a cosine LR schedule over all of them.
class SftTraining {
 public:
  SftTraining(Run& s, const Demonstrations& d, bool quiet)
      : s_(s),
        c_(s.cfg.sft),
        d_(d),
        n_(static_cast<int64_t>(d.steps.size())),
        steps_per_epoch_((n_ + c_.batch_size - 1) / c_.batch_size),
        opt_(MakeOptimizer()),
        ropts_(agents::ReadoutOptionsFor(s.cfg.readout, false)),
        shuffle_(Rng::Stream(s.cfg.run.seed, "sft_batches")),
        progress_("sft steps", c_.epochs * steps_per_epoch_, !quiet) {
    s_.model->train();
  }

  // One pass over the demonstrations; returns the mean batch loss.
  double Epoch(int64_t epoch) {
    auto perm = shuffle_.Permutation(static_cast<int>(n_));
    double epoch_loss = 0;
    int64_t batches = 0;
    for (int64_t b0 = 0; b0 < n_; b0 += c_.batch_size) {
      ThrowIfInterrupted();
      int64_t b1 = std::min(n_, b0 + c_.batch_size);
      epoch_loss += Step(MakeBatch(s_, d_, perm, b0, b1), epoch);
      ++batches;
      progress_.Update(step_no_, fmt::format("epoch {}/{} loss {:.4f}", epoch + 1, c_.epochs,
                                             epoch_loss / static_cast<double>(batches)));
    }
    return epoch_loss / std::max<int64_t>(batches, 1);
  }

  double current_lr() const { return opt_.current_lr(); }

 private:
  Optimizer MakeOptimizer() {
    OptimConfig oc = s_.cfg.trainer.optim;
    oc.lr = c_.lr;
    oc.schedule = LrSchedule::kCosine;
    oc.warmup_steps = std::min<int64_t>(20, steps_per_epoch_);
    auto trainable = TrainableParameters(s_.model);
    return Optimizer(trainable.tensors, oc, c_.epochs * steps_per_epoch_, trainable.names);
  }

  // The batch's loss, one backward through all its forwards (booked as update
  // work) and an optimizer step; returns the loss.
  double Step(const SftBatch& b, int64_t epoch) {
    agents::ComputeScope compute(s_.budget.update, {s_.model},
                                 agents::ComputeScope::Pass::kForwardBackward);
    torch::Tensor loss = torch::zeros({}, torch::TensorOptions().device(s_.device));
    if (c_.label_weight > 0) loss = AddLabelLoss(s_, b, ropts_, loss);
    if (c_.answer_weight > 0 || c_.lm_weight > 0) loss = AddTextLoss(s_, b, loss);
    CheckFinite(loss, "sft loss", epoch);
    opt_.ZeroGrad();
    loss.backward();
    opt_.Step(step_no_++, epoch);
    return loss.item<double>();
  }

  Run& s_;
  const SftConfig& c_;
  const Demonstrations& d_;
  const int64_t n_, steps_per_epoch_;
  Optimizer opt_;
  const policy::ReadoutOptions ropts_;
  Rng shuffle_;
  int64_t step_no_ = 0;
  Progress progress_;
};

// Greedy test evaluation of both planes, logged at iteration sft.epochs.
void EvaluateBothPlanes(Run& s, SftResult& result) {
  const SftConfig& c = s.cfg.sft;
  s.SyncSampler(c.epochs);  // a reasoning decision plane made its rollout engine for the demonstrations
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
}

// <run dir>/checkpoints/sft, recorded in the run; returns its path.
std::string SaveSftCheckpoint(Run& s, const SftResult& result) {
  fs::path dir = fs::path(s.dir) / "checkpoints" / "sft";
  policy::SaveCheckpoint(
      dir.string(), s.model, s.tokenizer,
      {{"kind", "sft"},
       {"examples", result.examples},
       {"seed", s.cfg.run.seed},
       {"config_toml", s.cfg.raw.ResolvedToml()}});
  s.recorder().Checkpoint(s.cfg.sft.epochs, dir.string());
  s.recorder().Flush();
  return dir.string();
}

}  // namespace

SftResult RunSft(Run& s, bool quiet) {
  const SftConfig& c = s.cfg.sft;
  SftResult result;
  Demonstrations d = OracleDemonstrations(s, quiet, result);
  if (s.cfg.prompt.reasoning && c.plain_weight > 0 && c.label_weight > 0)
    d.plain_steps = PlainSteps(s, d.steps);

  SftTraining training(s, d, quiet);
  for (int64_t epoch = 0; epoch < c.epochs; ++epoch) {
    result.final_loss = training.Epoch(epoch);
    Metrics m = {{"sft/loss", result.final_loss}, {"charts/lr", training.current_lr()}};
    for (const auto& kv : s.budget.Metrics()) m.push_back(kv);
    s.recorder().Metrics(epoch, m);
    if (!quiet)
      spdlog::info("sft epoch {}/{}: loss {:.4f}", epoch + 1, c.epochs, result.final_loss);
  }

  EvaluateBothPlanes(s, result);
  result.checkpoint = SaveSftCheckpoint(s, result);
  return result;
}

}  // namespace rlid::trainers
