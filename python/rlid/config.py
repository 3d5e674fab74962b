"""Configs from Python: a TOML file's path, or a dict in the shape of one
(``{"env": {"name": "maze"}, "trainer": {"lr": 3e-4}, "compare": {"arm": [{...}]}}``),
which is written to a temporary TOML file for the C++ loader, so both take the
same checks and errors as ``rlid train CONFIG``."""

import contextlib
import json
import os
import tempfile

from .errors import ConfigError


def toml_value(key, value):
    """A Python value as TOML text; ``key`` names it in errors."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, os.PathLike):
        return json.dumps(os.fspath(value))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(key, v) for v in value) + "]"
    if isinstance(value, dict):  # an inline table, e.g. external's params={"rooms": 5}
        return "{" + ", ".join(f"{json.dumps(str(k))} = {toml_value(f'{key}.{k}', v)}"
                               for k, v in value.items()) + "}"
    raise ConfigError(
        f"config key {key!r} has a value of type {type(value).__name__}",
        "use a bool, number, string, or a list or dict of them",
    )


def _is_table_array(v):
    return isinstance(v, (list, tuple)) and v and all(isinstance(x, dict) for x in v)


def to_toml(config, prefix=""):
    """A nested dict as TOML: scalars first, then [tables] and [[arrays of tables]]."""
    if not isinstance(config, dict):
        raise ConfigError(f"a config is a dict or a path, got {type(config).__name__}")
    lines, nested = [], []
    for k, v in config.items():
        name = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) or _is_table_array(v):
            nested.append((name, v))
        else:
            lines.append(f"{json.dumps(str(k))} = {toml_value(name, v)}")
    for name, v in nested:
        header = ".".join(json.dumps(p) for p in name.split("."))
        if isinstance(v, dict):
            lines += ["", f"[{header}]", to_toml(v, name)]
        else:
            for table in v:
                lines += ["", f"[[{header}]]", to_toml(table, name)]
    return "\n".join(lines)


@contextlib.contextmanager
def config_file(config):
    """The path of ``config`` (a path, or a dict written to a temporary file for the call)."""
    if config is None:
        yield ""
        return
    if isinstance(config, (str, os.PathLike)):
        yield os.fspath(config)
        return
    text = to_toml(config) + "\n"
    fd, path = tempfile.mkstemp(prefix="rlid-config-", suffix=".toml")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        yield path
    finally:
        os.unlink(path)


def overrides(sets):
    """``set=["trainer.lr=1e-4"]`` or ``set={"trainer.lr": 1e-4}`` as override strings."""
    if sets is None:
        return []
    if isinstance(sets, str):
        raise ConfigError("set= takes a list of 'key=value' strings or a dict, not one string",
                          f"write set=[{sets!r}]")
    if isinstance(sets, dict):
        return [f"{k}={toml_value(k, v)}" for k, v in sets.items()]
    out = list(sets)
    for s in out:
        if not isinstance(s, str) or "=" not in s:
            raise ConfigError(f"override {s!r} is not 'section.key=value'",
                              "e.g. set=['trainer.lr=1e-4'] or set={'trainer.lr': 1e-4}")
    return out
