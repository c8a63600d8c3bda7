"""TensorRT-LLM KV-cache sizing, transcribed line by line, for kvplan's fixture tests (dev-time).

TensorRT-LLM cannot be run here: PyPI's ``tensorrt-llm`` (1.2.1 and older) is a 10 kB sdist that
redirects to pypi.nvidia.com (unreachable), its code imports the CUDA-only C++ bindings
(``tensorrt_llm.bindings``) at module load, and the repository snapshot (2.5 GB) is over the
fetch limit. So this script re-states, in plain Python and in TRT-LLM's own order of operations,
the arithmetic of the PyTorch backend's default (V1) ``KVCacheManager`` path, from the stored
copies of the files below, and writes ``tests/fixtures/trtllm/cases.json`` with
``computed_by: "transcribed"``. It imports nothing from kvplan.

Citations. Every transcribed line carries ``# <file key>:<function>+<n>``: the file key is one of
``SOURCES`` (path and the commit of the stored copy read), ``<function>`` the function or method,
and ``+<n>`` the line counted from its ``def`` line (``+0``); the code index serves files by
character offset, so absolute line numbers were not available. ``tools/trtllm_truth/FINDINGS.md``
quotes the cited statements.

Modelled inputs (not TRT-LLM arithmetic, a GPU run would measure them): the profiled peak
(weights + activations + temporary KV + non-torch memory) and the free memory when the final
manager is built (``torch.cuda.mem_get_info`` after the estimation managers are torn down).

Run: ``python3 tools/trtllm_truth/generate.py`` (stdlib only) from the repository root.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "trtllm" / "cases.json"

SOURCES = {
    "rm": {"repo": "NVIDIA/TensorRT-LLM",
           "path": "tensorrt_llm/_torch/pyexecutor/resource_manager.py",
           "commit": "001541bad83b84ae4c5c4a279e464572d5f690f7"},
    "util": {"repo": "NVIDIA/TensorRT-LLM", "path": "tensorrt_llm/_torch/pyexecutor/_util.py",
             "commit": "0004396720054fd8e205cbf616f21f0b57c6b412"},
    "mapping": {"repo": "NVIDIA/TensorRT-LLM", "path": "tensorrt_llm/mapping.py",
                "commit": None, "code_index_file_id": "61759801786"},
    "utils": {"repo": "NVIDIA/TensorRT-LLM", "path": "tensorrt_llm/_utils.py",
              "commit": None, "code_index_file_id": "52995752"},
    "mc": {"repo": "NVIDIA/TensorRT-LLM", "path": "tensorrt_llm/_torch/model_config.py",
           "commit": None, "code_index_file_id": "2419649560"},
    "arch": {"repo": "NVIDIA/TensorRT-LLM", "path": "tensorrt_llm/_torch/models/_arch_index.py",
             "commit": "065ff9e93780bc0bdbfdbc7156a306ca14f5850c"},
    "auto": {"repo": "NVIDIA/TensorRT-LLM", "path": "tensorrt_llm/_torch/models/modeling_auto.py",
             "commit": "01bffee125e24ebe5b4a63437840a9422eb70868"},
    "llm_args": {"repo": "NVIDIA/TensorRT-LLM", "path": "tensorrt_llm/llmapi/llm_args.py",
                 "commit": None, "code_index_file_id": "7019226376"},
}
VERSION_NOTE = ("NVIDIA/TensorRT-LLM main-branch copies from the code index (2026; _util.py is "
                "newer than resource_manager.py: both carry the V1 KVCacheManager path used here). "
                "Not a tagged release: PyPI's newest, 1.2.1, has no readable wheel.")

GIB = 1 << 30
MIB = 1 << 20

# _arch_index.py MODEL_ARCH_TO_MODULE keys: the architectures the PyTorch backend can build;
# modeling_auto.py AutoModelForCausalLM.from_config+26 raises "Unknown architecture" otherwise.
PYTORCH_ARCHITECTURES = frozenset({
    "AfmoeForCausalLM", "BartForConditionalGeneration", "BertForSequenceClassification",
    "CLIPVisionModel", "Cohere2ForCausalLM", "Cosmos3ForConditionalGeneration",
    "DeciLMForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM",
    "DeepseekV4ForCausalLM", "EAGLE3LlamaForCausalLM", "Eagle3DeepSeekV3ForCausalLM",
    "Exaone4ForCausalLM", "Exaone4_5_ForConditionalGeneration", "ExaoneMoEForCausalLM",
    "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration", "Gemma4AssistantForCausalLM",
    "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration",
    "Gemma4UnifiedForConditionalGeneration", "Glm4MoeForCausalLM", "GlmMoeDsaForCausalLM",
    "GptOssForCausalLM", "HCXVisionForCausalLM", "HCXVisionModel", "HunYuanDenseV1ForCausalLM",
    "HunYuanMoEV1ForCausalLM", "KimiK25ForConditionalGeneration",
    "KimiK3ForConditionalGeneration", "KimiLinearForCausalLM", "LagunaForCausalLM",
    "Llama4ForConditionalGeneration", "LlamaForCausalLM", "LlavaLlamaModel",
    "LlavaNextForConditionalGeneration", "MBartForConditionalGeneration",
    "MTPDraftModelForCausalLM", "MiniCPMV4_6ForConditionalGeneration", "MiniMaxM2ForCausalLM",
    "MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration",
    "Mistral3ForConditionalGeneration", "MistralForCausalLM", "MistralLarge3EagleForCausalLM",
    "MistralLarge3ForCausalLM", "MixtralForCausalLM", "MllamaForConditionalGeneration",
    "NemotronForCausalLM", "NemotronHForCausalLM", "NemotronHPuzzleForCausalLM",
    "NemotronH_Nano_Omni_Reasoning_V3", "NemotronH_Nano_VL_V2", "Phi3ForCausalLM",
    "Phi4MMForCausalLM", "PixtralForConditionalGeneration", "PixtralVisionModel",
    "Qwen2ForCausalLM", "Qwen2ForProcessRewardModel", "Qwen2ForRewardModel",
    "Qwen2MoeForCausalLM", "Qwen2VLForConditionalGeneration",
    "Qwen2_5_VLForConditionalGeneration", "Qwen3ForCausalLM", "Qwen3ForTextEmbedding",
    "Qwen3MoeForCausalLM", "Qwen3NextForCausalLM", "Qwen3VLForConditionalGeneration",
    "Qwen3VLMoeForConditionalGeneration", "Qwen3_5ForCausalLM",
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForCausalLM",
    "Qwen3_5MoeForConditionalGeneration", "QwenImageBenchForConditionalGeneration",
    "SeedOssForCausalLM", "SiglipVisionModel", "Starcoder2ForCausalLM", "Step3p5ForCausalLM",
    "Step3p7ForConditionalGeneration", "T5ForConditionalGeneration",
    "WhisperForConditionalGeneration",
})

# tensorrt_llm/_utils.py _binding_dtype_bits (the KV dtypes these cases use).
DTYPE_BITS = {"HALF": 16, "BF16": 16, "FLOAT": 32, "FP8": 8, "NVFP4": 4}


def get_size_in_bytes(num_elements: int, dtype: str) -> int:
    """``_utils.py get_size_in_bytes``: bits × elements, which must be whole bytes."""
    total_num_bits = DTYPE_BITS[dtype] * num_elements  # utils:get_size_in_bytes+1
    assert total_num_bits % 8 == 0  # utils:get_size_in_bytes+2
    return total_num_bits // 8  # utils:get_size_in_bytes+3


def pp_layers(num_layers: int, pp_size: int, pp_rank: int) -> list[int]:
    """``Mapping.pp_layers``: ``torch.tensor_split(arange(n), pp)`` — the first ``n % pp`` ranks
    get one extra layer (no ``pp_partition`` given)."""
    base, extra = divmod(num_layers, pp_size)  # mapping:Mapping.pp_layers+13 (tensor_split)
    start = pp_rank * base + min(pp_rank, extra)
    return list(range(start, start + base + (1 if pp_rank < extra else 0)))


def get_pp_layers(num_layers: int, pp_size: int, pp_rank: int) -> list[int]:
    """``resource_manager.py get_pp_layers`` without speculative layers or a layer mask."""
    layers = pp_layers(num_layers, pp_size, pp_rank)  # rm:get_pp_layers+15
    if len(layers) == 0:  # rm:get_pp_layers+27
        layers.append(0)  # rm:get_pp_layers+29
    return layers


class Model:
    """The fields of the HF config TRT-LLM's sizing reads (``model_config.pretrained_config``)."""

    def __init__(self, config: dict, kv_quant: str | None) -> None:
        text = config.get("text_config")
        self.config = text if isinstance(text, dict) and text.get("num_hidden_layers") else config
        self.architecture = (config.get("architectures") or [None])[0]
        self.kv_quant = kv_quant  # QuantConfig.kv_cache_quant_algo: None, "FP8" or "NVFP4"

    def get(self, key, default=None):
        return self.config.get(key, default)

    def get_num_attention_layers(self) -> int:
        """``ModelConfig.get_num_attention_layers`` for a non-hybrid model."""
        return self.config["num_hidden_layers"]  # mc:ModelConfig.get_num_attention_layers+4


def get_cache_size_per_token(model: Model, tp_size: int, pp_size: int, pp_rank: int) -> int:
    """``KVCacheManager.get_cache_size_per_token`` (static): KvCacheCreator's cost per token."""
    config = model.config  # rm:KVCacheManager.get_cache_size_per_token+4
    num_key_value_heads = config.get("num_key_value_heads",
                                     config["num_attention_heads"])  # +5
    mla = "kv_lora_rank" in config  # rm:KVCacheManager.get_cache_size_per_token+12
    if mla:  # +13
        head_dim = config["kv_lora_rank"] + config["qk_rope_head_dim"]  # +14
        kv_factor = 1  # +15
    else:  # +16
        head_dim = config.get("head_dim")  # +18 (tp_size = mapping.tp_size at +17: no attention DP)
        if not isinstance(head_dim, int):  # +19
            head_dim = config["hidden_size"] // config["num_attention_heads"]  # +20
        head_dim = head_dim * num_key_value_heads // tp_size  # +21
        kv_factor = 2  # +22
    num_attention_layers = max(
        len(pp_layers(model.get_num_attention_layers(), pp_size, pp_rank)), 1)  # +25
    mem_per_token = kv_factor * num_attention_layers * head_dim  # +28
    if model.kv_quant == "FP8":  # +31
        mem_per_token *= 1  # +33
    elif model.kv_quant == "NVFP4":  # +34
        mem_per_token = math.ceil(mem_per_token / 2) + math.ceil(mem_per_token / 16)  # +37
    else:  # +39
        mem_per_token *= 2  # +44 (fp16/bf16 assumed, whatever the model dtype)
    return mem_per_token  # +45


def model_kv_dtype(model: Model) -> str:
    """``_util.py _create_kv_cache_manager``: FP8 / NVFP4 from the quant config, else the model's."""
    if model.kv_quant == "FP8":  # util:_create_kv_cache_manager (has_fp8_kv_cache -> DataType.FP8)
        return "FP8"
    if model.kv_quant == "NVFP4":  # util:_create_kv_cache_manager (has_fp4_kv_cache -> NVFP4)
        return "NVFP4"
    dtype = str(model.get("torch_dtype") or model.get("dtype") or "bfloat16")
    return {"float16": "HALF", "float32": "FLOAT"}.get(dtype, "BF16")  # str_dtype_to_binding


class KVCacheManagerRank:
    """``KVCacheManager.__init__`` state of one rank (attributes TRT-LLM's methods read)."""

    def __init__(self, model: Model, kv_cache_config: dict, *, tp: int, pp: int, pp_rank: int,
                 max_seq_len: int) -> None:
        config = model.config
        mla = "kv_lora_rank" in config  # util:_create_kv_cache_manager (is_mla -> SELFKONLY)
        if mla:
            num_kv_heads = 1  # util:_create_kv_cache_manager (num_kv_heads=1)
            head_dim = config["kv_lora_rank"] + config["qk_rope_head_dim"]  # (head_dim=...)
        else:
            num_kv_heads = config.get("num_key_value_heads", config["num_attention_heads"])
            head_dim = config.get("head_dim")  # util:_create_kv_cache_manager (head_dim)
            if not isinstance(head_dim, int):
                head_dim = config["hidden_size"] // config["num_attention_heads"]
        self.dtype = model_kv_dtype(model)
        layers = config["num_hidden_layers"]
        self.pp_layers = get_pp_layers(layers, pp, pp_rank)  # rm:KVCacheManager.__init__+32
        self.num_local_layers = len(self.pp_layers)  # rm:KVCacheManager.__init__+39
        tp_size = tp  # rm:KVCacheManager.__init__+47 (no attention DP)
        self.num_kv_heads_per_layer = [(num_kv_heads + tp_size - 1) // tp_size
                                       for _ in range(self.num_local_layers)]  # +52..+55
        self.head_dim = head_dim  # rm:KVCacheManager.__init__+85
        self.tokens_per_block = kv_cache_config["tokens_per_block"]  # +86
        self.max_seq_len = max_seq_len  # rm:KVCacheManager.__init__+87
        self.kv_factor = 1 if mla else 2  # rm:KVCacheManager.__init__+89
        self.world_size = tp * pp
        if kv_cache_config["max_attention_window"] is None:  # rm:KVCacheManager.__init__+102
            self.max_attention_window_vec = [max_seq_len]  # +104
        else:  # +105
            self.max_attention_window_vec = [
                min(max_seq_len, w) for w in kv_cache_config["max_attention_window"]]  # +111
        self.is_vswa = len(set(self.max_attention_window_vec)) > 1  # +120

    def get_cache_bytes_per_token(self) -> int:
        """``KVCacheManager.get_cache_bytes_per_token``: the manager's own cost (ceil heads)."""
        cache_size_per_token = self.kv_factor * sum(self.num_kv_heads_per_layer) * self.head_dim  # +1
        cache_size_bytes_per_token = get_size_in_bytes(cache_size_per_token, self.dtype)  # +8
        if self.dtype == "NVFP4":  # +10
            cache_size_bytes_per_token += calculate_scaling_factor_size_bytes(
                cache_size_per_token, 16, "FP8")  # +11
        return cache_size_bytes_per_token  # +15

    def calculate_max_num_blocks_local(self, kv_cache_config: dict, free_mem: int) -> float:
        """``KVCacheManager.calculate_max_num_blocks`` up to the all-reduce: this rank's tokens."""
        free_mem_fraction = kv_cache_config["free_gpu_memory_fraction"]  # rm:calculate_max_num_blocks+7
        cache_size_bytes_per_token = self.get_cache_bytes_per_token()  # +11
        assert free_mem_fraction < 1.0  # +15
        max_tokens = free_mem_fraction * free_mem / cache_size_bytes_per_token  # +16
        if kv_cache_config["max_tokens"] is not None:  # +19
            max_tokens = min(kv_cache_config["max_tokens"], max_tokens)  # +21..+22
        return max_tokens

    def window_size_to_layers(self) -> dict[int, list[int]]:
        """``KVCacheManager._get_window_size_to_layers``: the window vector repeats over local layers."""
        pattern_len = len(self.max_attention_window_vec)  # rm:_get_window_size_to_layers+20
        if pattern_len == 1:  # +24
            return {self.max_attention_window_vec[0]: list(range(self.num_local_layers))}  # +25
        out: dict[int, list[int]] = {}  # +7 (defaultdict(list))
        for local_layer_idx in range(self.num_local_layers):  # +29
            window_size = self.max_attention_window_vec[local_layer_idx % pattern_len]  # +30
            out.setdefault(window_size, []).append(local_layer_idx)  # +32
        return out  # +33

    def cache_size_per_token(self, layers) -> int:
        """``calculate_cache_size_per_token`` (nested in the two VSWA methods; +18/+19 in
        ``adjust_window_sizes_for_vswa``)."""
        heads = self.num_kv_heads_per_layer
        total_kv_heads = sum(heads[i] for i in layers)  # rm:calculate_max_num_blocks_for_vswa+69
        return total_kv_heads * self.kv_factor * self.head_dim  # +70 (model_config.head_size)

    def adjust_window_sizes_for_vswa(self, window_size_to_layers, kv_cache_config: dict,
                                     pool_memory_bytes: int):
        """``KVCacheManager.adjust_window_sizes_for_vswa``: shrink windows if one sequence won't fit."""
        max_tokens_from_config = kv_cache_config["max_tokens"]  # rm:adjust_window_sizes_for_vswa+14
        required_mem_bytes_per_seq = 0  # +22
        for window_size in sorted(window_size_to_layers):  # +23
            layers = window_size_to_layers[window_size]  # +24
            cache_size_per_token = self.cache_size_per_token(layers)  # +25
            cache_size_bytes_per_token = get_size_in_bytes(cache_size_per_token, self.dtype)  # +26
            if self.dtype == "NVFP4":  # +28
                cache_size_bytes_per_token += calculate_scaling_factor_size_bytes(
                    cache_size_per_token, 16, "FP8")  # +29
            required_mem_bytes_per_seq += window_size * cache_size_bytes_per_token  # +33
        if required_mem_bytes_per_seq < pool_memory_bytes:  # +38
            return ({k: list(v) for k, v in window_size_to_layers.items()},
                    list(self.max_attention_window_vec))  # +41
        adjusted_window_size_to_layers: dict[int, list[int]] = {}  # +47
        remaining_mem_bytes = pool_memory_bytes  # +49
        remaining_layers = {i for layers in window_size_to_layers.values() for i in layers}  # +50
        accum_max_tokens = 0  # +53
        prev_window_size = 0  # +54
        adjusted_dict: dict[int, int] = {}  # +55
        adjusted_vec = list(self.max_attention_window_vec)  # +56
        for window_size in sorted(window_size_to_layers):  # +58
            layers = window_size_to_layers[window_size]  # +59
            if remaining_mem_bytes > 0 and remaining_layers:  # +60
                cache_size_per_token = self.cache_size_per_token(remaining_layers)  # +62
                cache_size_bytes_per_token = get_size_in_bytes(cache_size_per_token, self.dtype)  # +64
                if self.dtype == "NVFP4":  # +66
                    cache_size_bytes_per_token += calculate_scaling_factor_size_bytes(
                        cache_size_per_token, 16, "FP8")  # +67
                max_tokens_in_window = min(remaining_mem_bytes // cache_size_bytes_per_token,
                                           window_size - prev_window_size)  # +75
                remaining_mem_bytes -= max_tokens_in_window * cache_size_bytes_per_token  # +78
                accum_max_tokens += max_tokens_in_window  # +79
                if accum_max_tokens < window_size:  # +84
                    remaining_mem_bytes = 0  # +88
                if max_tokens_from_config is not None:  # +91
                    accum_max_tokens = min(max_tokens_from_config, accum_max_tokens)  # +92
                    if accum_max_tokens == max_tokens_from_config:  # +98
                        remaining_mem_bytes = 0  # +99
            adjusted_window_size_to_layers.setdefault(accum_max_tokens, []).extend(layers)  # +101..+104
            adjusted_dict[window_size] = accum_max_tokens  # +105
            adjusted_vec = [adjusted_dict.get(v, v) for v in adjusted_vec]  # +107
            remaining_layers -= set(layers)  # +112
            prev_window_size = window_size  # +113
        return adjusted_window_size_to_layers, adjusted_vec  # +115

    def calculate_max_num_blocks_for_vswa(self, kv_cache_config: dict,
                                          free_mem: int) -> dict[int, int]:
        """``KVCacheManager.calculate_max_num_blocks_for_vswa``: equal memory share per window."""
        window_size_to_layers = self.window_size_to_layers()  # rm:calculate_max_num_blocks_for_vswa+39
        fraction = kv_cache_config["free_gpu_memory_fraction"]  # +44
        primary_pool_memory_bytes = (kv_cache_config["max_gpu_total_bytes"]
                                     if kv_cache_config["max_gpu_total_bytes"] > 0
                                     else int(free_mem * fraction))  # +45..+46
        window_size_to_layers, vec = self.adjust_window_sizes_for_vswa(
            window_size_to_layers, kv_cache_config, primary_pool_memory_bytes)  # +55
        self.max_attention_window_vec = vec  # +65
        window_size_shares = [1.0 / len(window_size_to_layers)
                              for _ in window_size_to_layers]  # +94..+96 (no TRTLLM_WINDOW_SIZE_SHARES)
        blocks_per_window = {}  # +100
        for window_idx, (window_size, layers) in enumerate(
                sorted(window_size_to_layers.items())):  # +101
            cache_size_per_token = self.cache_size_per_token(layers)  # +103
            cache_size_bytes_per_token = get_size_in_bytes(cache_size_per_token, self.dtype)  # +104
            primary_tokens = (primary_pool_memory_bytes * window_size_shares[window_idx]
                              / cache_size_bytes_per_token)  # +107 (max_tokens ignored under VSWA: +113)
            blocks_per_window[window_size] = int(primary_tokens // self.tokens_per_block)  # +127
        return blocks_per_window


def calculate_scaling_factor_size_bytes(cache_size: int, quant_vector_size: int,
                                        scaling_factor_dtype: str) -> int:
    """``KVCacheManager.calculate_scaling_factor_size_bytes`` (NVFP4 scales)."""
    assert cache_size % quant_vector_size == 0  # rm:calculate_scaling_factor_size_bytes+3
    return get_size_in_bytes(cache_size // quant_vector_size, scaling_factor_dtype)  # +4


def get_max_atten_window_upper_bound(blocks_in_primary_pool: int, tokens_per_block: int,
                                     max_beam_width: int, sink_token_len: int,
                                     max_seq_len: int) -> int:
    """``KVCacheManager.get_max_atten_window_upper_bound``."""
    token_capacity = blocks_in_primary_pool * tokens_per_block  # rm:get_max_atten_window_upper_bound+4
    max_blocks_per_seq = math.floor(token_capacity / (max_beam_width * tokens_per_block))  # +5
    assert max_blocks_per_seq > 0  # +7
    max_token_num = max_blocks_per_seq * tokens_per_block  # +9
    sink_tokens_in_last_block = sink_token_len % tokens_per_block  # +10
    sink_bubble_len = (0 if sink_tokens_in_last_block == 0
                       else tokens_per_block - sink_tokens_in_last_block)  # +11
    upper = max_token_num - sink_bubble_len  # +12 (max_atten_window_upper_bound)
    if max_seq_len is not None and max_seq_len > upper and max_beam_width > 1:  # +13
        upper -= tokens_per_block  # +14
    assert upper > 0  # +15
    return upper  # +16


def validate_and_adjust_attention_windows(vec: list[int], blocks_per_window: dict[int, int],
                                          tokens_per_block: int, max_seq_len: int):
    """``KVCacheManager._validate_and_adjust_attention_windows`` (beam 1, no sink tokens)."""
    window_adjustments = {}  # rm:_validate_and_adjust_attention_windows+23
    for window_size, blocks in blocks_per_window.items():  # +25
        upper_bound = get_max_atten_window_upper_bound(blocks, tokens_per_block, 1, 0,
                                                       max_seq_len)  # +27
        if window_size > upper_bound:  # +33
            window_adjustments[window_size] = upper_bound  # +37
    if not window_adjustments:  # +39
        return blocks_per_window, max_seq_len, vec  # +64
    adjusted_vec = [window_adjustments.get(w, w) for w in vec]  # +40
    adjusted_blocks = {window_adjustments.get(w, w): b
                       for w, b in blocks_per_window.items()}  # +47..+57
    return adjusted_blocks, max(adjusted_vec), adjusted_vec  # +59, +62


def kv_cache_creator(model: Model, kv_cache_config: dict, memory: dict, *, tp: int, pp: int,
                     pp_rank: int) -> dict:
    """``KvCacheCreator.configure_kv_cache_capacity`` on one rank (V1 manager, no draft model)."""
    fraction = kv_cache_config["free_gpu_memory_fraction"]  # util:configure_kv_cache_capacity
    slope = get_cache_size_per_token(model, tp, pp, pp_rank)  # util:_get_kv_size_per_token (no draft)
    available_kv_mem = (memory["total_gpu_memory"] - memory["peak_memory"]
                        + memory["allocated_bytes"]) * fraction  # util:_cal_max_memory+9
    kv_cache_max_memory = int(available_kv_mem)  # util:_cal_max_memory+17
    if kv_cache_config["max_tokens"] is not None:  # util:configure_kv_cache_capacity (user max_tokens)
        from_max_tokens = slope * kv_cache_config["max_tokens"]  # CacheCost.bytes_for_tokens+2
        kv_cache_max_memory = min(kv_cache_max_memory, from_max_tokens)
    max_tokens = max(kv_cache_max_memory // slope, 0)  # CacheCost.tokens_for_budget+4
    if kv_cache_config["max_gpu_total_bytes"] > 0:  # "handle max_gpu_total_bytes" (after max_tokens)
        kv_cache_max_memory = min(kv_cache_max_memory, kv_cache_config["max_gpu_total_bytes"])
    return {"kv_size_per_token": slope, "kv_cache_max_memory": kv_cache_max_memory,
            "max_tokens": max_tokens, "max_gpu_total_bytes": kv_cache_max_memory}


def run_case(case: dict, config: dict) -> dict:
    """Every rank's KvCacheCreator, then its final KVCacheManager, then the MIN all-reduce."""
    quant = {"auto": None, "fp8": "FP8", "nvfp4": "NVFP4"}[case["kv_cache_dtype"]]
    model = Model(config, quant)
    tp, pp = case["tp"], case["pp"]
    user = dict(case["kv_cache_config"])
    ranks = []
    for pp_rank in range(pp):
        capacity = kv_cache_creator(model, user, case["memory"], tp=tp, pp=pp, pp_rank=pp_rank)
        final_cfg = {**user, "max_tokens": capacity["max_tokens"],
                     "max_gpu_total_bytes": capacity["max_gpu_total_bytes"]}
        manager = KVCacheManagerRank(model, final_cfg, tp=tp, pp=pp, pp_rank=pp_rank,
                                     max_seq_len=case["max_seq_len"])
        free_mem = case["memory"]["free_mem_at_creation"]
        rank = {"pp_rank": pp_rank, "local_layers": manager.num_local_layers,
                "kv_size_per_token_creator": capacity["kv_size_per_token"],
                "cache_bytes_per_token_manager": manager.get_cache_bytes_per_token(),
                "kv_cache_max_memory": capacity["kv_cache_max_memory"],
                "creator_max_tokens": capacity["max_tokens"], "is_vswa": manager.is_vswa}
        if manager.is_vswa:  # rm:KVCacheManager.__init__ (VSWA branch)
            rank["blocks_per_window"] = manager.calculate_max_num_blocks_for_vswa(final_cfg, free_mem)
            rank["window_layers"] = {w: len(v) for w, v in manager.window_size_to_layers().items()}
        else:  # rm:KVCacheManager.__init__ (standard branch)
            rank["max_tokens"] = manager.calculate_max_num_blocks_local(final_cfg, free_mem)
        rank["vec"] = manager.max_attention_window_vec
        ranks.append(rank)
    tpb = user["tokens_per_block"]
    vswa = ranks[0]["is_vswa"]
    if vswa:  # rm:KVCacheManager.__init__: per-window MIN all-reduce over the world
        windows = sorted(ranks[0]["blocks_per_window"])
        blocks_per_window = {w: min(r["blocks_per_window"][w] for r in ranks) for w in windows}
    else:  # rm:calculate_max_num_blocks+35: MIN all-reduce of max_tokens, then +41
        max_tokens = min(r["max_tokens"] for r in ranks)
        blocks_per_window = {ranks[0]["vec"][0]: int(max_tokens // tpb)}
    blocks_per_window, max_seq_len, vec = validate_and_adjust_attention_windows(
        ranks[0]["vec"], blocks_per_window, tpb, case["max_seq_len"])  # rm:KVCacheManager.__init__
    largest = max(blocks_per_window)
    num_blocks = blocks_per_window[largest]
    for r in ranks:
        r.pop("vec")
        if "blocks_per_window" in r:
            r["blocks_per_window"] = {str(k): v for k, v in r["blocks_per_window"].items()}
            r["window_layers"] = {str(k): v for k, v in r["window_layers"].items()}
    return {
        "is_vswa": vswa,
        "ranks": ranks,
        "blocks_per_window": {str(k): v for k, v in sorted(blocks_per_window.items())},
        "max_attention_window_vec": vec,
        "max_seq_len": max_seq_len,
        "num_blocks": num_blocks,
        "kv_pool_tokens": num_blocks * tpb,
    }


def _load(model: str) -> tuple[dict, dict]:
    path = ROOT / "presets" / "models" / f"{model}.json"
    preset = json.loads(path.read_text())
    return preset, preset["config"]


def _gpu_bytes(gpu: str) -> int:
    data = json.loads((ROOT / "presets" / "gpus" / f"{gpu}.json").read_text())
    return data["reported_bytes"]


def memory_inputs(gpu: str, params_total: int, tp: int, pp: int, activation_gib: float,
                  non_torch_gib: float = 1.0, allocated_mib: int = 512,
                  weight_bytes_per_param: int = 2) -> dict:
    """The profiled memory of one rank (modelled): ``_util.py configure_kv_cache_capacity`` sets
    ``peak_memory = torch_peak + extra_cost`` (torch peak: weights + activations + temporary KV;
    extra: non-torch); the final managers see ``free = total − weights − non-torch``."""
    total = _gpu_bytes(gpu)
    weights = params_total * weight_bytes_per_param // (tp * pp)
    activation = int(activation_gib * GIB)
    non_torch = int(non_torch_gib * GIB)
    allocated = allocated_mib * MIB
    return {"gpu": gpu, "total_gpu_memory": total,
            "peak_memory": weights + activation + allocated + non_torch,
            "allocated_bytes": allocated, "free_mem_at_creation": total - weights - non_torch,
            "assumed": {"weights_bytes": weights, "activation_bytes": activation,
                        "non_torch_bytes": non_torch}}


def kv_cfg(**changes) -> dict:
    """``KvCacheConfig`` defaults (llm_args.py): fraction 0.9, 32-token blocks, reuse on."""
    base = {"free_gpu_memory_fraction": 0.9, "tokens_per_block": 32, "max_attention_window": None,
            "max_tokens": None, "max_gpu_total_bytes": 0, "enable_block_reuse": True}
    return {**base, **changes}


def gemma3_windows(max_seq_len: int) -> list[int]:
    return [1024] * 5 + [max_seq_len]


# (id, preset, gpu, tp, pp, kv dtype, kv_cache_config, max_seq_len, activation GiB, kvplan budget)
CASES = [
    ("llama-3.1-8b-tp1-h100", "llama-3.1-8b", "h100-sxm", 1, 1, "auto", kv_cfg(), 131072, 2.0, "fraction"),
    ("llama-3.1-8b-tp2-h100", "llama-3.1-8b", "h100-sxm", 2, 1, "auto", kv_cfg(), 131072, 1.5, "fraction"),
    ("llama-3.1-8b-tp4-h100", "llama-3.1-8b", "h100-sxm", 4, 1, "auto", kv_cfg(), 131072, 1.25, "fraction"),
    ("llama-3.1-8b-tp8-h100", "llama-3.1-8b", "h100-sxm", 8, 1, "auto", kv_cfg(), 131072, 1.0, "fraction"),
    ("llama-3.1-8b-fp8-tp1-h100", "llama-3.1-8b", "h100-sxm", 1, 1, "fp8", kv_cfg(), 131072, 2.0, "fraction"),
    ("llama-3.1-8b-nvfp4-tp1-b200", "llama-3.1-8b", "b200", 1, 1, "nvfp4", kv_cfg(), 131072, 2.0, "fraction"),
    ("llama-3.1-8b-frac0.8-a100", "llama-3.1-8b", "a100-40gb-sxm", 1, 1, "auto",
     kv_cfg(free_gpu_memory_fraction=0.8), 131072, 3.0, "fraction"),
    ("llama-3.1-8b-tpb64-h100", "llama-3.1-8b", "h100-sxm", 1, 1, "auto", kv_cfg(tokens_per_block=64),
     131072, 2.0, "fraction"),
    ("llama-3.1-8b-max-tokens-h100", "llama-3.1-8b", "h100-sxm", 1, 1, "auto", kv_cfg(max_tokens=100_000),
     131072, 2.0, "fraction"),
    ("llama-3.1-8b-max-gpu-bytes-h100", "llama-3.1-8b", "h100-sxm", 1, 1, "auto",
     kv_cfg(max_gpu_total_bytes=10 * GIB), 131072, 2.0, "fraction"),
    ("llama-3.1-8b-reuse-off-h100", "llama-3.1-8b", "h100-sxm", 1, 1, "auto",
     kv_cfg(enable_block_reuse=False), 131072, 2.0, "fraction"),
    ("llama-3.1-70b-tp4-h100", "llama-3.1-70b", "h100-sxm", 4, 1, "auto", kv_cfg(), 131072, 2.5, "fraction"),
    ("llama-3.1-70b-tp8-h100", "llama-3.1-70b", "h100-sxm", 8, 1, "auto", kv_cfg(), 131072, 2.0, "fraction"),
    ("llama-3.1-70b-fp8-tp8-h200", "llama-3.1-70b", "h200", 8, 1, "fp8", kv_cfg(), 131072, 2.0, "fraction"),
    ("llama-3.1-70b-tp4-pp2-h100", "llama-3.1-70b", "h100-sxm", 4, 2, "auto", kv_cfg(), 131072, 2.0, "given"),
    ("llama-3.2-3b-pp2-l40s", "llama-3.2-3b", "l40s", 1, 2, "auto", kv_cfg(), 131072, 1.0, "given"),
    ("llama-2-7b-mha-tp1-a100", "llama-2-7b", "a100-80gb-sxm", 1, 1, "auto", kv_cfg(), 4096, 2.0, "fraction"),
    ("llama-2-7b-mha-tp8-a100", "llama-2-7b", "a100-80gb-sxm", 8, 1, "auto", kv_cfg(), 4096, 1.0, "fraction"),
    ("qwen3-8b-tp1-h100", "qwen3-8b", "h100-sxm", 1, 1, "auto", kv_cfg(), 40960, 2.0, "fraction"),
    ("qwen3-8b-fp8-tp2-l40s", "qwen3-8b", "l40s", 2, 1, "fp8", kv_cfg(), 40960, 1.5, "fraction"),
    ("qwen3-32b-tp4-h100", "qwen3-32b", "h100-sxm", 4, 1, "auto", kv_cfg(), 40960, 2.0, "fraction"),
    ("qwen2.5-7b-tp2-h100", "qwen2.5-7b", "h100-sxm", 2, 1, "auto", kv_cfg(), 32768, 1.5, "fraction"),
    ("qwen2.5-7b-tp8-h100", "qwen2.5-7b", "h100-sxm", 8, 1, "auto", kv_cfg(), 32768, 1.0, "fraction"),
    ("qwen3-30b-a3b-tp8-h100", "qwen3-30b-a3b", "h100-sxm", 8, 1, "auto", kv_cfg(), 40960, 1.0, "fraction"),
    ("phi-4-tp4-h100", "phi-4", "h100-sxm", 4, 1, "auto", kv_cfg(), 16384, 1.0, "fraction"),
    ("mixtral-8x7b-tp8-h100", "mixtral-8x7b", "h100-sxm", 8, 1, "auto", kv_cfg(), 32768, 2.0, "fraction"),
    ("mistral-7b-v0.1-full-h100", "mistral-7b-v0.1", "h100-sxm", 1, 1, "auto", kv_cfg(), 32768, 2.0,
     "fraction"),
    ("mistral-7b-v0.1-window4096-h100", "mistral-7b-v0.1", "h100-sxm", 1, 1, "auto",
     kv_cfg(max_attention_window=[4096]), 32768, 2.0, "fraction"),
    ("gemma-3-12b-full-h100", "gemma-3-12b", "h100-sxm", 1, 1, "auto", kv_cfg(), 131072, 3.0, "fraction"),
    ("gemma-3-12b-vswa-h100", "gemma-3-12b", "h100-sxm", 1, 1, "auto",
     kv_cfg(max_attention_window=gemma3_windows(131072)), 131072, 3.0, "fraction"),
    ("gemma-3-12b-vswa-32k-tp2-h100", "gemma-3-12b", "h100-sxm", 2, 1, "auto",
     kv_cfg(max_attention_window=gemma3_windows(32768)), 32768, 2.0, "fraction"),
    ("gpt-oss-20b-full-h100", "gpt-oss-20b", "h100-sxm", 1, 1, "auto", kv_cfg(), 131072, 2.0, "fraction"),
    ("gpt-oss-20b-vswa-h100", "gpt-oss-20b", "h100-sxm", 1, 1, "auto",
     kv_cfg(max_attention_window=[128, 131072]), 131072, 2.0, "fraction"),
    ("gpt-oss-120b-vswa-tp4-h100", "gpt-oss-120b", "h100-sxm", 4, 1, "auto",
     kv_cfg(max_attention_window=[128, 131072]), 131072, 2.0, "fraction"),
    ("deepseek-v3-mla-tp8-b200", "deepseek-v3", "b200", 8, 1, "auto", kv_cfg(), 163840, 4.0, "fraction"),
    ("deepseek-v3-mla-fp8-tp8-b200", "deepseek-v3", "b200", 8, 1, "fp8", kv_cfg(), 163840, 4.0, "fraction"),
    ("deepseek-v3-mla-tp8-pp2-h200", "deepseek-v3", "h200", 8, 2, "auto", kv_cfg(), 163840, 3.0, "given"),
    ("kimi-k2-mla-tp8-pp2-b200", "kimi-k2", "b200", 8, 2, "auto", kv_cfg(), 131072, 4.0, "given"),
]


def supported_architectures() -> list[dict]:
    """Which preset and fixture architectures the PyTorch backend has a model class for
    (``AutoModelForCausalLM._resolve_class`` looks up ``architectures[0]``)."""
    rows = []
    for path in sorted((ROOT / "presets" / "models").glob("*.json")):
        config = json.loads(path.read_text())["config"]
        rows.append((f"presets/models/{path.name}", config))
    for path in sorted((ROOT / "tests" / "fixtures" / "configs").glob("*.json")):
        rows.append((f"tests/fixtures/configs/{path.name}", json.loads(path.read_text())))
    out = []
    for source, config in rows:
        arch = (config.get("architectures") or [None])[0]
        served = None if arch is None else arch in PYTORCH_ARCHITECTURES  # None: not in the config
        out.append({"config": source, "architecture": arch, "served": served})
    return out


def main() -> None:
    cases = []
    for case_id, model, gpu, tp, pp, kv_dtype, kvc, max_seq_len, act, budget in CASES:
        preset, config = _load(model)
        memory = memory_inputs(gpu, preset["params_total"], tp, pp, act)
        case = {"id": case_id, "model": model, "config_source": f"presets/models/{model}.json",
                "architecture": (config.get("architectures") or [None])[0],
                "tp": tp, "pp": pp, "kv_cache_dtype": kv_dtype, "kv_cache_config": kvc,
                "max_seq_len": max_seq_len, "memory": memory, "kvplan_budget": budget}
        assert case["architecture"] in PYTORCH_ARCHITECTURES, case_id
        case["expected"] = run_case(case, config)
        cases.append(case)
    fixture = {
        "computed_by": "transcribed",
        "engine": "TensorRT-LLM PyTorch backend, V1 KVCacheManager (default: use_kv_cache_manager_v2=False)",
        "sources": SOURCES,
        "version_note": VERSION_NOTE,
        "generator": "tools/trtllm_truth/generate.py",
        "cases": cases,
        "architectures": supported_architectures(),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(fixture, indent=1) + "\n")
    print(f"wrote {len(cases)} cases to {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
