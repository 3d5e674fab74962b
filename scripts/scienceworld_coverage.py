#!/usr/bin/env python3
"""How often ScienceWorld's gold path stays on the scienceworld adapter's capped menus.

For each task (all 30 by default), walks the gold action sequence of the first N
train and N test variations through the adapter's menus (the adapter's oracle)
and prints a markdown table: the variations whose gold path completes the task
on the menus, per split. Run it with the project's venv:

    .venv/bin/python scripts/scienceworld_coverage.py [--tasks boil,find-animal] [--n 3]
"""

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "envs", "external", "python", "adapters"))
import scienceworld_env  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="", help="comma-separated task names or ids (default: all)")
    ap.add_argument("--n", type=int, default=3, help="variations per split (default 3)")
    args = ap.parse_args()
    from scienceworld.constants import ID2TASK
    tasks = [t for t in args.tasks.split(",") if t] or list(ID2TASK.values())
    ids = {v: k for k, v in ID2TASK.items()}
    print("| task | train variations on the menus | test variations on the menus | variations (train/test) | seconds |")
    print("|---|---|---|---|---|")
    for task in tasks:
        start = time.time()
        env = scienceworld_env.ScienceWorld({"task": task})
        try:
            hits = {0: 0, 1: 0}
            for seed in range(2 * args.n):
                variation = env.reset(seed, "train" if seed % 2 == 0 else "test").variation
                hits[seed % 2] += env._walk_gold(variation) is not None
            name = f"{ids.get(env.task_name, '?')} {env.task_name}"
            print(f"| {name} | {hits[0]}/{args.n} | {hits[1]}/{args.n} | "
                  f"{len(env.train_variations)}/{len(env.test_variations)} | "
                  f"{time.time() - start:.0f} |", flush=True)
        finally:
            env.pool.close()


if __name__ == "__main__":
    main()
