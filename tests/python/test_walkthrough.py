"""docs/python.md's walk-through, executed: every ```python block runs in order
in one namespace (RUN is a CLI-trained run directory), so the page cannot drift
from what the package does."""
import contextlib
import io
import re

from conftest import SOURCE_DIR


def test_docs_python_md_runs(run_dir, tmp_path):
    text = (SOURCE_DIR / "docs" / "python.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 10
    namespace = {"RUN": str(run_dir), "OUT": str(tmp_path), "CONFIGS": str(SOURCE_DIR / "configs")}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for i, block in enumerate(blocks):
            exec(compile(block, f"docs/python.md block {i + 1}", "exec"), namespace)
    printed = out.getvalue()
    assert "solved: True" in printed and "refused:" in printed and "invalid:" in printed
    assert "Runner-up" in printed or "arm" in printed  # the compare table and verdict
