"""``GPU.cuda_total_mib``: total device memory as CUDA (HIP on ROCm) reports it to the engines.

vLLM budgets from ``torch.cuda.mem_get_info()[1]`` (``cudaMemGetInfo`` total, the same figure as
``torch.cuda.get_device_properties(i).total_memory``); torch prints that total as
``total_memory=<bytes // 2**20>MB`` and its OOM message as ``total capacity of <bytes / 2**30:.2f> GiB``.
Each catalogue value carries its evidence in ``sources["cuda_total"]`` and a status in
``status["cuda_total"]`` (presets/README.md lists them).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.presets import gpus

MIB = 1 << 20
STATUSES = {"logged", "measured", "estimate"}
FIXTURES = Path(__file__).parent / "fixtures" / "vllm_logs"

#: Values read from public logs (``logged``: a GiB figure with 2 decimals, value = round(GiB × 1024))
#: or printed by torch (``measured``: ``total_memory=<MiB>MB``); see each preset's sources.
CITED = {
    "h100-sxm": (81089, "measured"),    # torch 2.7.0 / CUDA 12.8 / driver 570.148.08, Lambda 4×H100
    "h200": (143156, "measured"),       # torch print on a Modal H200 (ai-bot-pro/achatbot)
    "a10g": (22587, "measured"),        # torch 2.15 dev print in TorchCodec's CUDA decoding example
    "h100-nvl": (95232, "logged"),      # 93.00 GiB, ali-vilab/VACE#56
    "b200": (182630, "logged"),         # 178.35 GiB, unslothai/unsloth#3411
    "a100-80gb-sxm": (81224, "logged"),  # 79.32 GiB, vllm-project/vllm-omni#276
    "a100-40gb-sxm": (40325, "logged"),  # 39.38 GiB, vllm-project/vllm#16570
    "l40s": (45486, "logged"),          # 44.42 GiB, stepfun-ai/Step-Video-T2V#8
    "rtx-4090": (24207, "logged"),      # 23.64 GiB, TMElyralab/MuseTalk#76
    "rtx-5090": (32123, "logged"),      # 31.37 GiB, Wan-Video/Wan2.1#465
    "mi300x": (196592, "logged"),       # 191.98 GiB, vllm-project/vllm#7951 = rocm-smi VRAM total
    "l4": (22579, "logged"),            # 22.05 GiB, vLLM CI (L4s, vllm#2355) in vllm#39938
    "mi325x": (262128, "logged"),       # 255.98 GiB HIP OOM, vllm-project/vllm#41962 (= 256 GiB − 16 MiB)
    "gb200": (188733, "logged"),        # TRT-LLM's 'device total memory 184.31 GiB' (perf-sanity CI)
    "rtx-6000-ada": (45496, "logged"),  # 44.43 GiB torch OOM (ECC on, 46068 MiB), DINGYANB/MTVCrafter#21
    "rtx-pro-6000": (97249, "logged"),  # ds4 'total=94.97 GiB' on a 97887 MiB card, antirez/ds4#431
    "rtx-3090": (24146, "logged"),      # vLLM V0's 'total_gpu_memory=23.58GiB', vllm-project/vllm#10517
    "rtx-a6000": (48681, "logged"),     # 47.54 GiB torch OOM on 8x A6000, vllm-project/vllm#4417
    "gb10": (124611, "logged"),         # vLLM's '(67.92/121.69 GiB)' free/total check on a DGX Spark
}


def test_every_accelerator_has_a_sourced_cuda_total():
    catalogue = gpus()
    # issue #30: + rtx-6000-ada, rtx-pro-6000, a40, mi210; then + rtx-3090, rtx-a6000, gb10, r9700,
    # rx-7900-xt (the cards of the public vLLM logs 07/08/43/73, 24, 44, 20)
    assert len(catalogue) == 32
    for gpu in catalogue.values():
        assert isinstance(gpu.cuda_total_mib, int), gpu.id
        assert gpu.cuda_total_bytes == gpu.cuda_total_mib * MIB, gpu.id
        assert gpu.status.get("cuda_total") in STATUSES, gpu.id
        assert len(gpu.sources.get("cuda_total", "").strip()) > 40, gpu.id


def test_cuda_total_never_exceeds_what_nvidia_smi_reports():
    for gpu in gpus().values():
        if gpu.reported_mib is not None:
            assert gpu.cuda_total_mib <= gpu.reported_mib, gpu.id
        assert gpu.cuda_total_bytes <= max(gpu.capacity_bytes, gpu.marketed_bytes), gpu.id


@pytest.mark.parametrize(("gpu_id", "expected"), sorted(CITED.items()))
def test_cited_cuda_totals(gpu_id, expected):
    gpu = gpus()[gpu_id]
    assert (gpu.cuda_total_mib, gpu.status["cuda_total"]) == expected
    source = gpu.sources["cuda_total"]
    assert "https://github.com/" in source or "https://docs." in source
    if expected[1] == "measured":
        assert f"total_memory={expected[0]}MB" in source
    else:
        assert f"{expected[0] / 1024:.2f}" in source


def test_every_logged_or_measured_value_is_in_the_cited_table():
    cited = {g.id for g in gpus().values() if g.status["cuda_total"] != "estimate"}
    assert cited == set(CITED)


def test_estimates_follow_their_stated_rules():
    """Each estimate is derived from a cited value of the same family, or is the marketed size."""
    g = gpus()
    b200_reserve = g["b200"].reported_mib - g["b200"].cuda_total_mib
    assert b200_reserve == 729
    # GB200 (TRT-LLM's 184.31 GiB, now logged) and B300 (267.69 GiB in an unlinked copy):
    # round(GiB × 1024); the B200 reservation rule would give 188742 / 274311, outside the ranges
    assert g["gb200"].cuda_total_mib == round(184.31 * 1024) == 188733
    assert g["b300"].cuda_total_mib == round(267.69 * 1024) == 274115
    assert 189471 - b200_reserve > 188738 and 275040 - b200_reserve > 274120
    a10g_reserve = g["a10g"].reported_mib - g["a10g"].cuda_total_mib
    assert a10g_reserve == 441
    assert g["h100-pcie"].cuda_total_mib == g["h100-sxm"].cuda_total_mib == 81089
    assert g["a100-80gb-pcie"].cuda_total_mib == g["a100-80gb-sxm"].cuda_total_mib == 81224
    assert g["a100-40gb-pcie"].cuda_total_mib == g["a100-40gb-sxm"].cuda_total_mib == 40325
    mi300x_gap = g["mi300x"].marketed_bytes // MIB - g["mi300x"].cuda_total_mib
    assert mi300x_gap == 196608 - 196592 == 16
    assert g["mi325x"].cuda_total_mib == 256 * 1024 - 16 == 262128  # and the logged 255.98 GiB
    assert g["mi355x"].cuda_total_mib == 288 * 1024 - 16 == 294896
    assert g["mi210"].cuda_total_mib == 64 * 1024 - 16 == 65520  # and unlinked HIP OOMs' 63.98 GiB
    assert f"{65520 / 1024:.2f}" == "63.98"
    # the same ROCm rule for the Radeon parts (no public HIP total): marketed GiB − 16 MiB
    assert g["r9700"].cuda_total_mib == 32 * 1024 - 16 == 32752
    assert g["rx-7900-xt"].cuda_total_mib == 20 * 1024 - 16 == 20464
    # A40: round(GiB × 1024) of the 44.34 GiB two unlinked RunPod A40 copies print
    assert g["a40"].cuda_total_mib == round(44.34 * 1024) == 45404
    for gpu_id, mib in {"gaudi3": 122070, "tpu-v5e": 15258, "tpu-v5p": 97280, "tpu-v6e": 30517}.items():
        assert g[gpu_id].cuda_total_mib == g[gpu_id].marketed_bytes // MIB == mib
    for gpu in g.values():
        if gpu.status["cuda_total"] == "estimate":
            assert gpu.sources["cuda_total"].startswith(("No public", "No linkable", "Not a CUDA")), gpu.id


def test_l4_total_from_both_ci_prints():
    """vLLM's CI snapshot "total_memory=22.05GiB" → 22,575–22,584 MiB; PyTorch's vLLM CI "(0.9,
    19.84 GiB)" requested of the same 22.05 GiB (``ceil(total × 0.9)``) → ≤ 19.845 / 0.9 GiB: together
    22,575–22,579 MiB, which holds 22,579 = round(22.05 × 1024). The old estimate (nvidia-smi − the
    A10G's reservation = 22,593 MiB) prints 22.06 and is refuted by both."""
    low = max(-(-((22.05 - 0.005) * 1024) // 1), -(-((19.835 / 0.9) * 1024) // 1))
    high = min(int((22.05 + 0.005) * 1024), int(19.845 / 0.9 * 1024))
    assert (int(low), high) == (22575, 22579)
    assert low <= gpus()["l4"].cuda_total_mib <= high
    assert f"{22593 / 1024:.2f}" == "22.06" and f"{22579 / 1024:.2f}" == "22.05"


def test_cuda_totals_match_the_vllm_logs_in_the_fixtures():
    """vLLM prints ``total_gpu_memory`` as bytes / 2**30 with 2 decimals (worker.py, memory profile)."""
    a100 = json.loads((FIXTURES / "19-qwen2.5-vl-72b-4xa100-40gb-v0.8.3.json").read_text(encoding="utf-8"))
    assert a100["logged"]["total_gpu_memory_gib"] == 39.38
    assert round(gpus()["a100-40gb-sxm"].cuda_total_bytes / 2**30, 2) == 39.38
    sxm = gpus()["h100-sxm"]
    assert round(sxm.cuda_total_bytes / 2**30, 2) == 79.19
    assert sxm.reported_mib - sxm.cuda_total_mib == 470


def test_rtx_5090_total_from_vllms_own_print():
    """vLLM's V0 profile on an RTX 5090 (vllm#14452): "total_gpu_memory (31.37GiB) x
    gpu_memory_utilization (0.85) = 26.66GiB" → 31.37 ± 0.005 GiB (32,118–32,128 MiB) and
    26.66 ± 0.005 / 0.85 (32,112–32,123 MiB): 32,118–32,123 MiB, which holds the catalogue's 32,123."""
    low = max(-(-((31.37 - 0.005) * 1024) // 1), -(-((26.655 / 0.85) * 1024) // 1))
    high = min(int((31.37 + 0.005) * 1024), int(26.665 / 0.85 * 1024))
    assert (int(low), high) == (32118, 32123)
    gpu = gpus()["rtx-5090"]
    assert low <= gpu.cuda_total_mib <= high
    assert "https://github.com/vllm-project/vllm/issues/14452" in gpu.sources["cuda_total"]


def test_wsl2_reports_the_nvidia_smi_total():
    """Under WSL2 CUDA reports nvidia-smi's whole total: the RTX PRO 6000's 95.59 GiB
    (pytorch#182286) is its 97,887 MiB, as the RTX 5090's 31.84 GiB is its 32,607 MiB; native Linux
    keeps 638 and 484 MiB back."""
    g = gpus()
    assert f"{g['rtx-pro-6000'].reported_mib / 1024:.2f}" == "95.59"
    assert f"{g['rtx-5090'].reported_mib / 1024:.2f}" == "31.84"
    assert (g["rtx-pro-6000"].reported_mib - g["rtx-pro-6000"].cuda_total_mib,
            g["rtx-5090"].reported_mib - g["rtx-5090"].cuda_total_mib) == (638, 484)


def test_rtx_pro_6000_total_from_the_vllm_requests():
    """94.97 GiB ± 0.005 (97,245–97,254 MiB) with vLLM's requested memory on ~96 GB Blackwell
    cards — (0.91, 86.42), (0.97, 92.12), (0.9, 85.47) GiB, each ``ceil(total × fraction)`` printed
    to 0.01 — narrows to 97,245–97,251 MiB, which holds round(94.97 × 1024) = 97,249."""
    low = -(-((94.97 - 0.005) * 1024) // 1)
    high = int((94.97 + 0.005) * 1024)
    for fraction, gib in ((0.91, 86.42), (0.97, 92.12), (0.9, 85.47)):
        low = max(low, -(-((gib - 0.005) / fraction * 1024) // 1))
        high = min(high, int((gib + 0.005) / fraction * 1024))
    assert (int(low), high) == (97245, 97251)
    assert low <= gpus()["rtx-pro-6000"].cuda_total_mib <= high


def test_rtx_5090_native_linux_total_and_the_wsl2_figure():
    """Issue #30 says an engine printed 31.84 GiB for an RTX 5090: that is a WSL2 host, where CUDA
    reports the whole nvidia-smi 32,607 MiB (31.84 GiB ± 0.005 → 32,599–32,609 MiB; 0.95 × total
    printed as 30.25 GiB → 32,601–32,611 MiB; together 32,601–32,609). Native Linux reports 31.37 GiB
    (32,123 MiB), the catalogue's figure; both are named with their sources."""
    gpu = gpus()["rtx-5090"]
    assert (gpu.cuda_total_mib, gpu.reported_mib) == (32123, 32607)
    low = max(round((31.84 - 0.005) * 1024), int(-(-(30.245 / 0.95 * 1024) // 1)))
    high = min(int((31.84 + 0.005) * 1024), int(30.255 / 0.95 * 1024))
    assert (low, high) == (32601, 32609)
    assert low <= gpu.reported_mib <= high
    source = gpu.sources["cuda_total"]
    assert "(30.12/31.84 GiB)" in source and "https://github.com/Alex8791-cyber/cognithor/pull/318" in source
