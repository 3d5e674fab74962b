"""rlid.Run: a run directory (or database file) opened read-only. ``sql`` runs
one read-only statement through the same guard as ``rlid sql`` (no writes,
no settings, stopped at limits) and returns a pandas DataFrame; ``metrics``
is the metrics table, one row per run and iteration, one column per key."""

import os

from . import _rlid
from .errors import ConfigError


def _pandas():
    try:
        import pandas
    except ImportError as e:  # pandas is optional: rlid[pandas]
        raise ImportError(
            "rlid.Run returns pandas DataFrames: pip install pandas (or rlid[pandas]); "
            "Run.rows() works without it"
        ) from e
    return pandas


class Run:
    """A run's store, read-only. ``Run("runs/quickstart")`` or ``Run("x/rlid.db")``.

    A data-parallel run's rank shards are attached, so every table and view
    covers all ranks. Tables: runs, episodes, steps, menu_items, prompts,
    memory_items, memory_reads, metrics, checkpoints; views: v_step_provenance,
    v_memory_lineage, v_split_leaks, v_label_calibration, v_run_budget
    (docs/memory.md)."""

    def __init__(self, path):
        self.dir = os.fspath(path)
        self._store = _rlid.Store(self.dir)

    def __repr__(self):
        return f"rlid.Run({self.dir!r})"

    @property
    def path(self):
        """The database file."""
        return self._store.path

    def rows(self, query, timeout_s=60.0, max_rows=0, max_memory_mb=256):
        """(columns, rows) of one read-only statement; rows are tuples of
        None / int / float / str / bytes. A limit (0 = none) that stops the
        query raises ConfigError naming it."""
        for name, v in (("timeout_s", timeout_s), ("max_rows", max_rows),
                        ("max_memory_mb", max_memory_mb)):
            if v is None or v < 0:
                raise ConfigError(f"{name} must be >= 0 (0 = no limit), got {v!r}")
        return self._store.query(query, float(timeout_s), int(max_rows), int(max_memory_mb))

    def sql(self, query, **limits):
        """One read-only statement as a DataFrame (limits as in ``rows``)."""
        columns, rows = self.rows(query, **limits)
        return _pandas().DataFrame.from_records(rows, columns=columns)

    def tables(self):
        """Names of the tables and views."""
        _, rows = self.rows("SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
                            "ORDER BY name")
        return [r[0] for r in rows]

    def runs(self):
        """The runs table (one row per run or compare arm x seed) without the config text."""
        return self.sql("SELECT id, name, arm, kind, seed, code_version, started_at, ended_at, "
                        "status FROM runs ORDER BY id")

    def config(self, run_id=None):
        """The resolved config (TOML text) a run used; run_id defaults to the only/first run."""
        where = "" if run_id is None else f"WHERE id = {int(run_id)}"
        _, rows = self.rows(f"SELECT config_toml FROM runs {where} ORDER BY id LIMIT 1")
        if not rows:
            raise ConfigError(f"no run {run_id} in {self.path}" if run_id is not None
                              else f"{self.path} holds no run")
        return rows[0][0]

    def metrics(self, run_id=None):
        """Metrics as a DataFrame: columns run_id, iteration, then one per key
        (NaN where a key was not logged or was not finite). The last value logged
        for a (run, iteration, key) wins, as in the v_run_budget view."""
        where = "" if run_id is None else f"WHERE run_id = {int(run_id)}"
        long = self.sql("SELECT run_id, iteration, key, value FROM metrics "
                        f"{where} ORDER BY rowid")
        pd = _pandas()
        if long.empty:
            return pd.DataFrame(columns=["run_id", "iteration"])
        last = long.drop_duplicates(["run_id", "iteration", "key"], keep="last")
        wide = last.pivot(index=["run_id", "iteration"], columns="key", values="value")
        wide.columns.name = None
        return wide.reset_index()
