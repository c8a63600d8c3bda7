"""The runtime reserve term by term and the capacity a budget starts from, derived by hand from
the engine sources cited in ``kvplan/engines/vllm/memory.py``, ``sglang.py`` and ``trtllm.py``."""

from __future__ import annotations

import pytest

from kvplan.capacity import FitQuery, fit, memory_budget
from kvplan.engines import EngineSettings, get_engine
from kvplan.engines.reserve import CUDA_ESTIMATE_GAP_MIB, cuda_capacity
from kvplan.engines.vllm.memory import capture_sizes, forward_peak
from kvplan.errors import KVPlanError
from kvplan.plan import make_plan
from kvplan.presets import custom_gpu, get_gpu, load_model

GIB = 1 << 30
MIB = 1 << 20
H100 = get_gpu("h100-sxm")
A100_40 = get_gpu("a100-40gb-sxm")
LLAMA8 = load_model("llama-3.1-8b")


def _terms(engine: str, gpu=H100, arch=LLAMA8, **settings) -> dict[str, tuple[int, bool]]:
    eng = get_engine(engine)
    resolved = eng.resolve_settings(eng.own_settings(EngineSettings(**settings)), 4096, gpu, arch)
    return {t.name: (t.bytes, t.counted) for t in eng.runtime_reserve(arch, gpu, resolved, 4096).terms}


def test_capacity_is_cuda_total_with_the_other_figures_beside_it():
    """H100 SXM: CUDA 81,089 MiB (catalogue, measured) beside nvidia-smi 81,559 MiB and 80 GB."""
    cap = cuda_capacity(H100)
    assert (cap.bytes, cap.source, cap.status) == (81_089 * MIB, "cuda_total", "measured")
    assert (cap.marketed, cap.nvidia_smi) == (80_000_000_000, 81_559 * MIB)


def test_custom_gpu_gib_is_the_cuda_total_and_a_missing_value_is_a_labelled_estimate():
    cap = cuda_capacity(custom_gpu(24))
    assert (cap.bytes, cap.source) == (24 * GIB, "user")
    bare = H100.model_copy(update={"cuda_total_mib": None})
    est = cuda_capacity(bare)
    assert (est.bytes, est.status) == ((81_559 - CUDA_ESTIMATE_GAP_MIB) * MIB, "estimate")
    assert "estimate" in est.note and "512 MiB" in est.note
    no_smi = bare.model_copy(update={"reported_bytes": None, "reported_mib": None})
    assert cuda_capacity(no_smi).bytes == 80_000_000_000


def test_capture_sizes_per_release_rule():
    """stride 8 (v0.10): [1, 2, 4] + 8…512 step 8 = 3 + 64 = 67 sizes at 256 seqs; stride 16
    (v0.11.1+): [1, 2, 4] + 8…248 step 8 (31) + 256…512 step 16 (17) = 51; 1,024 seqs on
    Blackwell (cap 1,024): + 528…1,024 step 16 (32) = 83; all capped at max_num_batched_tokens."""
    assert len(capture_sizes("stride8", 256, 2048)) == 67
    assert len(capture_sizes("stride16", 256, 2048)) == 51
    assert len(capture_sizes("stride16", 1024, 8192, blackwell=True)) == 83
    assert capture_sizes("stride16", 256, 16) == [1, 2, 4, 8, 16]
    assert capture_sizes("stride16", 2, 8192) == [1, 2, 4]


def test_forward_peak_picks_the_widest_intermediate():
    """Llama-3.1-8B, 8,192 tokens, TP 1: MLP 3 × 14,336 = 43,008 beats attention 32 × 128 + 8 × 256 +
    32 × 128 = 10,240 → 8,192 × (3 × 4,096 + 43,008) × 2 B (residual, the normed input the layer
    holds, the block's output). TP 2 halves heads and MLP: 21,504; the hidden-size tensors stay whole."""
    assert forward_peak(LLAMA8, 8192, 1, "bf16")[0] == 8192 * (12_288 + 43_008) * 2 == 905_969_664
    assert forward_peak(LLAMA8, 8192, 2, "bf16")[0] == 8192 * (12_288 + 21_504) * 2


def test_vllm_terms_per_release():
    """Llama-3.1-8B on an H100 (1,024 seqs, 8,192 batched tokens): the sampler warm-up is the
    activation peak — FlashInfer 1,024 × 128,256 × 10 B = 1,313,341,440 (v0.33, v0.10–v0.11.0),
    the PyTorch sort 1,024 × 128,256 × 39 B = 5,122,031,616 (v0.11.1–v0.19: FlashInfer opt-in);
    CUDA graphs 51 sizes × 8,012,999 B counted only in v0.33, 67 sizes (stride 8) in v0.10–v0.11.0."""
    v033, v019, v011 = _terms("vllm@0.33"), _terms("vllm@0.19"), _terms("vllm@0.11")
    assert _terms("vllm@0.13") == v019
    assert v033 == {"activation_peak": (1_313_341_440, True), "non_torch": (143_129_785, True),
                      "cuda_graphs": (408_662_949, True)}
    assert v019["activation_peak"] == (5_122_031_616, True)
    assert v019["cuda_graphs"] == (408_662_949, False)
    assert v011["activation_peak"] == (1_313_341_440, True)
    assert v011["cuda_graphs"] == (67 * 8_012_999, False)


def test_v0_profiles_max_model_len_tokens_and_256_sequences():
    """V0 (0.6): max_num_batched_tokens = max(max_model_len, 2,048) = 16,000 at 16K (no chunked
    prefill up to 32K): forward 16,000 × 55,296 × 2 = 1,769,472,000 beats the sort sampler 256 ×
    128,256 × 39 = 1,280,507,904."""
    eng = get_engine("vllm@0.6")
    settings = eng.resolve_settings(eng.own_settings(EngineSettings()), 16_000, H100, LLAMA8)
    assert (settings.max_num_batched_tokens, settings.max_num_seqs) == (16_000, 256)
    terms = {t.name: t.bytes for t in eng.runtime_reserve(LLAMA8, H100, settings, 16_000).terms}
    assert terms["activation_peak"] == 1_769_472_000
    long = eng.resolve_settings(eng.own_settings(EngineSettings()), 65_536, H100, LLAMA8)
    assert long.max_num_batched_tokens == 2048  # chunked prefill on beyond 32K


def test_enforce_eager_max_num_seqs_and_sampler_switch():
    """enforce_eager: no graphs. max_num_seqs 8: sampler 8 rows, so the forward (905,969,664 B)
    is the peak, graphs [1, 2, 4, 8, 16] = 5 sizes. --flashinfer-sampler 0 on v0.33: the sort."""
    assert _terms("vllm@0.33", enforce_eager=True)["cuda_graphs"] == (0, True)
    few = _terms("vllm@0.33", max_num_seqs=8)
    assert few["activation_peak"] == (905_969_664, True)
    assert few["cuda_graphs"] == (5 * 8_012_999, True)
    assert _terms("vllm@0.33", flashinfer_sampler=False)["activation_peak"][0] == 5_122_031_616


def test_tp_adds_the_nccl_step_and_graph_buffers():
    """TP > 1: non-torch 143,129,785 + 447,428,218; graphs 51 × (8,012,999 + 2,403,900)."""
    arch = load_model("llama-3.1-70b")
    terms = _terms("vllm@0.33", arch=arch, tp=4)
    assert terms["non_torch"] == (590_558_003, True)
    assert terms["cuda_graphs"] == (51 * 10_416_899, True)


def test_sglang_shows_reserved_mem_terms_and_subtracts_only_what_was_held_before_loading():
    """H100 (79.19 GiB CUDA): chunked_prefill 8,192 → 8,192 × 1.5 = 12,288 MiB; 512 + 12,288 + 128 +
    256 × 2 = 13,440 MiB ≥ the 10 GiB floor; none counted (they set mem_fraction_static). Held
    before loading on an NVIDIA part: 0.509 GiB (``SGLANG_HELD_BEFORE_LOAD``, fitted on sglang_logs
    01, 02), 0 on a custom accelerator."""
    terms = _terms("sglang")
    assert terms["reserved_mem.chunked_prefill"] == (12_288 * MIB, False)
    assert sum(b for name, (b, _) in terms.items() if name.startswith("reserved_mem")) == 13_440 * MIB
    assert "reserved_mem.floor" not in terms
    assert terms["held_before_load"] == (546_534_588, True) == (round(0.509 * GIB), True)
    custom = memory_budget(make_plan(LLAMA8, custom_gpu(80.0), FitQuery(engine="sglang", tokens=4096)))
    assert custom.reserve_detail is not None
    assert [t.bytes for t in custom.reserve_detail.terms if t.name == "held_before_load"] == [0]
    explicit = _terms("sglang", gpu_util=0.8)
    assert list(explicit) == ["held_before_load"]


def test_trtllm_reserve_is_the_profiling_forward():
    """The forward of max_num_tokens 8,192 tokens (1,024 when typed: 113,246,208 B) and the non-torch
    memory fitted on TRT-LLM log 05 (``TRTLLM_NON_TORCH_BYTES``, int(2.52 GiB))."""
    assert _terms("trtllm@main") == {"activation_peak": (905_969_664, True),
                                     "non_torch": (2_705_829_396, True)}
    assert _terms("trtllm@main", max_num_batched_tokens=1024)["activation_peak"] == (113_246_208, True)


def test_overrides_replace_a_term_or_the_total():
    q = FitQuery(engine="vllm@0.33", tokens=4096, reserve_terms={"non_torch": 1.0})
    budget = memory_budget(make_plan(LLAMA8, H100, q))
    assert budget.reserve == 1_313_341_440 + GIB + 408_662_949
    assert memory_budget(make_plan(LLAMA8, H100,
                                   q.model_copy(update={"reserve_gib": 2.0}))).reserve == 2 * GIB
    with pytest.raises(KVPlanError) as err:
        memory_budget(make_plan(LLAMA8, H100, FitQuery(reserve_terms={"cuda_graphs": 1.0},
                                                       engine="vllm@0.19")))
    assert err.value.code == "reserve.term"


def test_hf_keeps_one_flat_labelled_term():
    r = fit(make_plan(LLAMA8, A100_40, FitQuery(engine="hf", tokens=1024)))
    assert [(t["name"], t["bytes"], t["basis"]) for t in r.reserve["terms"]] == [("flat", GIB, "flat")]
