"""The README's PyTorch example runs as written (its first ```python block)."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_readme_example():
    text = open(os.path.join(ROOT, "README.md")).read()
    code = re.search(r"## PyTorch\n.*?```python\n(.*?)```", text, re.S).group(1)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([p for p in sys.path if p.endswith("python")] +
                                        [env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert "'optimizer': 'shampoo'" in out.stdout
