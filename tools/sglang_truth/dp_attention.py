"""SGLang 0.5.23's own per-rank pool under DP attention → ``tests/fixtures/sglang/dp_attention.json``
(dev-time only; the venv of ``setup.sh``): ``generate.py``'s ``run_case`` (``prepare_server_args``,
``ModelConfig``, ``KVCacheConfigurator``, ``resolve_max_num_reqs``, the same stubs) on DeepSeek-V3 and
Kimi-K2 with ``--tp T --enable-dp-attention --dp-size D`` for (T, D) in (8, 8), (8, 4), (8, 2),
(16, 16), (16, 8), a 20 GiB and a 3 GiB budget, KV auto and fp8_e4m3 — 40 cases.
``tests/test_sglang_dp_attention.py`` compares kvplan with every case.

``$VENV/bin/python tools/sglang_truth/dp_attention.py`` (about two minutes).
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generate import GIB, H100_MIB, install_stubs, native_architectures, run_case  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests/fixtures/sglang/dp_attention.json"
LAYOUTS = ((8, 8), (8, 4), (8, 2), (16, 16), (16, 8))


def grid() -> list[dict]:
    cases = []
    for model in ("deepseek-v3", "kimi-k2"):
        for tp, dp in LAYOUTS:
            for gib in (20, 3):
                for kv in ("auto", "fp8_e4m3"):
                    cases.append({
                        "id": f"{model}-tp{tp}-dp{dp}-dpattn-budget{gib}g-{kv}-p1", "model": model,
                        "mode": "budget", "tp": tp, "available_bytes": gib * GIB, "kv_cache_dtype": kv,
                        "args": ["--enable-dp-attention", "--dp-size", str(dp)]})
    return cases


def main() -> None:
    sglang = install_stubs()
    logging.getLogger().setLevel(logging.WARNING)
    natives = native_architectures(Path(sglang.__file__).parent)
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in grid():
            try:
                record = run_case(case, Path(tmp), natives)
            except Exception as exc:  # recorded: the test refuses "error" records
                record = {**case, "error": f"{type(exc).__name__}: {exc}",
                          "traceback": traceback.format_exc(limit=-4)}
            print(case["id"], json.dumps(record.get("sglang") or record.get("error"))[:200], flush=True)
            records.append(record)
    OUT.write_text(json.dumps({"generator": "tools/sglang_truth/dp_attention.py",
                               "sglang_version": sglang.__version__,
                               "device_stub": {"name": "NVIDIA H100 80GB HBM3", "capacity_mib": H100_MIB,
                                               "compute_capability": [9, 0]},
                               "cases": records}, indent=1) + "\n",
                   encoding="utf-8")
    print(f"wrote {len(records)} cases to {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
