"""The benchmark scripts (benchmarks/, benchmarks/studies/) as command-line programs."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for folder in ("benchmarks", "benchmarks/studies")
                 for p in (ROOT / folder).glob("*.py") if not p.name.startswith("_"))


def _runs_as_a_script(tree):
    return any(isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)
               for node in tree.body)


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_script_parses_its_command_line(path):
    # a script that ignored its arguments ran its whole study on `--help`, and overwrote
    # the published results it writes (bench_search_product.py, deep_schedule_summary.py)
    tree = ast.parse(path.read_text())
    if not _runs_as_a_script(tree):
        pytest.skip("a module, not a script")
    calls = {ast.unparse(node.func).rsplit(".", 1)[-1] for node in ast.walk(tree)
             if isinstance(node, ast.Call)}
    assert {"ArgumentParser", "parse_args"} <= calls, \
        f"{path.name} runs without parsing its arguments: --help would run it"
