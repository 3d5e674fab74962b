"""A test env on the Python helper: lists items; has its own free-text
compiler (any answer containing 'number N'), an oracle without a return, and
switches clone off when argv[1] == "noclone" (rlid then replays actions); with
argv[1] == "count" the observation says how many steps this process has taken
(copies stepped for afterstates included)."""
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../envs/external/python"))
from rlid_env import Env, Action, Step, Invalid, run

NOCLONE = len(sys.argv) > 1 and sys.argv[1] == "noclone"
COUNT = len(sys.argv) > 1 and sys.argv[1] == "count"
steps_taken = 0


class Lister(Env):
    name = "lister"
    summary = "say the numbers in order"
    instructions = "Say the numbers from the note in order."
    step_limit = 5
    clonable = not NOCLONE

    def reset(self, seed, split):
        return {"todo": [(seed * 7 + k) % 5 for k in range(3)], "said": []}

    def task(self, s):
        return "Note: " + ", ".join(str(n) for n in s["todo"])

    def observation(self, s):
        said = "Said so far: " + (", ".join(str(n) for n in s["said"]) or "nothing")
        return said + (f" (steps taken: {steps_taken})" if COUNT else "")

    def menu(self, s):
        return [Action(n, "say %d" % n, ["number %d" % n]) for n in range(5)]

    def step(self, s, action):
        global steps_taken
        steps_taken += 1
        s["said"].append(action)
        k = len(s["said"]) - 1
        if s["todo"][k] != action:
            return Step(0.0, terminal=True)
        if len(s["said"]) == len(s["todo"]):
            return Step(1.0, terminal=True, success=True)
        return Step(0.0)

    def compile_text(self, s, text):
        words = text.lower().replace(",", " ").split()
        for i, w in enumerate(words[:-1]):
            if w in ("num", "no.") and words[i + 1].isdigit() and int(words[i + 1]) < 5:
                return int(words[i + 1])
        raise Invalid("name a number as 'num N'")

    def oracle(self, s):
        return [s["todo"][len(s["said"])]]


if __name__ == "__main__":
    run(Lister)
