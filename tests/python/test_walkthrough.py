"""docs/python.md's walk-through, executed: every ```python block runs in order
in one namespace (RUN is a CLI-trained run directory), so the page cannot drift
from what the package does."""
import contextlib
import io
import re

from conftest import SOURCE_DIR


def test_docs_python_md_runs(run_dir):
    text = (SOURCE_DIR / "docs" / "python.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 6
    namespace = {"RUN": str(run_dir)}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for i, block in enumerate(blocks):
            exec(compile(block, f"docs/python.md block {i + 1}", "exec"), namespace)
    printed = out.getvalue()
    assert "solved: True" in printed and "refused:" in printed and "invalid:" in printed
