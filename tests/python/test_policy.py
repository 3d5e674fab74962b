"""rlid.Policy against `rlid policy readout --json` and `rlid policy sample --json` on
the checkpoint the CLI trained (conftest's run_dir), and the zero-copy contract."""
import math
from pathlib import Path

import pytest

import rlid
from conftest import cli_json

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not rlid.with_torch, reason="rlid built without LibTorch")


@pytest.fixture(scope="module")
def checkpoint(run_dir) -> Path:
    final = run_dir / "checkpoints" / "latest"
    assert final.is_dir(), sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    return final


@pytest.fixture(scope="module")
def policy(checkpoint):
    return rlid.Policy.load(checkpoint)


@pytest.mark.parametrize("env_name,seed", [("bandit", 0), ("bandit", 3), ("maze", 5)])
def test_readout_equals_the_cli(policy, checkpoint, env_name, seed):
    cli = cli_json("policy", "readout", "--checkpoint", checkpoint, "--env", env_name,
                   "--seed", seed, "--json")
    env = rlid.make(env_name, seed=seed)
    ro = policy.readout(env)
    menu = env.menu()
    assert ro.p.shape == (1, len(menu)) and ro.mask.all()
    by_command = {item["command"]: item for item in cli["menu"]}
    for k, item in enumerate(menu):
        want = by_command[item.command]
        assert ro.labels[0][k] == want["label"]
        assert ro.p[0, k].item() == pytest.approx(want["p"], abs=1e-6)
        words = [w["p"] for w in want["realisations"]]
        assert ro.realisation_p[0, k, :len(words)].tolist() == pytest.approx(words, abs=1e-6)
    assert ro.value[0].item() == pytest.approx(cli["value"], abs=1e-6)
    assert ro.candidate_mass[0].item() == pytest.approx(cli["candidate_mass"], abs=1e-6)
    assert ro.p_other[0].item() == pytest.approx(cli["p_other"], abs=1e-6)
    assert ro.menu_entropy[0].item() == pytest.approx(cli["menu_entropy"], abs=1e-6)
    assert ro.prompts[0] == cli["prompt"]


def test_a_batch_reads_each_state_as_alone(policy):
    envs = [rlid.make("maze", seed=s) for s in (1, 2, 7)]
    envs[1].step(0)  # a later step: another label order and observation
    batch = policy.readout(envs)
    for b, env in enumerate(envs):
        alone = policy.readout(env)
        k = len(env.menu())
        assert batch.mask[b].sum().item() == k
        assert torch.allclose(batch.p[b, :k], alone.p[0, :k], atol=1e-5)
        assert batch.value[b].item() == pytest.approx(alone.value[0].item(), abs=1e-5)
        assert batch.p[b, k:].eq(0).all()


def test_normalisations_are_probabilities(policy):
    env = rlid.make("maze", seed=4)
    menu_norm = policy.readout(env, normalisation="menu")
    assert menu_norm.p.sum().item() == pytest.approx(1.0, abs=1e-5)
    other = policy.readout(env, normalisation="other")
    assert (other.p.sum() + other.p_other[0]).item() == pytest.approx(1.0, abs=1e-5)
    # p(a|s) = Σ_{y→a} π(y|s): the item's mass is the sum over its realisations.
    realisations = other.realisation_p[0].nan_to_num(0).sum(-1)
    assert torch.allclose(other.p[0], realisations, atol=1e-6)
    labels = policy.readout(env, realisations="labels", normalisation="other")
    assert labels.realisation_p.shape[-1] == 1


def test_the_old_wording_names_still_work_and_warn(policy):
    env = rlid.make("maze", seed=4)
    new = policy.readout(env, realisations="labels")
    with pytest.warns(DeprecationWarning, match="realisations="):
        old = policy.readout(env, wordings="labels")
    assert torch.equal(old.p, new.p)
    with pytest.warns(DeprecationWarning, match="Readout.realisation_p"):
        assert torch.equal(old.wording_p, old.realisation_p)
    with pytest.warns(DeprecationWarning, match="Readout.realisation_log_p"):
        assert torch.equal(old.wording_log_p, old.realisation_log_p)
    with pytest.warns(DeprecationWarning, match="MenuItem.realisations"):
        assert env.menu()[0].wordings == env.menu()[0].realisations
    with pytest.raises(rlid.ConfigError, match="both"):
        policy.readout(env, realisations="all", wordings="all")


def test_sample_equals_the_cli(policy, checkpoint):
    cli = cli_json("policy", "sample", "--checkpoint", checkpoint, "--env", "maze", "--seed", 2,
                   "-n", 4, "--sample-seed", 11, "--json")
    env = rlid.make("maze", seed=2)
    got = policy.sample(env, n=4, seed=11)
    assert [s["tokens"] for s in got] == [c["tokens"] for c in cli]
    assert [s["text"] for s in got] == [c["text"] for c in cli]
    assert [s["valid"] for s in got] == [c["valid"] for c in cli]
    for s, c in zip(got, cli):
        assert s["logprob"] == pytest.approx(c["logprob"], abs=1e-5)
        if s["valid"]:
            assert env.menu()[s["item"]].command == c["action"] == s["command"]


def test_tensors_cross_without_copies():
    made, ptr = rlid._rlid._tensor_made_in_cpp(5)
    assert isinstance(made, torch.Tensor) and made.data_ptr() == ptr
    assert made.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    x = torch.ones(3)
    back, seen = rlid._rlid._tensor_seen_in_cpp(x)
    assert back is x and seen == x.data_ptr()


def test_errors(policy, tmp_path):
    with pytest.raises(rlid.IoError):
        rlid.Policy.load(tmp_path / "missing")
    with pytest.raises(ValueError, match="dtype"):
        rlid.Policy.load(tmp_path, dtype="float64")
    env = rlid.make("bandit", seed=0)
    env.step(0)
    assert env.terminal
    with pytest.raises(rlid.ConfigError, match="empty menu"):
        policy.readout(env)
    with pytest.raises(rlid.ConfigError):
        policy.readout([rlid.make("maze"), "not an env"])
    with pytest.raises(ValueError, match="normalisation"):
        policy.readout(rlid.make("maze"), normalisation="softmax")
    assert math.isfinite(policy.info["parameters"])


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    """A tiny random Qwen3 saved by transformers, with the real Qwen3 tokenizer."""
    import lzma
    transformers = pytest.importorskip("transformers")
    from conftest import SOURCE_DIR
    out = tmp_path_factory.mktemp("hf") / "qwen3_tiny"
    tok = (SOURCE_DIR / "tests" / "data" / "qwen3" / "tokenizer.json.xz").read_bytes()
    config = transformers.Qwen3Config(vocab_size=151936, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=2,
                                      num_key_value_heads=1, head_dim=16,
                                      tie_word_embeddings=True)
    torch.manual_seed(0)
    transformers.Qwen3ForCausalLM(config).save_pretrained(out)
    (out / "tokenizer.json").write_bytes(lzma.decompress(tok))
    return out


def test_a_hugging_face_directory_reads_out_as_in_the_cli(hf_dir):
    policy = rlid.Policy.load(hf_dir)
    assert policy.info["vocab_size"] == 151936
    cli = cli_json("policy", "readout", "--checkpoint", hf_dir, "--env", "maze", "--seed", 1,
                   "--json")
    env = rlid.make("maze", seed=1)
    ro = policy.readout(env)
    by_command = {item["command"]: item["p"] for item in cli["menu"]}
    got = {item.command: ro.p[0, k].item() for k, item in enumerate(env.menu())}
    assert got == pytest.approx(by_command, abs=1e-6)
    assert ro.prompts[0] == cli["prompt"]


def test_sample_counts_are_bounded_before_anything_runs(policy):
    """Policy.sample(n=10**9) is a ConfigError at once, not a MemoryError after 30 s."""
    import time
    env = rlid.make("maze", seed=2)
    t0 = time.monotonic()
    with pytest.raises(rlid.ConfigError, match="samples asked for"):
        policy.sample(env, n=10**9)
    assert time.monotonic() - t0 < 5
