"""vLLM's runtime reserve, term by term: what its profile run measures besides the weights.

vLLM's KV budget is ``requested − non_kv_cache_memory [− CUDA-graph estimate]``
(``vllm/v1/worker/gpu_worker.py`` ``Worker.determine_available_memory``; V0
``vllm/worker/worker.py`` ``Worker.determine_num_available_blocks``), with ``non_kv_cache_memory =
weights + torch peak increase + non-torch increase`` (``vllm/utils/__init__.py`` ``memory_profiling``,
``vllm/utils/mem_utils.py`` from v0.27 as ``total_consumed + transient_peak_headroom``). The terms
besides the weights:

* **activation peak** — ``profile_run`` (``v1/worker/gpu_model_runner.py``) runs
  ``_dummy_run(max_num_batched_tokens)`` and then ``_dummy_sampler_run`` on
  ``min(max_num_batched_tokens, max_num_seqs)`` rows of logits. The forward's peak is three
  hidden-size tensors (the ``residual``, the normed ``hidden_states`` the decoder layer still holds
  while its MLP or attention runs, and that block's output) plus the widest per-layer intermediate
  (QKV + attention output, the MLP's gate+up + activation, or fused MoE's
  ``intermediate_cache1/2/3`` + router logits) over every token; the sampler's is ``rows × vocab ×
  bytes per element`` of the sampler path the release takes (``v1/sample/sampler.py``
  ``Sampler.forward``: model-dtype logits, an fp32 copy, then
  ``v1/sample/ops/topk_topp_sampler.py``). The term is the larger of the two.
* **non-torch memory** — cuBLAS/NCCL/custom all-reduce buffers allocated outside PyTorch's
  allocator during profiling; an empirical rule (below).
* **CUDA graphs** — ``capture_model`` / ``profile_cudagraph_memory``: one graph per capture size
  (``config/vllm.py`` ``_set_cudagraph_sizes``), an empirical cost per size (below); subtracted from
  the budget only where the release does so (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` = 1 from
  v0.20), 0 with ``enforce_eager``.

Empirical rules, each fitted by least squares on the public logs that print the term
(``tests/fixtures/vllm_logs``; ``tests/test_budget_vs_logs.py`` refits them from the fixtures and
checks these constants):

* ``SAMPLER_SORT_BYTES`` — bytes per (row × vocab) element of the PyTorch sort path
  (``apply_top_k_top_p_pytorch``: ``logits.sort`` values + int64 indices, softmax, cumsum, masks,
  the ``random_sample`` exponential): logs 27, 28, 29, 30 ("Peak activation memory", vLLM
  0.14–0.18 by their line formats; 1,024 rows of 201,088 / 128,256 vocab). The fit is 38.96 B, kept
  as 39.0. Derived at the sort: the bf16 logits the caller still holds (2 B), the fp32 copy (4), the
  sorted values (4) and int64 indices (8), and PyTorch's ``SortStable.cu``
  ``do_launch_stable_sort_kernel`` → ``segmented_sort_pairs`` (≥ 128 rows) with its int64 reverse
  indices (8) and CUB's alternate key and value buffers (4 + 8): 38 B — the fit's 0.96 B more is
  CUB's histograms and the allocator's rounding. Runs with 128 and 256 rows (logs 37, 05) leave
  ≈ 27 B, which neither vLLM's code nor that path explains (``tests/fixtures/vllm_logs/README.md``,
  "The remaining misses"). From v0.17 ``apply_top_k_top_p`` takes a Triton kernel for ≥ 8 rows
  (``v1/sample/ops/topk_topp_triton.py``, read in 0.17.1–0.19.0, absent in 0.16.0), not modelled:
  the ``vllm@0.19`` record keeps the sort, which the fitted logs' peaks show.
* ``NON_TORCH_BASE`` (+ ``NON_TORCH_TP`` when tp > 1) — logs 27, 29, 30 (TP 1: 0.13, 0.14, 0.13
  GiB) and 28 (TP 2: 0.55 GiB). A step, not a slope: the V0 TP 4 run (19) prints 0.34–0.43 GiB,
  so the NCCL / custom all-reduce buffers do not grow with the rank count.
* ``NON_TORCH_V0`` — the V0 engine's profile (``worker/worker.py`` ``determine_num_available_blocks``,
  whose baseline is taken after ``init_device``): V0 logs 07 and 08 (Llama-3.1-8B on an RTX 3090,
  TP 1: "non-torch memory 0.35GiB"), with no TP step — the V0 TP 4 run (19, A100 40GB) prints
  0.34–0.43 GiB. Logs 09 (1.79 GiB, 80 GB-class card) and 18 (0.04 GiB, WSL) are not in the fit
  and stay outside it (``tests/test_end_to_end_report.py``): V0's ``memory_profiling`` (v0.6.6
  ``vllm/utils.py``) counts everything on the device that appeared after ``init_device`` and is not
  torch's (every process's, through ``mem_get_info``), the machine's state rather than a rule.
  Not modelled either: on a unified-memory GPU (compute capability 8.7, 11.0, 12.1: Orin, Thor, the
  GB10) V1's ``utils/mem_utils.py`` ``MemorySnapshot.measure`` takes free memory from
  ``psutil.virtual_memory().available`` (read in 0.13.0), so the non-torch increase counts the
  host's own allocations while vLLM profiles (log 44).
* ``GRAPH_BYTES_PER_SIZE`` (+ ``GRAPH_BYTES_PER_SIZE_TP`` when tp > 1) per capture size — logs 01,
  02 (TP 1: "Graph capturing finished … took 0.50 GiB", 67 sizes) and 03, 04 (TP 2: 0.65 GiB);
  the multi-node runs (05, 06) are not in the fit (they take 1.5–2× more).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from kvplan.arch import MLA, Attention, ModelArch
from kvplan.dtypes import get_dtype
from kvplan.engines.reserve import GIB, ReserveTerm

if TYPE_CHECKING:
    from kvplan.engines.settings import EngineSettings

#: Fitted constants (see the module docstring; ``tests/test_budget_vs_logs.py`` refits them).
SAMPLER_SORT_BYTES = 39.0
NON_TORCH_BASE = round(0.1333 * GIB)
NON_TORCH_TP = round(0.4167 * GIB)
NON_TORCH_V0 = round(0.35 * GIB)
GRAPH_BYTES_PER_SIZE = round(0.5 / 67 * GIB)
GRAPH_BYTES_PER_SIZE_TP = round(0.15 / 67 * GIB)
#: FlashInfer path (``forward_cuda`` → ``flashinfer_sample``): model-dtype logits (2 B), the fp32
#: copy (4 B) and FlashInfer's fp32 probabilities (4 B) per element — derived, not fitted.
SAMPLER_FLASHINFER_BYTES = 10.0

SamplerPath = Literal["flashinfer", "sort"]
CaptureRule = Literal["stride8", "stride16", "none"]


def forward_peak(arch: ModelArch, tokens: int, tp: int, dtype: str) -> tuple[int, str]:
    """Peak of one dummy forward of ``tokens`` tokens on one rank: ``tokens × (3 × hidden + the
    widest layer intermediate) × dtype bytes`` (``gpu_model_runner.py`` ``_dummy_run``, V0
    ``model_runner.py`` ``profile_run``). At the MLP's ``down_proj`` (e.g.
    ``models/llama.py`` ``LlamaMLP.forward``) the live tensors are the ``residual``, the normed
    ``hidden_states`` the decoder layer passed in (still referenced by its frame), ``gate_up`` (2 × I,
    still bound), the activation (I) and the output (hidden): 3 × hidden + 3 × I; attention likewise
    holds QKV + its output beside the three hidden-size tensors. The intermediates are
    ``model_executor/layers/linear.py`` QKV/MergedColumnParallelLinear outputs and ``fused_moe``
    ``intermediate_cache1`` (2 × I), ``cache2`` (I), ``cache3`` (hidden) per routed token plus fp32
    router logits. Checked on the V0 logs 07 and 08 (Llama-3.1-8B, 29,000 / 20,000 profiled tokens:
    the peak their printed total, utilization, weights, non-torch and KV memory leave is 2.99 / 2.07
    GiB; 3 × hidden gives 2.99 / 2.06, 2 × hidden 2.77 / 1.91)."""
    size = get_dtype(dtype).bits // 8
    resid = 3 * arch.hidden_size
    q_heads = max(arch.n_heads // tp, 1)
    widest: dict[str, int] = {}
    for layer in arch.distinct_layers():
        if isinstance(layer, Attention):
            kv = max(layer.n_kv_heads // tp, 1)
            widest["attention"] = max(widest.get("attention", 0), q_heads * arch.head_dim
                                      + kv * (layer.head_dim_k + layer.head_dim_v)
                                      + q_heads * layer.head_dim_v)
        elif isinstance(layer, MLA):
            heads = max(layer.n_heads // tp, 1)
            widest["attention"] = max(widest.get("attention", 0), heads * (
                2 * (layer.qk_nope_head_dim + layer.qk_rope_head_dim) + 2 * layer.v_head_dim)
                + layer.kv_lora_rank + layer.qk_rope_head_dim)
    dense = arch.moe is None or arch.moe.n_dense_layers > 0
    if dense and arch.intermediate_size:
        widest["mlp"] = (3 if arch.gated_mlp else 2) * arch.intermediate_size // tp
    if arch.moe is not None:
        moe = arch.moe
        routed = moe.n_active * (3 * moe.expert_intermediate // tp + arch.hidden_size)
        shared = moe.n_shared * 3 * moe.shared_intermediate // tp
        widest["moe"] = routed + shared + moe.n_experts * 4 // size
    part, per = max(widest.items(), key=lambda kv: kv[1]) if widest else ("none", 0)
    value = tokens * (resid + per) * size
    return value, (f"{tokens:,} tokens × (3 × hidden {arch.hidden_size:,} + {part} {per:,}) × "
                   f"{size} B = {value:,} B")


def sampler_peak(arch: ModelArch, rows: int, path: SamplerPath) -> tuple[int, str]:
    """The sampler warm-up: ``rows × vocab × bytes per element`` of the release's sampler path."""
    per = SAMPLER_SORT_BYTES if path == "sort" else SAMPLER_FLASHINFER_BYTES
    value = int(rows * arch.vocab_size * per)
    how = ("PyTorch sort top-k/top-p, fitted" if path == "sort"
           else "FlashInfer top-k/top-p: 2 + 4 + 4, derived")
    return value, f"{rows:,} rows × vocab {arch.vocab_size:,} × {per} B ({how}) = {value:,} B"


def capture_sizes(rule: CaptureRule, max_num_seqs: int, mnbt: int, blackwell: bool = False) -> list[int]:
    """CUDA-graph capture sizes: ``stride8`` (v0.8–v0.11.0 ``_set_cudagraph_sizes``:
    ``[1, 2, 4] + range(8, min(2 × max_num_seqs, 512) + 1, 8)``), ``stride16`` (v0.11.2+:
    ``[1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)``, max = ``min(2 × max_num_seqs, 512)``,
    1024 on data-centre Blackwell in v0.33), both capped at ``max_num_batched_tokens``."""
    if rule == "none":
        return []
    top = min(2 * max_num_seqs, 1024 if blackwell else 512)
    if rule == "stride8":
        sizes = [1, 2, 4, *range(8, top + 1, 8)]
    else:
        sizes = [1, 2, 4, *range(8, 256, 8), *range(256, top + 1, 16)]
    return [s for s in sizes if s <= top and s <= mnbt]


def vllm_reserve_terms(arch: ModelArch, settings: EngineSettings, model_dtype: str, *,
                       sampler: SamplerPath, capture: CaptureRule, graphs_counted: bool,
                       release: str, mnbt: int, max_num_seqs: int, blackwell: bool = False,
                       v0: bool = False) -> tuple[ReserveTerm, ...]:
    """The activation peak, non-torch and CUDA-graph terms of one vLLM release."""
    tp = settings.tp
    if settings.flashinfer_sampler is not None:
        sampler = "flashinfer" if settings.flashinfer_sampler else "sort"
    fwd, fwd_how = forward_peak(arch, mnbt, tp, model_dtype)
    rows = min(mnbt, max_num_seqs)
    smp, smp_how = sampler_peak(arch, rows, sampler)
    act = max(fwd, smp)
    src_profile = ("vllm/worker/worker.py determine_num_available_blocks → model_runner.py profile_run"
                   if v0 else "v1/worker/gpu_model_runner.py profile_run (_dummy_run, "
                   "_dummy_sampler_run); v1/sample/ops/topk_topp_sampler.py")
    terms = [ReserveTerm(
        "activation_peak", act,
        f"max(forward: {fwd_how}; sampler warm-up: {smp_how}) = {act:,} B",
        f"{release}: {src_profile}", basis="fit" if sampler == "sort" and smp >= fwd else "derived")]
    multi = tp > 1
    profiler = ("vllm/utils.py" if v0 else
                "vllm/utils/mem_utils.py (from v0.11.2; vllm/utils/__init__.py in v0.11.0 and before)")
    if v0:
        nt = NON_TORCH_V0
        nt_how = f"{NON_TORCH_V0:,} B whatever the TP (V0; fitted on logs 07–08)"
    else:
        nt = NON_TORCH_BASE + NON_TORCH_TP * multi
        nt_how = f"{NON_TORCH_BASE:,} + {NON_TORCH_TP:,} × [tp {tp} > 1] = {nt:,} B (fitted on logs 27–30)"
    terms.append(ReserveTerm(
        "non_torch", nt, nt_how,
        f"{release}: {profiler} memory_profiling: non_torch_increase (cuBLAS, NCCL / custom "
        "all-reduce buffers)",
        basis="fit"))
    sizes = [] if settings.enforce_eager else capture_sizes(capture, max_num_seqs, mnbt, blackwell)
    per = GRAPH_BYTES_PER_SIZE + GRAPH_BYTES_PER_SIZE_TP * multi
    graphs = len(sizes) * per
    if settings.enforce_eager:
        how = "enforce_eager: no CUDA graphs = 0 B"
    else:
        how = (f"{len(sizes)} capture sizes (1…{sizes[-1] if sizes else 0}) × ({GRAPH_BYTES_PER_SIZE:,} + "
               f"{GRAPH_BYTES_PER_SIZE_TP:,} × [tp {tp} > 1]) B = {graphs:,} B (fitted on logs 01–04)")
    if not graphs_counted and graphs:
        how += ("; not subtracted: captured after the KV cache is sized, so it comes out of the "
                "(1 − utilization) slack" + ("" if v0 else " (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS "
                                                        "defaults to 0 before v0.20)"))
    terms.append(ReserveTerm(
        "cuda_graphs", graphs, how,
        f"{release}: gpu_model_runner.py capture_model / profile_cudagraph_memory; config/vllm.py "
        "_set_cudagraph_sizes", basis="fit", counted=graphs_counted))
    return tuple(terms)


__all__ = ["GRAPH_BYTES_PER_SIZE", "GRAPH_BYTES_PER_SIZE_TP", "NON_TORCH_BASE", "NON_TORCH_TP",
           "NON_TORCH_V0", "SAMPLER_FLASHINFER_BYTES", "SAMPLER_SORT_BYTES", "capture_sizes", "forward_peak",
           "sampler_peak", "vllm_reserve_terms"]
