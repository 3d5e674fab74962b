"""rlid.Run against `rlid sql --json` on the same run: same rows, same
refusals; metrics as a DataFrame."""
import math

import pytest

import rlid
from conftest import cli_json


def test_sql_returns_what_the_cli_returns(run_dir):
    query = ("SELECT id, split, seed, ret, success, length, plane FROM episodes "
             "ORDER BY id")
    want = cli_json("sql", run_dir, query, "--json")
    df = rlid.Run(run_dir).sql(query)
    assert list(df.columns) == ["id", "split", "seed", "ret", "success", "length", "plane"]
    assert df.to_dict("records") == want
    assert len(want) > 0


def test_metrics_pivot_equals_the_metrics_table(run_dir):
    run = rlid.Run(run_dir)
    m = run.metrics()
    rows = cli_json("sql", run_dir, "SELECT iteration, key, value FROM metrics", "--json")
    assert sorted(m["iteration"].tolist()) == sorted({r["iteration"] for r in rows})
    for r in rows:
        got = m.loc[m["iteration"] == r["iteration"], r["key"]].item()
        assert (r["value"] is None and math.isnan(got)) or got == r["value"]
    assert {"rollout/return", "eval/success", "budget/flops"} <= set(m.columns)


def test_runs_tables_and_config(run_dir):
    run = rlid.Run(run_dir)
    runs = run.runs()
    assert runs["status"].tolist() == ["completed"] and runs["name"].tolist() == ["bandit_ppo"]
    assert {"episodes", "steps", "metrics", "v_run_budget"} <= set(run.tables())
    assert "algorithm = 'ppo_decision'" in run.config()
    assert run.path.endswith("rlid.db")
    columns, rows = run.rows("SELECT COUNT(*) FROM steps")
    assert columns == ["COUNT(*)"] and rows[0][0] > 0


def test_writes_and_bad_sql_are_refused_and_limits_stop(run_dir):
    run = rlid.Run(run_dir)
    with pytest.raises(rlid.ConfigError, match="read-only"):
        run.sql("DELETE FROM episodes")
    with pytest.raises(rlid.ConfigError):
        run.sql("SELECT * FROM no_such_table")
    with pytest.raises(rlid.ConfigError, match="row limit of 2"):
        run.rows("SELECT * FROM steps", max_rows=2)
    with pytest.raises(rlid.ConfigError, match=">= 0"):
        run.rows("SELECT 1", timeout_s=-1)
    assert len(run.sql("SELECT * FROM episodes")) > 0  # nothing was deleted


def test_missing_and_foreign_files_are_io_errors(tmp_path):
    with pytest.raises(rlid.IoError) as e:
        rlid.Run(tmp_path / "nothing")
    assert isinstance(e.value, OSError) and e.value.hint
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database" * 100)
    with pytest.raises(OSError):
        rlid.Run(junk)
