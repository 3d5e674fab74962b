"""rlid.Policy: a checkpoint read the way the trainers read it. ``readout``
gives p(a|s) of every menu item and π of every realisation for a batch of states
in one forward pass (p(a|s) = Σ_{y→a} π(y|s), renormalised over the menu);
``sample`` draws token-plane answers and compiles them. Needs rlid built with
LibTorch (``rlid.with_torch``); tensors are torch.Tensor sharing rlid's memory."""

import warnings
from dataclasses import dataclass
from typing import List

from . import _rlid
from .config import config_file, overrides
from .env import Env
from .errors import ConfigError


def _core():
    if not _rlid.with_torch:
        raise ConfigError(
            "this rlid was built without LibTorch, so it cannot load checkpoints",
            "reinstall it into an environment with torch==2.11.0: "
            "pip install --no-build-isolation . (docs/python.md)")
    return _rlid


def _deprecated(old, new):
    warnings.warn(f"{old} is deprecated: use {new}", DeprecationWarning, stacklevel=3)


class _Default(str):
    """A default argument's value that is told apart from the same value given."""


_ALL = _Default("all")


def _state(env):
    if not isinstance(env, Env):
        raise ConfigError(f"a state is an rlid.Env, got {type(env).__name__}",
                          "pass rlid.make(...) objects; their current states are read")
    return _rlid.StateView(env.instructions, env.observation, env.menu(), env.seed, env.steps)


@dataclass
class Readout:
    """One readout of B states. Column k of every [B, K] tensor is ``env.menu()[k]`` of
    row b's env (whatever order the prompt showed: ``labels`` says which letter each
    item had); padding columns are False in ``mask`` (p = 0, log p = -inf)."""

    p: "torch.Tensor"              # [B, K] p(a|s)
    log_p: "torch.Tensor"          # [B, K]
    mask: "torch.Tensor"           # [B, K] bool: a real menu item
    realisation_p: "torch.Tensor"  # [B, K, R] π(y|s): y = 0 the label, then the item's
                                   #   realisations (MenuItem.realisations)
    realisation_log_p: "torch.Tensor"  # [B, K, R]
    value: "torch.Tensor"          # [B] value head at the last prompt token
    candidate_mass: "torch.Tensor"  # [B] mass of the label tokens in the answer row
    p_other: "torch.Tensor"        # [B] 1 - Σ_y π(y|s): mass on no menu realisation
    row_entropy: "torch.Tensor"    # [B] entropy of the full-vocabulary answer row
    menu_entropy: "torch.Tensor"   # [B] entropy of p(·|s)
    labels: List[List[str]]        # [B][K] the label each item had in its prompt
    prompts: List[str]             # [B] the prompts as the model read them

    # The names before "realisation" was the one word for an action's texts.
    @property
    def wording_p(self):
        """Deprecated: ``realisation_p``."""
        _deprecated("Readout.wording_p", "Readout.realisation_p")
        return self.realisation_p

    @property
    def wording_log_p(self):
        """Deprecated: ``realisation_log_p``."""
        _deprecated("Readout.wording_log_p", "Readout.realisation_log_p")
        return self.realisation_log_p


class Policy:
    """``rlid.Policy.load(dir)``: an rlid checkpoint or a Hugging Face directory."""

    def __init__(self, core, dir):
        self._p = core
        self.dir = dir

    @classmethod
    def load(cls, dir, config=None, *, set=None, dtype="float32", device="cpu"):
        """Loads ``dir`` with the [prompt] and [policy] settings of ``config`` (a TOML
        path or dict; default: rlid's defaults) and ``set`` overrides, on ``device``
        ("cpu", "cuda", "cuda:1", "auto")."""
        import os
        with config_file(config) as path:
            core = _core().Policy(os.fspath(dir), path, overrides(set), dtype, device)
        return cls(core, os.fspath(dir))

    def __repr__(self):
        i = self.info
        return f"rlid.Policy({self.dir!r}, {i['parameters']} parameters, {i['dtype']}, {i['device']})"

    @property
    def info(self):
        """dir, parameters, vocab_size, dtype, device, label_order, chat_template."""
        return self._p.info()

    def readout(self, states, realisations=_ALL, normalisation="menu", *, wordings=None):
        """p(a|s) for one env or a list of envs (their current states), one forward pass.

        ``realisations``: "all" reads the label and every realisation of each item, "labels"
        the label only. ``normalisation``: "menu" (Σ_a p = 1) or "other" (Σ_a p + p_other = 1).
        ``wordings`` is the deprecated name of ``realisations``."""
        import torch
        if wordings is not None:
            if realisations is not _ALL:
                raise ConfigError("readout got both realisations= and wordings=",
                                  "pass realisations= only (wordings= is its deprecated name)")
            _deprecated("readout(wordings=...)", "readout(realisations=...)")
            realisations = wordings
        if realisations not in ("all", "labels"):
            raise ConfigError(f"realisations={realisations!r} is not 'all' or 'labels'")
        if normalisation not in ("menu", "other"):
            raise ConfigError(f"normalisation={normalisation!r} is not 'menu' or 'other'")
        envs = [states] if isinstance(states, Env) else list(states)
        r = self._p.readout([_state(e) for e in envs], realisations == "all", normalisation)
        log_p = r["log_p"]  # padding columns are -inf, so p is 0 there
        return Readout(p=log_p.exp(), log_p=log_p, mask=r["mask"],
                       realisation_p=r["realisation_log_p"].exp(),
                       realisation_log_p=r["realisation_log_p"], value=r["value"],
                       candidate_mass=r["candidate_mass"], p_other=torch.exp(r["log_p_other"]),
                       row_entropy=r["row_entropy"], menu_entropy=r["menu_entropy"],
                       labels=r["labels"], prompts=r["prompts"])

    def sample(self, env, n=1, temperature=1.0, top_p=1.0, max_new_tokens=16, seed=0):
        """``n`` token-plane answers to ``env``'s current state, each a dict: text, tokens,
        logprobs (per token, under the sampling temperature), logprob, finish ("stop" or
        "length"), valid, item (index into env.menu(), None if invalid), command, label,
        matched (the realisation it compiled by) and reason (why it is invalid)."""
        if not isinstance(n, int) or isinstance(n, bool):
            raise ConfigError(f"n must be an int, got {n!r}")
        return self._p.sample(_state(env), n, float(temperature), float(top_p),
                              int(max_new_tokens), int(seed))
