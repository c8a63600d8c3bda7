"""SGLang's release records: the default ``--mem-fraction-static`` each release computes, hand
derived from its ``server_args.py`` (``pip download sglang==X --no-deps``), and the records the
public logs' versions select."""

from __future__ import annotations

import pytest
from test_sglang_logs import DOCS

from kvplan.engines import get_engine
from kvplan.engines.sglang.engine import (
    SGLANG_RELEASES,
    sglang_mem_fraction_static,
    sglang_reserved_mem,
)

MIB = 1 << 20
RECORDS = {r.key: r for r in SGLANG_RELEASES}


def fraction(key: str, mib: int, tp: int, pp: int = 1) -> float:
    return sglang_mem_fraction_static(mib * MIB, tp, pp, False, RECORDS[key])


def test_the_records_oldest_first_and_the_latest():
    # 0.5.7: --limit-mm-data-per-request (server_args.py; absent at 0.5.6), memory rules of 0.5.5
    assert list(RECORDS) == ["0.4", "0.4.5", "0.4.6", "0.4.8", "0.4.9", "0.5.3", "0.5.5", "0.5.7", "0.5.23"]
    assert get_engine("sglang").record is SGLANG_RELEASES[-1]


@pytest.mark.parametrize(("tp", "want"), [(1, 0.88), (2, 0.87), (3, 0.87), (4, 0.85), (8, 0.81), (16, 0.79)])
def test_0_4_by_tp_size_alone(tp: int, want: float):
    """0.4.3.post4 ``__post_init__``: by tp_size, whatever the memory (an L4 or an MI355X)."""
    assert fraction("0.4", 22579, tp) == fraction("0.4", 294896, tp) == want


def test_0_4_5_above_80_gib_reserves_13_gib_unrounded():
    """0.4.5.post3: ≤ 81,920 MiB the tp table; an H200 (143,771 MiB) (143,771 − 13,312) / 143,771."""
    assert fraction("0.4.5", 81559, 4) == 0.85
    assert fraction("0.4.5", 143771, 1) == (143771 - 13312) / 143771


def test_0_4_6_above_96_gib():
    """0.4.6.post5: above 81,920 MiB 0.88, then above 96 GiB min(0.88 + 49,152 × 0.12 / mem,
    (mem − 18,432) / mem): an H200 min(0.92102…, 0.87179…) = 0.87179…, an MI355X 294,912 MiB
    min(0.9, 0.9375) = 0.9; the table is by tp × pp (tp 2 × pp 2 = 4 → 0.85)."""
    assert fraction("0.4.6", 143771, 1) == (143771 - 18432) / 143771
    assert fraction("0.4.6", 294912, 8) == pytest.approx(0.9, abs=1e-12)
    assert fraction("0.4.6", 81559, 2, pp=2) == 0.85


def test_0_4_8_reserved_by_memory_and_parallel_size():
    """0.4.8.post1–0.5.2: H100 81,559 MiB, tp 1: (9.5 + 0.5) GiB → round(71,319 / 81,559, 3) =
    0.874; an L4 at tp 4: (2.8 + 0.4) GiB = 3,276.8 → 0.855; an H200 at tp 8: 16 GiB → 0.886."""
    assert fraction("0.4.8", 81559, 1) == 0.874
    assert fraction("0.4.8", 22579, 4) == 0.855
    assert fraction("0.4.8", 143771, 8) == 0.886


def test_0_5_reserved_mem_tables():
    """0.5.3+: 512 + max(chunked, 2048) × 1.5 + max_bs × 2 + tp·pp/8 × 1024 MiB (10 GiB floor above
    60 GiB). An RTX 5090 (nvidia-smi 32,607 MiB) at tp 1: 0.5.3 chunked 2048, bs 16 →
    512 + 3,072 + 32 + 128 = 3,744 → 0.885; 0.5.5 bs 24 → 3,760 → 0.885; 0.5.23 chunked
    4096, bs 48 → 6,880 → 0.789. An MI355X 294,912 MiB at tp 8: 512 + 24,576 + 1,024 + 1,024 =
    27,136 → 0.908 in every 0.5 record."""
    assert [fraction(k, 32607, 1) for k in ("0.5.3", "0.5.5", "0.5.23")] == [0.885, 0.885, 0.789]
    assert sum(t[1] for t in sglang_reserved_mem(32607 * MIB, 1, 1, RECORDS["0.5.3"])) == 3744
    assert sum(t[1] for t in sglang_reserved_mem(32607 * MIB, 1, 1, RECORDS["0.5.5"])) == 3760
    assert {fraction(k, 294912, 8) for k in ("0.5.3", "0.5.5", "0.5.23")} == {0.908}


def test_an_older_rule_is_one_informational_term():
    """Before 0.5.3 the reserve is not itemised: one term, (1 − fraction) × memory."""
    (term,) = sglang_reserved_mem(81559 * MIB, 1, 1, RECORDS["0.4"])
    assert term[0] == "rule" and term[1] == pytest.approx(0.12 * 81559)


@pytest.mark.parametrize(("log_id", "key"), [("01", "0.4"), ("04", "0.5.7"), ("05", "0.5.7")])
def test_the_logs_versions_select_records(log_id: str, key: str):
    """0.4.3.post4 → 0.4; the 0.5.8.post1 ROCm build → 0.5.7 (was 0.5.5: the 0.5.7 record, which
    adds only --limit-mm-data-per-request to 0.5.5's memory rules, now covers 0.5.7–0.5.22)."""
    record, how = get_engine("sglang").release_for_version(DOCS[log_id]["sglang_version"])
    assert record.key == key, how


def test_the_defaults_the_logs_printed():
    """01 (0.4.3.post4, 4 × L4): 0.85 printed, the 0.4 table at tp 4. 04/05 (0.5.8.post1 ROCm, 8 ×
    MI355X, rocminfo 288 GiB): 0.908 before ``adjust_mem_fraction_for_vlm`` (not modelled): Kimi
    K2.5's MoonViT (27 layers × 1,152) gives 0.95 × (1 − 0.1 × (27 × 1152² / (24 × 1024²) − 1)),
    and 0.908 × that = 0.8260405859375, the printed value."""
    assert fraction("0.4", 22579, 4) == DOCS["01"]["settings"]["mem_fraction_static"] == 0.85
    vlm = 0.95 * (1 - 0.1 * (27 * 1152**2 / (24 * 1024**2) - 1))
    assert fraction("0.5.5", 294912, 8) == 0.908
    assert 0.908 * vlm == pytest.approx(DOCS["04"]["settings"]["mem_fraction_static"], abs=1e-15)


def test_the_default_divides_nvidia_smis_total_not_cudas():
    """``get_device_memory_capacity`` reads ``nvidia-smi --query-gpu=memory.total``: an H100 SXM's
    81,559 MiB gives round((81,559 − 13,440) / 81,559, 3) = 0.835 under 0.5.23, where CUDA's 81,089
    MiB would give 0.834; an L4 at tp 4 (23,034 MiB; 4096 × 1.5 + 160 × 2 + 512 + 512 = 7,488 MiB)
    0.675, not 0.668 — the budget still starts from CUDA's total (``Engine.capacity``)."""
    from kvplan.capacity import FitQuery, fit
    from kvplan.plan import make_plan
    from kvplan.presets import get_gpu, load_model

    arch = load_model("llama-3.1-8b")
    for gpu_id, tp, want, cuda_based in (("h100-sxm", 1, 0.835, 0.834), ("l4", 4, 0.675, 0.668)):
        gpu = get_gpu(gpu_id)
        plan = make_plan(arch, gpu, FitQuery(engine="sglang", tokens=4096, tp=tp, num_gpus=tp))
        assert plan.settings.gpu_util == want
        assert fraction("0.5.23", gpu.cuda_total_mib, tp) == cuda_based
        result = fit(plan, search_gpus=False)
        assert result.gpu_capacity_bytes == gpu.cuda_total_mib * MIB
        terms = {t.name for t in plan.budget.reserve_detail.terms if not t.counted}
        assert "reserved_mem.base" in terms
