"""``pip install .`` gives a working ``kvplan`` command outside the repository (issue #16, item 10).

The package is installed from a copy of the sources into a fresh venv, offline: ``--no-deps
--no-build-isolation`` (the venv's own setuptools builds it) and the runtime dependencies come from
the test interpreter's site-packages through a ``.pth`` file, so nothing is downloaded. The command
then runs from an empty directory, where only the installed package and its bundled presets exist.
"""

from __future__ import annotations

import json
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("kvplan", "presets", "pyproject.toml", "requirements.txt", "README.md")


def _copy_sources(target: Path) -> Path:
    src = target / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        else:
            shutil.copy2(path, src / name)
    return src


def test_pip_install_gives_a_kvplan_command(tmp_path: Path) -> None:
    src = _copy_sources(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    deps = [p for p in {*site.getsitepackages(), sysconfig.get_paths()["purelib"]} if Path(p).is_dir()]
    (Path(purelib) / "kvplan_test_deps.pth").write_text("\n".join(deps) + "\n")
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps",
                              "--no-build-isolation", "--no-index", str(src)],
                             capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-3000:]
    kvplan = venv / "bin" / "kvplan"
    assert kvplan.exists()
    work = tmp_path / "elsewhere"
    work.mkdir()

    where = subprocess.run([str(python), "-c", "import kvplan.presets as p; print(p.PRESETS_DIR)"],
                           cwd=work, check=True, capture_output=True, text=True, timeout=120)
    assert Path(where.stdout.strip()).is_relative_to(Path(purelib)), where.stdout
    assert Path(where.stdout.strip()).name == "_presets"

    base = [str(kvplan), "fit", "--model", "llama-2-7b", "--gpu", "h200", "--check",
            "--engine-version", "0.33"]
    ok = subprocess.run(base + ["--tokens", "4096", "--json"], cwd=work, capture_output=True,
                        text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    payload = json.loads(ok.stdout)
    # H200: ceil(150,109,945,856 B (CUDA total 143,156 MiB) × 0.92) = 138,101,150,188 − weights
    # 13,476,831,232 + vLLM's RoPE cos/sin cache 4,096 × 128 × 2 = 1,048,576 − reserve 1,294,184,542
    # (as test_cli.test_fit_json_numbers: same defaults on a ≥ 70 GiB non-A100 device) =
    # 123,329,085,838 B // 8,388,608 B per block = 14,701 blocks (14,702 before the cache);
    # 4,096 tokens = 256 blocks → (14,701 − 1) // 256 = 57 requests
    assert (payload["fits"], payload["num_blocks"], payload["max_requests"]) == (True, 14701, 57)
    beyond = subprocess.run(base + ["--tokens", "32768"], cwd=work, capture_output=True, text=True,
                            timeout=120)
    assert beyond.returncode == 1, beyond.stderr
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in beyond.stdout
    help_text = subprocess.run([str(kvplan), "--help"], cwd=work, capture_output=True, text=True,
                               timeout=120)
    assert help_text.returncode == 0 and help_text.stdout.startswith("usage: kvplan ")
