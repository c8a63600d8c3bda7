"""The recurrent-state page of Nemotron-H (Mamba-2) and Jamba (Mamba-1) against vLLM 0.33's own
model classes (``tests/fixtures/vllm_truth/state_pages.json``, ``tools/vllm_truth/state_pages.py``:
``NemotronHForCausalLMConfig`` hook, ``get_mamba_state_shape_from_config`` /
``get_mamba_state_dtype_from_config``, ``MambaSpec.page_size_bytes``), and the SSM dtype hook of
older releases read from their source. Falcon-H1: its Mamba-2 groups replicated over TP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.arch import ModelArch, Recurrent
from kvplan.config_import import parse_config
from kvplan.engines import engine_view, get_engine
from kvplan.engines.base import resolve_dtype
from kvplan.engines.kinds import TokenLayout, layer_state_bytes
from kvplan.engines.settings import EngineSettings

ROOT = Path(__file__).resolve().parent.parent
TRUTH = json.loads((ROOT / "tests/fixtures/vllm_truth/state_pages.json").read_text(encoding="utf-8"))
CASES = {c["id"]: c for c in TRUTH["cases"]}
NEMOTRON = json.loads((ROOT / "tests/fixtures/vllm_truth/configs/nemotron-3-nano-30b-a3b.json")
                      .read_text(encoding="utf-8"))
JAMBA = json.loads((ROOT / "presets/models/jamba-1.5-mini.json").read_text(encoding="utf-8"))["config"]
TORCH = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16"}


def _config(model: str) -> dict[str, object]:
    base = NEMOTRON if model.startswith("nemotron") else JAMBA
    config = {k: v for k, v in base.items() if not k.startswith("_")}
    if model.endswith("|no-ssm-key"):
        config.pop("mamba_ssm_cache_dtype")
    return config


def _state_layer(arch: ModelArch) -> Recurrent:
    return next(layer for layer in arch.distinct_layers() if isinstance(layer, Recurrent))


def test_fixture_scope() -> None:
    assert TRUTH["vllm_version"] == "0.33.0" and len(CASES) == 36
    assert {c["model_class"] for c in CASES.values()} == {"NemotronHForCausalLM", "JambaForCausalLM"}
    assert CASES["nemotron-3-nano-30b-a3b|no-ssm-key|tp1|ssm-auto"]["resolved_ssm_cache_dtype"] == "float32"


@pytest.mark.parametrize("key", sorted(k for k in CASES if k.endswith("ssm-auto")))
def test_state_page_matches_vllm(key: str) -> None:
    """``--mamba-ssm-cache-dtype auto`` (the default): kvplan's per-layer state on one rank, with
    vLLM's NemotronH hook (``Vllm.nemotron_ssm_dtype``), equals ``MambaSpec.page_size_bytes``."""
    case = CASES[key]
    arch = parse_config(_config(case["model"]))
    engine = get_engine("vllm@0.33")
    layer = _state_layer(arch)
    if arch.architecture == "NemotronHForCausalLM":
        layer = engine.nemotron_ssm_dtype(layer)  # type: ignore[attr-defined]
    assert engine.state_bytes(layer, resolve_dtype("bf16"), case["tp"]) == case["page_size_bytes"]


@pytest.mark.parametrize("key", sorted(k for k in CASES if not k.endswith("ssm-auto")))
def test_state_formula_with_an_explicit_ssm_dtype(key: str) -> None:
    """An explicit ``--mamba-ssm-cache-dtype`` (not a kvplan setting): the byte formula
    (``kinds.layer_state_bytes``) with that SSM dtype equals vLLM's page."""
    case = CASES[key]
    layer = _state_layer(parse_config(_config(case["model"])))
    layer = layer.model_copy(update={"ssm_dtype": TORCH[case["mamba_ssm_cache_dtype"]]})
    assert layer_state_bytes(layer, resolve_dtype("bf16"), case["tp"], TokenLayout()) == \
        case["page_size_bytes"]


@pytest.mark.parametrize(("release", "page"), [
    # 0.33 hook default float32: state 2,134,016 B; prefix caching → mamba cache mode "align":
    # block 16 · cdiv(2,134,016, 16 · 1,024) = 2,096 tokens × 1,024 B
    ("vllm@0.33", 2_146_304),
    # 0.13–0.19.1 hook default float16: state 1,085,440 B; "all" (SupportsMambaPrefixCaching):
    # block 9 × lcm(16, chunk 128) = 1,152 tokens × 1,024 B
    ("vllm@0.19", 1_179_648),
    # 0.11.0: no hook, the model dtype (bf16, the same bytes as float16); prefix caching turned off
    # for hybrids ("none"): block 16 · cdiv(1,085,440, 16,384) = 1,072 tokens × 1,024 B
    ("vllm@0.11", 1_097_728),
])
def test_nemotron_without_ssm_key_per_release(release: str, page: int) -> None:
    """A Nemotron-H config.json without ``mamba_ssm_cache_dtype``: the padded state page of the view
    (prefix caching on; the release's Mamba cache mode, ``VllmRelease.mamba_prefix``; 2 KV heads ×
    128 × 2 × 2 B = 1,024 B per attention token)."""
    arch = parse_config(_config("nemotron-3-nano-30b-a3b|no-ssm-key"))
    view = engine_view(arch, release, "auto", EngineSettings(tp=1, enable_prefix_caching=True))
    rule = next(r for r in view.rules if r.kind.holds_state)
    assert rule.state_bytes == page  # type: ignore[attr-defined]


#: Falcon-H1-0.5B (tests/fixtures/vllm_truth/configs/falcon-h1-0.5b.json): d_ssm 1,536, 1 group of
#: state 128, 24 heads of 64, conv kernel 4.
FALCON_H1 = {k: v for k, v in json.loads((Path(__file__).resolve().parent / "fixtures/vllm_truth/"
             "configs/falcon-h1-0.5b.json").read_text(encoding="utf-8")).items() if not k.startswith("_")}


@pytest.mark.parametrize(("tp", "conv_channels", "state"), [
    (1, 1792, 403_968),   # conv 1,536 + 2·1·128 = 1,792 × 3 × 2 + SSM 24·64·128 × 2 = 10,752 + 393,216
    (2, 1024, 202_752),   # groups 1 → 2: (1,536 + 2·2·128) / 2 = 1,024 × 3 × 2 + 12·64·128 × 2
    (4, 640, 102_144),    # groups 1 → 4: (1,536 + 2·4·128) / 4 = 640 × 3 × 2 + 6·64·128 × 2
])
def test_falcon_h1_state_replicates_groups_over_tp(tp: int, conv_channels: int, state: int) -> None:
    """vLLM 0.33 ``mamba_utils.py`` ``MambaStateShapeCalculator.mamba2_state_shape``: groups that do
    not divide the TP size are replicated (``extra_groups_for_head_shards``: tp − n_groups more), so
    the conv state per rank is (inner + 2 × (groups + extra) × state) / tp — (3, 1792), (3, 1024),
    (3, 640) for TP 1, 2, 4 when run on CPU — not (inner + 2 × groups × state) / tp. The SSM state
    is heads / tp × head size × state, in the model dtype (bf16, no SSM dtype hook for Falcon-H1)."""
    arch = parse_config(FALCON_H1)
    layer = next(layer for layer in arch.layers if isinstance(layer, Recurrent))
    bf16 = resolve_dtype("bf16")
    assert layer_state_bytes(layer, bf16, tp, TokenLayout()) == state
    assert state == conv_channels * 3 * 2 + 24 // tp * 64 * 128 * 2
