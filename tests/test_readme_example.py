"""The engine's API example in README.md runs, in a fresh directory, and does what it says."""

from __future__ import annotations

import os
import re
import subprocess
import sys

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_the_engine_example_in_the_readme_runs_and_delivers_its_effect(tmp_path):
    blocks = [b for b in _python_blocks(open(README).read()) if "send_outbox(store, PrintSender()" in b]
    assert len(blocks) == 1, "the README's engine example (Use it from Python) is missing"
    out = subprocess.run([sys.executable, "-c", blocks[0]], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "RunResult(outcome='done', job_id='note-1', state='notify_done'" in out.stdout
    assert "deliver note-1:email {'body': 'crash-safe by constr', 'to': 'ops@example.com'}" in out.stdout
