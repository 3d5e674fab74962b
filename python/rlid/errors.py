"""The errors rlid raises. Every one is an ``rlid.Error`` carrying rlid's message
and its ``hint`` (what to try), and also the builtin a Python caller expects:
a bad config or argument is a ``ValueError``, an unreadable file an ``OSError``.
Ctrl-C during training is ``rlid.Interrupted``, a ``KeyboardInterrupt`` with the same
message and hint. The C++ core raises these classes by name (python/src/errors.cc)."""


class _MessageAndHint:
    """rlid's message, and ``hint``: what to try ("" when none)."""

    def __init__(self, message, hint=""):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self):
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message


class Error(_MessageAndHint, Exception):
    """Any error rlid reports; ``hint`` says what to try ("" when none)."""

    kind = "error"


class ConfigError(Error, ValueError):
    """A bad configuration, argument or user-supplied text (CLI exit code 2)."""

    kind = "config error"


class IoError(Error, OSError):
    """A file or database could not be read or written (CLI exit code 3)."""

    kind = "i/o error"


class InternalError(Error, RuntimeError):
    """A broken invariant inside rlid: a bug, please report it (CLI exit code 4)."""

    kind = "internal error"


class NumericError(Error, ArithmeticError):
    """Training produced a non-finite value (CLI exit code 5)."""

    kind = "numeric error"


class EnvError(Error, RuntimeError):
    """An environment failed to do its part, e.g. an external env's process (exit code 6)."""

    kind = "environment error"


class DistError(Error, RuntimeError):
    """A data-parallel job lost a rank (CLI exit code 7)."""

    kind = "distributed error"


class InvalidAction(ConfigError):
    """Free text that compiles to no action of the current menu; ``reason`` says why."""

    def __init__(self, text, reason):
        super().__init__(
            f"{text!r} is not an action of this menu: {reason}",
            "read env.menu() for the labels and commands, or env.compile(text) first",
        )
        self.text = text
        self.reason = reason


class Interrupted(_MessageAndHint, KeyboardInterrupt):
    """Ctrl-C (SIGINT, SIGTERM or SIGHUP) stopped a training call at a safe point: what was
    recorded is committed and the run is marked interrupted. A ``KeyboardInterrupt``, so
    ``except Exception`` does not swallow it; ``hint`` says how to resume."""

    kind = "interrupted"
