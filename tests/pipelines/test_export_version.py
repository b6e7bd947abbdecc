"""``pipelines.export``'s automatic version: one more than the highest there, never beyond what TF Serving reads."""

import subprocess
import sys
from pathlib import Path

from retrieval.serving.demo_run import write_demo_run

ROOT = Path(__file__).resolve().parents[2]


def test_no_automatic_version_beyond_int64(tmp_path):
    run = write_demo_run(tmp_path / "run")
    highest = tmp_path / "models" / "user_tower" / str(2**63 - 1)
    highest.mkdir(parents=True)
    done = subprocess.run([sys.executable, "-m", "pipelines.export", f"--run_dir={run.root}",
                           f"--base_dir={tmp_path / 'models'}", "--allow_unpublished"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert [line for line in done.stderr.splitlines() if line.startswith("error:")] == [
        f"error: file {highest.parent}: the highest version there, {2**63 - 1}, leaves no next one within int64 (at "
        f"most {2**63 - 1}, what TF Serving reads); pass --version with a free number below it, or export under "
        "another --name"]
    assert sorted(path.name for path in highest.parent.iterdir()) == [highest.name]
