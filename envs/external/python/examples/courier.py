"""courier: leave a parcel in the room a note names: a whole rlid env in 45 lines."""
import os, random, sys
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # uninstalled helper
from rlid_env import Env, Action, Step, run

ROOMS = ["kitchen", "garden", "attic", "cellar", "garage", "study", "hallway", "bedroom"]

class Courier(Env):
    name = "courier"
    summary = "leave a parcel in the room a note names"
    instructions = "You deliver parcels in a house. Leave the parcel in the room the note names."
    step_limit = 6

    def reset(self, seed, split):
        rng = random.Random(seed)
        rooms = rng.sample(ROOMS, int(self.params.get("rooms", 4)))
        return {"rooms": rooms, "target": rng.choice(rooms), "at": None, "left": None}

    def task(self, s):
        return f"The note says: please leave the parcel in the {s['target']}."

    def observation(self, s):
        if s["left"]:
            return f"You left the parcel in the {s['left']}."
        return f"You are {'in the ' + s['at'] if s['at'] else 'at the front door'}, holding the parcel."

    def menu(self, s):
        items = [Action(i, f"go to the {r}", [r, f"walk to the {r}"])
                 for i, r in enumerate(s["rooms"]) if r != s["at"]]
        if s["at"]:
            items.append(Action(99, "leave the parcel here", ["leave the parcel", "drop it here"]))
        return items

    def step(self, s, action):
        if action == 99:
            s["left"] = s["at"]
            ok = s["at"] == s["target"]
            return Step(1.0 if ok else 0.0, terminal=True, success=ok)
        s["at"] = s["rooms"][action]
        return Step(-0.01)

    def oracle(self, s):  # the optimal actions, for SFT demonstrations
        return [99] if s["at"] == s["target"] else [s["rooms"].index(s["target"])]

if __name__ == "__main__":
    run(Courier)
