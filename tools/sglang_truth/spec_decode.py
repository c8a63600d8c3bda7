"""Dev-time only: SGLang 0.5.23's own pool sizing with a speculative draft, into a fixture.

Runs ``generate.run_case`` (SGLang's argument resolution — ``speculative_hook.py``
``handle_speculative_decoding`` / ``_handle_eagle_family`` included —, ``ModelConfig``,
``spec_aux_hidden_state.resolve_spec_aux_hidden_state_config`` on the draft's config.json and
``KVCacheConfigurator._resolve_memory_pool_config`` → ``DefaultPoolConfigurator``) with
``--speculative-algorithm`` and ``--speculative-draft-model-path`` (a directory holding the draft's
config.json: a kvplan preset's, or a committed config under ``tests/fixtures/configs``), and writes
``tests/fixtures/sglang/spec_decode.json``; ``tests/test_sglang_spec_decode.py`` compares kvplan's
``kv_pool_tokens`` and ``max_running_requests`` exactly. The stubs are ``generate.py``'s; in
``default_fraction`` cases the free memory after loading also lacks the draft's weights (kvplan's
``spec_draft_weights`` bytes), as SGLang measures it after the draft is loaded.

    /tmp/presets_sgl_venv/bin/python tools/sglang_truth/spec_decode.py
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
OUT = ROOT / "tests" / "fixtures" / "sglang" / "spec_decode.json"
GIB = 1 << 30
EAGLE3_HEAD = "tests/fixtures/configs/llama3-8B-eagle3.json"

#: (id, target preset, tp, mode, budget bytes, algorithm, draft: preset name / config path / None)
CASES = [
    ("llama-3.1-8b-eagle3-head-budget40g", "llama-3.1-8b", 1, "budget", 40 * GIB, "EAGLE3", EAGLE3_HEAD),
    ("llama-3.1-8b-eagle-head-budget40g", "llama-3.1-8b", 1, "budget", 40 * GIB, "EAGLE", EAGLE3_HEAD),
    ("llama-3.1-8b-standalone-1b-budget40g", "llama-3.1-8b", 1, "budget", 40 * GIB, "STANDALONE",
     "llama-3.2-1b"),
    ("llama-3.1-8b-tp2-standalone-1b-budget20g", "llama-3.1-8b", 2, "budget", 20 * GIB,
     "STANDALONE", "llama-3.2-1b"),
    ("deepseek-v3-tp8-nextn-budget20g", "deepseek-v3", 8, "budget", 20 * GIB, "NEXTN", None),
    ("deepseek-v3-tp8-eagle-self-path-budget20g", "deepseek-v3", 8, "budget", 20 * GIB, "EAGLE",
     "deepseek-v3"),
    ("qwen3-8b-standalone-0.6b-budget40g", "qwen3-8b", 1, "budget", 40 * GIB, "STANDALONE",
     "Qwen/Qwen3-0.6B"),
    ("llama-3.1-8b-standalone-1b-default", "llama-3.1-8b", 1, "default_fraction", 0, "STANDALONE",
     "llama-3.2-1b"),
    # hybrid SWA targets (HybridSWAPoolConfigurator): a one-layer full-attention head, and a
    # hybrid-SWA draft (its sliding layers sized as SWA layers)
    ("gpt-oss-20b-eagle3-head-budget40g", "gpt-oss-20b", 1, "budget", 40 * GIB, "EAGLE3",
     EAGLE3_HEAD),
    ("gpt-oss-120b-standalone-20b-budget40g", "gpt-oss-120b", 1, "budget", 40 * GIB, "STANDALONE",
     "gpt-oss-20b"),
    ("gpt-oss-120b-tp2-eagle3-head-budget30g", "gpt-oss-120b", 2, "budget", 30 * GIB, "EAGLE3",
     EAGLE3_HEAD),
    # a Mamba / linear-attention hybrid: the draft's intermediate states in the state pool
    ("qwen3-next-80b-a3b-tp4-standalone-0.6b-budget40g", "qwen3-next-80b-a3b", 4, "budget",
     40 * GIB, "STANDALONE", "Qwen/Qwen3-0.6B"),
    ("qwen3-next-80b-a3b-tp4-eagle3-head-budget40g", "qwen3-next-80b-a3b", 4, "budget", 40 * GIB,
     "EAGLE3", EAGLE3_HEAD),
]
#: More cases with extra flags: (id, target, tp, budget, algorithm, draft, flags).
FLAGGED = [
    ("llama-3.1-8b-eagle3-head-p64-budget40g", "llama-3.1-8b", 1, 40 * GIB, "EAGLE3", EAGLE3_HEAD,
     ["--page-size", "64"]),
    ("llama-3.1-8b-eagle3-head-mrr200-steps2-budget40g", "llama-3.1-8b", 1, 40 * GIB, "EAGLE3",
     EAGLE3_HEAD, ["--max-running-requests", "200", "--speculative-num-steps", "2",
                   "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "7"]),
    ("deepseek-v3-tp8-nextn-fp8-p64-budget20g", "deepseek-v3", 8, 20 * GIB, "NEXTN", None,
     ["--page-size", "64", "--kv-cache-dtype", "fp8_e4m3"]),
    ("qwen3-next-80b-a3b-tp4-standalone-0.6b-mamba200-budget40g", "qwen3-next-80b-a3b", 4,
     40 * GIB, "STANDALONE", "Qwen/Qwen3-0.6B", ["--max-mamba-cache-size", "200"]),
]


def _draft_dir(draft: str, workdir: Path) -> Path:
    """A directory with the draft's config.json (a committed file or a kvplan preset's)."""
    from kvplan.presets import model_presets

    path = workdir / f"draft-{Path(draft).stem.replace('/', '--')}"
    path.mkdir(parents=True, exist_ok=True)
    config = (json.loads((ROOT / draft).read_text(encoding="utf-8")) if draft.endswith(".json")
              else model_presets()[draft].config)
    (path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return path


def _draft_weights(case: dict) -> int:
    """kvplan's ``spec_draft_weights`` bytes for the case (what the stubbed free memory lacks)."""
    from kvplan.plan import FitQuery, make_plan
    from kvplan.presets import get_gpu, load_model

    q = FitQuery(engine="sglang", tokens=4096, tp=case["tp"], num_gpus=case["tp"],
                 speculative_algorithm=case["algorithm"],
                 speculative_draft_model_path=case["draft"])
    plan = make_plan(load_model(case["model"]), get_gpu("h100-sxm"), q)
    terms = {t.name: t.bytes for t in plan.budget.reserve_detail.terms}
    return int(terms.get("spec_draft_weights", 0))


def main() -> None:
    import generate
    import torch
    import transformers

    sglang = generate.install_stubs()
    logging.getLogger().setLevel(logging.WARNING)
    natives = generate.native_architectures(Path(sglang.__file__).parent)
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        rows = [(*c, []) for c in CASES] + [(i, m, t, "budget", b, a, d, f)
                                            for i, m, t, b, a, d, f in FLAGGED]
        for id_, model, tp, mode, budget, algorithm, draft, flags in rows:
            args = ["--speculative-algorithm", algorithm, *flags]
            if draft is not None:
                args += ["--speculative-draft-model-path", str(_draft_dir(draft, Path(tmp)))]
            case = {"id": id_, "model": model, "tp": tp, "mode": mode, "algorithm": algorithm,
                    "draft": draft, "args": args, "flags": flags}
            if mode == "budget":
                case["available_bytes"] = budget
            else:
                case["cuda_context_bytes"] = 0
                case["draft_weights_bytes"] = _draft_weights(case)
            record = generate.run_case(case, Path(tmp), natives)
            record["argv"] = [a if not a.startswith(tmp) else f"<{draft} config.json>"
                              for a in record["argv"]]
            record.pop("args", None)
            print(id_, json.dumps(record.get("sglang"))[:300], flush=True)
            records.append(record)
    out = {"generator": "tools/sglang_truth/spec_decode.py", "sglang_version": sglang.__version__,
           "torch_version": torch.__version__, "transformers_version": transformers.__version__,
           "device_stub": {"name": "NVIDIA H100 80GB HBM3", "capacity_mib": generate.H100_MIB,
                           "compute_capability": [9, 0]},
           "cases": records}
    OUT.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(records)} cases to {OUT}")


if __name__ == "__main__":
    main()
