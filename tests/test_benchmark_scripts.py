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


def test_a_command_that_ends_or_times_out_takes_its_process_tree_with_it(monkeypatch, tmp_path):
    import os
    import sys
    import time

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import run

    def running(pid):  # not ended, nor a zombie waiting to be reaped
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False
        except OSError:  # no /proc: ask the kernel (a zombie still counts)
            try:
                os.kill(pid, 0)
                return True
            except ProcessLookupError:
                return False

    # a command that leaves a process behind (as a killed one does its workers): the tree is
    # stopped when the command ends, by a timeout or (here, so that no timing is involved) by
    # itself
    pid_file = tmp_path / "pid"
    child = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', "
             "'import time; time.sleep(120)']); open(sys.argv[1], 'w').write(str(p.pid))")
    assert run.run_command([sys.executable, "-c", child, str(pid_file)], timeout=None) == 0
    grandchild = int(pid_file.read_text())
    for _ in range(100):  # reaped by init (or a zombie until then)
        if not running(grandchild):
            break
        time.sleep(0.1)
    assert not running(grandchild), "the command's own child outlived it"
    started = time.perf_counter()
    assert run.run_command([sys.executable, "-c", "import time; time.sleep(120)"],
                           timeout=1) is None  # a timeout: None, at once
    assert time.perf_counter() - started < 60
