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


@pytest.fixture
def common(monkeypatch, tmp_path):
    """``benchmarks/_common.py``, writing into ``tmp_path``."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    monkeypatch.setenv("SKDML_RESULTS", str(tmp_path))
    monkeypatch.delenv("SKDML_BENCH_OVERWRITE", raising=False)
    import _common

    return _common


def test_a_run_never_replaces_a_result_on_disk_unless_asked(common, tmp_path, monkeypatch):
    plt = pytest.importorskip("matplotlib.pyplot")

    def run(value):
        fig = plt.figure()
        written = common.save("table", f"| {value} |\n\n![plot](table_plot.png)",
                              {"value": value}, figures=[("table_plot", fig)], quick=False,
                              threads="1")
        plt.close(fig)
        return written

    first = run("published")
    assert [p.name for p in first] == ["table.md", "table.json", "table_plot.png"]
    second, third = run("rerun"), run("another rerun")  # the same second: told apart
    for later in (second, third):
        stem = later[0].name[: -len(".md")]
        assert stem.startswith("table.") and [p.name for p in later] == \
            [f"{stem}.md", f"{stem}.json", f"table_plot{stem[len('table'):]}.png"]
        assert f"(table_plot{stem[len('table'):]}.png)" in later[0].read_text()  # relinked
    assert len({p.name for p in first + second + third}) == 9
    assert "published" in (tmp_path / "table.md").read_text()
    monkeypatch.setenv("SKDML_BENCH_OVERWRITE", "1")
    assert run("replaced") == first and "replaced" in (tmp_path / "table.md").read_text()


def test_a_timed_out_command_takes_its_whole_process_tree_with_it(monkeypatch, tmp_path):
    import subprocess
    import sys
    import time

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import run

    pid_file = tmp_path / "pid"
    child = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', "
             "'import time; time.sleep(60)']); open(sys.argv[1], 'w').write(str(p.pid)); "
             "time.sleep(60)")
    assert run.run_command([sys.executable, "-c", child, str(pid_file)], timeout=3) is None
    grandchild = int(pid_file.read_text())
    for _ in range(50):  # reaped by init, or at worst a zombie
        state = subprocess.run(["ps", "-o", "stat=", "-p", str(grandchild)],
                               capture_output=True, text=True).stdout.strip()
        if state in ("", "Z"):
            break
        time.sleep(0.1)
    assert state in ("", "Z"), "the command's own child outlived the timeout"
