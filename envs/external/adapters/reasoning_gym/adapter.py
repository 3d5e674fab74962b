"""reasoning_gym: a reasoning-gym task as a one-decision menu env.

[env]
name = "reasoning_gym"
task = "basic_arithmetic"    # any reasoning_gym dataset name
options = 4                  # menu size: the answer and options - 1 distractors
task_params = {}             # the dataset's config (e.g. {min_terms = 2, max_terms = 3})

Each env seed is one instance: the first usable entry of the dataset made
with that seed (a usable answer is one line of at most 300 bytes that the
free-text grammar reads back unchanged). The menu is its answer among
distractors: answers of other instances of the same task (a pool drawn from
a seed derived from the instance's) that the task's own verifier
(dataset.score_answer) rejects for this instance, in an order drawn from the
seed. Reward 1 and success for the answer the verifier accepts, 0 otherwise;
one decision ends the episode. The afterstate of an option is the state it
leads to ("You answered ...", no verdict), exact. The oracle names the
accepted option, so rlid sft can demonstrate it. Where the task ships a
worked solution (metadata "answer_cot", e.g. gsm_symbolic), it is the
oracle's worked reasoning: one line (its lines joined, GSM's "####"
becomes "so the answer is"), which `rlid sft` with [prompt] reasoning
demonstrates as the scratchpad before the decision.
"""

import hashlib
import os
import random
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(HERE, "..", "..", "python"))  # rlid_env, uninstalled
sys.path.append(os.path.join(HERE, ".."))  # _params, _pinned
from _params import integer  # noqa: E402
from _pinned import pinned_packages, require  # noqa: E402
from rlid_env import Action, Env, Step, run  # noqa: E402

REQUIRES = pinned_packages(HERE)  # adapter.toml
DECORATION = "()[]{}<>*_`'\".,:! \t"
POOL = 64          # instances whose answers can be distractors
CANDIDATES = 16    # entries tried per seed for a usable answer
MAX_BYTES = 300


def usable(answer):
    """One line the grammar reads back as it is (no decoration at either end)."""
    return (isinstance(answer, str) and answer and "\n" not in answer and "\r" not in answer
            and len(answer.encode("utf-8")) <= MAX_BYTES and answer.strip(DECORATION) == answer
            and not answer.endswith("?"))


class Instance:
    __slots__ = ("question", "answers", "correct", "said", "worked")


def one_line(cot, answer):
    """A worked solution as one scratchpad line that ends with the answer."""
    steps = [re.sub(r"\s+", " ", line).strip(" •") for line in cot.splitlines()]
    steps = [s for s in steps if s]
    if steps and steps[-1].startswith("####"):
        steps[-1] = "so the answer is " + steps[-1][4:].strip()
    text = ""
    for step in steps:
        text += ("" if not text else " " if text[-1] in ".!?" else "; ") + step
    if not text.endswith(answer):
        text += f"; so the answer is {answer}"
    return text[-4000:]


class ReasoningGym(Env):
    name = "reasoning_gym"
    packages = tuple(REQUIRES)  # their installed versions go into the metadata message
    summary = "a reasoning-gym task: the verified answer among rejected distractors"
    step_limit = 1
    afterstates = True  # the helper steps a copy: "You answered ..." (exact, no verdict)

    def __init__(self, params):
        super().__init__(params)
        require("reasoning_gym", REQUIRES)
        import reasoning_gym  # after the version check

        self.rg = reasoning_gym
        self.task_name = str(params.get("task", "basic_arithmetic"))
        names = sorted(reasoning_gym.factory.DATASETS.keys())
        if self.task_name not in names:
            raise ValueError(f"reasoning_gym: unknown task '{self.task_name}'; reasoning_gym has: "
                             f"{', '.join(names)}")
        self.options = integer("reasoning_gym", params, "options", 4, 2, 26)
        self.task_params = dict(params.get("task_params") or {})
        self.instructions = (f"Solve the reasoning-gym task '{self.task_name}': read the question and "
                             "choose the correct answer among the options.")

    def _dataset(self, seed, size):
        return self.rg.create_dataset(self.task_name, seed=seed, size=size, **self.task_params)

    def reset(self, seed, split):
        ds = self._dataset(seed, CANDIDATES)
        entry = next((ds[i] for i in range(CANDIDATES) if usable(ds[i]["answer"])), None)
        if entry is None:
            raise ValueError(f"reasoning_gym: task '{self.task_name}' gave no one-line answer in "
                             f"{CANDIDATES} entries of seed {seed}; it cannot be a menu env")
        correct = entry["answer"]
        rng = random.Random(seed)
        pool = self._dataset(rng.randrange(1 << 30), POOL)
        seen = {correct.lower()}
        distractors = []
        for i in rng.sample(range(POOL), POOL):
            a = pool[i]["answer"]
            if len(distractors) == self.options - 1:
                break
            if not usable(a) or a.lower() in seen:
                continue
            seen.add(a.lower())
            if ds.score_answer(a, entry) < 1.0:  # the task's verifier rejects it here
                distractors.append(a)
        if not distractors:
            raise ValueError(f"reasoning_gym: no answer of other '{self.task_name}' instances is "
                             f"rejected for seed {seed}; the task cannot make a menu")
        answers = distractors + [correct]
        rng.shuffle(answers)
        inst = Instance()
        inst.question, inst.answers, inst.said = entry["question"], answers, None
        inst.correct = answers.index(correct)
        cot = (entry.get("metadata") or {}).get("answer_cot")
        inst.worked = one_line(cot, correct) if isinstance(cot, str) and cot.strip() else None
        return inst

    def observation(self, s):
        if s.said is not None:
            return f"You answered {s.answers[s.said]}."
        return s.question

    def menu(self, s):
        return [Action(i, a) for i, a in enumerate(s.answers)]

    def step(self, s, action):
        s.said = action
        ok = action == s.correct
        return Step(1.0 if ok else 0.0, terminal=True, success=ok)

    def state_hash(self, s):
        key = f"{s.question}\x1f{s.answers}\x1f{s.said}"
        return hashlib.blake2b(key.encode("utf-8"), digest_size=8).hexdigest()

    def oracle(self, s):
        return [s.correct], 1.0

    def reasoning(self, s):
        if s.worked is None:
            raise ValueError(f"reasoning_gym: task '{self.task_name}' ships no worked solution "
                             "(metadata 'answer_cot'); think-then-decide demonstrations need one "
                             "(e.g. task = \"gsm_symbolic\")")
        return s.worked


if __name__ == "__main__":
    run(ReasoningGym)
