"""The README's commands, in order, on the bundled data: ``make run`` prints the table the README shows (baseline rows
as printed, the model row within the documented floating-point tolerance), and the own-data command followed by the
README's ``serve`` command serves the run that command just trained (not the bundled one)."""

import itertools
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
MODEL_TOLERANCE = 0.01  # what the README states for the model row across CPUs (two box types: 0.0063 apart)
DEADLINE_S = 1800  # a hang guard: one whole run takes 5.5-7 minutes on an idle 2-core box, 14 in CI on a slow one


def _bash_blocks() -> list[list[str]]:
    """The README's bash blocks, each as its commands (continuation lines joined, comments dropped)."""
    blocks = re.findall(r"```bash\n(.*?)```", README, flags=re.S)
    return [[line.split("#")[0].strip() for line in block.replace("\\\n", " ").splitlines()
             if line.split("#")[0].strip()] for block in blocks]


def _table(text: str) -> dict:
    """{system: [cell, ...]} of the first Markdown table with a "system" header in ``text``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| system |"))
    table = {}
    for row in itertools.takewhile(lambda line: line.startswith("|"), lines[start + 2:]):
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        table[cells[0]] = cells[1:]
    return {"header": lines[start], **table}


def _numbers(cells: list[str]) -> list[float]:
    return [float(x) for cell in cells for x in re.findall(r"\d+\.\d+", cell)]


def _run(command: str, tmp_path: Path) -> subprocess.CompletedProcess:
    args = shlex.split(command)
    if args[0].endswith("python"):
        args[0] = sys.executable
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=DEADLINE_S)


def test_make_run_prints_the_readme_table(tmp_path):
    make_run = re.search(r"^run: setup\n\t\$\(PY\) (-m pipelines\.train .*)$", (ROOT / "Makefile").read_text(), re.M)
    assert make_run, "the Makefile's run target"
    args = make_run.group(1).replace("--output_dir=artifacts", f"--output_dir={tmp_path / 'artifacts'}")
    result = subprocess.run([sys.executable, *shlex.split(args)], cwd=ROOT, capture_output=True, text=True,
                            timeout=DEADLINE_S)
    assert result.returncode == 0, result.stderr[-3000:]
    printed, documented = _table(result.stdout), _table(README)
    assert printed.keys() == documented.keys() and printed["header"] == documented["header"]
    for system in documented:
        if system in ("header", "model"):
            continue
        assert printed[system] == documented[system], system
    got, expected = _numbers(printed["model"]), _numbers(documented["model"])
    assert max(abs(a - b) for a, b in zip(got, expected, strict=True)) <= MODEL_TOLERANCE
    assert max(len(line) for line in result.stdout.splitlines() if line.startswith("|")) <= 120
    assert result.stdout.strip().splitlines()[-1].startswith(f"published: {tmp_path / 'artifacts'}/two_tower/latest")


# What the own-data tests add to the README's training commands: a short schedule without the variants or the time
# budget. They check the commands' columns and the hand-over to `serve` and `refresh`; the make-run test already
# trains the whole schedule, and a budget would make the run's length (and the gate's verdict) depend on how busy the
# box is.
SHORT_RUN = " --config.train.epochs=2 --config.train.variants=() --config.train.time_budget_s=0"


def test_the_own_log_commands_serve_the_run_they_trained(tmp_path):
    """"Your own log": the bundled log renamed to the README's columns stands in for /data/clicks.parquet."""
    block = next(b for b in _bash_blocks() if any("/data/clicks.parquet" in c for c in b))
    log = pd.read_csv(ROOT / "data" / "interactions.csv").rename(columns={"user_id": "uid", "item_id": "sku",
                                                                         "timestamp": "ts"})
    log.to_parquet(tmp_path / "clicks.parquet", index=False)
    train, serve = (c.replace("/data/clicks.parquet", str(tmp_path / "clicks.parquet"))
                    .replace("/srv/models", str(tmp_path / "models")) for c in block)
    trained = _run(train + SHORT_RUN, tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    run_id = re.fullmatch(r"published: \S+/two_tower/latest -> (\S+) \(serve it: .*\)",
                          trained.stdout.strip().splitlines()[-1]).group(1)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = shlex.split(serve)
    server = subprocess.Popen([sys.executable, *args[1:], f"--port={port}", "--log_level=warning"], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline, served = time.monotonic() + 300, None
        while served is None and time.monotonic() < deadline:
            assert server.poll() is None, server.stderr.read()[-3000:]
            try:
                served = httpx.get(f"http://127.0.0.1:{port}/v1/model", timeout=5).json()
            except httpx.TransportError:
                time.sleep(0.5)
        assert served is not None, "the server did not answer"
        assert served["run_id"] == run_id
    finally:
        server.terminate()
        server.wait(timeout=60)


@pytest.mark.parametrize("block", _bash_blocks())
def test_every_bash_block_uses_the_checkouts_python(block):
    for command in block:
        if "-m pipelines." in command:
            assert command.startswith(".venv/bin/python -m "), command


def test_the_catalogue_commands_serve_items_nobody_clicked(tmp_path):
    """"Items nobody has clicked yet": train with an item table holding items without interactions (a short run, to
    keep the suite fast: ``SHORT_RUN``), then refresh from a table with new items; both are published and served."""
    block = next(b for b in _bash_blocks() if any("pipelines.refresh" in c for c in b))
    log = pd.read_csv(ROOT / "data" / "interactions.csv")
    log.to_parquet(tmp_path / "clicks.parquet", index=False)
    items = pd.read_csv(ROOT / "data" / "items.csv")
    items = pd.concat([items, pd.DataFrame({"item_id": ["unclicked0", "unclicked1"], "genres": ["g1|g2", "g3"]})])
    items.assign(title=[f"item {i % 7} story" for i in range(len(items))]).to_csv(tmp_path / "items.csv", index=False)
    today = pd.concat([items.iloc[5:], pd.DataFrame({"item_id": ["new0"], "genres": ["g1"]})])
    today.assign(title="new story").to_csv(tmp_path / "items-today.csv", index=False)
    here = {"/data/clicks.parquet": tmp_path / "clicks.parquet", "/data/items.csv": tmp_path / "items.csv",
            "/data/items-today.csv": tmp_path / "items-today.csv", "/srv/models": tmp_path / "models"}
    train, refresh = block
    for example, path in here.items():
        train, refresh = train.replace(example, str(path)), refresh.replace(example, str(path))
    trained = _run(train + SHORT_RUN, tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    refreshed = _run(refresh, tmp_path)
    assert refreshed.returncode == 0, refreshed.stderr[-3000:]
    assert "published catalogue refresh" in refreshed.stdout and "1 new, 5 removed" in refreshed.stdout
    from retrieval import export

    ids = export.read_item_embeddings(tmp_path / "models" / "catalogue" / "latest" / "item_embeddings.parquet")[0]
    assert {"new0", "unclicked0", "unclicked1"} <= set(ids)


def _section(title: str) -> str:
    """The README's text under the heading ``## <title>``, up to the next heading of that level."""
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_python_api_example_shows_progress_and_keeps_the_bundled_models_latest():
    """Its lines log the stages' progress (the job takes over a minute) and publish into a directory of their own, not
    the model directory whose ``latest`` `make run` moved."""
    section = _section("Python API in ten lines")
    block = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    assert len([line for line in block.splitlines() if line.strip()]) == 10
    assert "logging.set_verbosity(logging.INFO)" in block and re.search(r"takes \d+-\d+ s", section)
    output = re.search(r'TrainingJob\(config, "([^"]+)"', block).group(1)
    bundled = re.search(r"--output_dir=(\S+)", (ROOT / "Makefile").read_text()).group(1)
    assert Path(output) != Path(bundled) and f'validate_job(config, "{output}"' in block
    assert f'CandidateGenerator.from_run("{output}/two_tower")' in block


def test_every_relative_output_directory_of_the_readme_is_git_ignored():
    """What the README's commands write into the checkout (``--output_dir=models``, the API's directory) stays out of
    ``git status``."""
    written = set(re.findall(r"--output_dir=(?!/)([\w./-]+)", README))
    written |= set(re.findall(r'TrainingJob\(config, "([^"/][^"]*)"', README))
    assert {"models", "artifacts/api-demo"} <= written
    ignored = subprocess.run(["git", "check-ignore", "--no-index", *(f"{path}/some_run" for path in sorted(written))],
                             cwd=ROOT, capture_output=True, text=True).stdout.split()
    assert sorted(ignored) == sorted(f"{path}/some_run" for path in written)


def test_the_readme_says_how_long_the_tests_take_and_names_the_fast_loop():
    commands = _section("Two commands")
    assert re.search(r"`make test` takes about \d+-\d+ minutes on 2 cores", commands)
    assert "`make test-fast`" in commands and "test-fast:" in (ROOT / "Makefile").read_text()


def test_the_layout_names_every_entry_point():
    layout = " ".join(_section("Layout").split())
    named = set(re.search(r"`pipelines/` holds the absl entry points \(([^)]*)\)", layout).group(1).replace("`", "")
                .replace(" ", "").split(","))
    entry_points = {p.stem for p in (ROOT / "pipelines").glob("*.py") if p.stem != "__init__"}
    assert named == entry_points


def test_the_catalogue_section_says_how_to_measure_cold_items_on_your_own_data():
    assert "--config.data.cold_item_fraction=" in _section("Items nobody has clicked yet")
