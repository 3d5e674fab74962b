"""Reading an adapter's numeric keys, the same way in every adapter.

A value outside the key's documented range is a ValueError that names the
adapter, the key, the value and what is allowed: never clamped into the range
and never replaced by the default, either of which would run another
experiment than the one configured. A ValueError raised while the env is built
(hello) is how every adapter reports a bad key: the helper (rlid_env.run)
answers hello with an execution_error carrying the message, and rlid stops
with an environment error that quotes it.

    limit = integer("openspiel", params, "step_limit", 0, 0, 1000,
                    "0 (the game's max length) or 1..1000")
"""

import math
import numbers

# The most decisions an env may announce in hello (envs/external/external.cc checks
# step_limit in 1..1000000): the bound of a step_limit documented without one.
RLID_MAX_STEP_LIMIT = 1_000_000


def _as_int(value):
    """value as an int when it is one (an integral number, or text of one), else None.
    Booleans are not integers here (true is not a step limit)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            try:
                value = float(value)
            except ValueError:
                return None
    if isinstance(value, numbers.Real) and math.isfinite(value) and float(value).is_integer():
        return int(value)
    return None


def _as_float(value):
    """value as a float when it is a number (or text of one), else None; NaN and +-inf
    included (the caller refuses them)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _range(lo, hi, lo_open=False):
    if lo is not None and hi is not None:
        return f"{lo}..{hi}"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {lo}"
    if hi is not None:
        return f"<= {hi}"
    return "any value"


def integer(adapter, params, key, default, lo=None, hi=None, allowed=None, name=None):
    """params[key] as an int in lo..hi (None: no bound on that side), or `default` when the
    key is absent or null. A bool, a number with a fraction or text that is no integer is
    refused, and so is an integer out of the range. `allowed` words the range for the
    message (default "lo..hi"), e.g. "-1 (the game's default) or >= 0"; `name` is the key as
    the message says it (default `key`; "level_params.max_steps" for a nested one)."""
    value = params.get(key)
    if value is None:
        return default
    name = name or key
    what = allowed or _range(lo, hi)
    n = _as_int(value)
    if n is None:
        raise ValueError(f"{adapter}: {name} must be an integer, {what}; got {value!r}")
    if (lo is not None and n < lo) or (hi is not None and n > hi):
        raise ValueError(f"{adapter}: {name} must be {what}; got {n}")
    return n


def number(adapter, params, key, default, lo=None, hi=None, lo_open=False, allowed=None):
    """params[key] as a finite float in [lo, hi] ((lo, hi] with lo_open; None: no bound on
    that side), or `default` when the key is absent or null. A bool, text that is no number,
    NaN, an infinity or a number out of the range is refused."""
    value = params.get(key)
    if value is None:
        return default
    what = allowed or _range(lo, hi, lo_open)
    x = _as_float(value)
    if x is None or not math.isfinite(x):
        bounded = lo is not None or hi is not None or allowed
        raise ValueError(f"{adapter}: {key} must be a finite number"
                         f"{', ' + what if bounded else ''}; got {value!r}")
    if (lo is not None and (x <= lo if lo_open else x < lo)) or (hi is not None and x > hi):
        raise ValueError(f"{adapter}: {key} must be {what}; got {x:g}")
    return x

