"""vLLM's start-up check of ``max_num_seqs`` against the Mamba state blocks, release by release.

Every KV-cache group of a hybrid model draws block ids from one pool, so the recurrent-state
layers hold ``num_blocks`` state blocks (``kv_cache_config.num_blocks``, the null block included)
whatever the Mamba cache mode; a decode sequence needs one. With FULL decode CUDA graphs (the
default ``FULL_AND_PIECEWISE`` from v0.11.0; ``--enforce-eager`` captures none) the release
(``VllmRelease.state_block_check``):

* ``raise`` (v0.20.0+): ``config/compilation.py`` ``resolve_cudagraph_mode_and_sizes`` —
  ``max_num_reqs > kv_cache_config.num_blocks`` and ``kv_cache_config.has_mamba_layers`` →
  ``ValueError("max_num_seqs (N) exceeds available Mamba cache blocks (M)…")``, after the weights
  load and the KV cache is profiled;
* ``cap`` (v0.18–v0.19): ``adjust_cudagraph_sizes_for_mamba_cache`` keeps the capture sizes
  ``≤ num_blocks`` and warns (none left: no CUDA graphs); the engine starts;
* ``assert`` (v0.11.0–v0.17): no check; the FULL decode captures run up to ``max_num_seqs``
  (``cudagraph_dispatcher.py`` filters uniform-decode sizes to ``≤ max_num_seqs``), and one above
  ``num_blocks`` fails ``causal_conv1d_update``'s ``assert num_cache_lines >= batch`` (issue
  #34094, PR #34571);
* ``none``: piecewise graphs only by default (v0.8–v0.10) — no FULL decode capture, no limit.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from kvplan.arch import ModelArch
from kvplan.engines.base import StartupCheck
from kvplan.engines.settings import EngineSettings
from kvplan.engines.vllm.memory import capture_sizes

if TYPE_CHECKING:
    from kvplan.engines.vllm.releases import VllmRelease


def vllm_startup_check(record: VllmRelease, release: str, arch: ModelArch, settings: EngineSettings,
                       num_blocks: int, max_num_seqs: int, mnbt: int, *, blackwell: bool,
                       cap_source: str) -> StartupCheck:
    """The start-up decision of ``record`` (module docstring) for a pool of ``num_blocks`` blocks;
    capture sizes by ``memory.capture_sizes`` (``config/vllm.py`` ``_set_cudagraph_sizes``)."""
    sizes = () if settings.enforce_eager else tuple(
        capture_sizes(record.capture_rule, max_num_seqs, mnbt, blackwell))
    has_state = arch.has_recurrent
    blocks = num_blocks if has_state else None
    rule = record.state_block_check
    full_graphs = not settings.enforce_eager and rule != "none"
    base = StartupCheck(max_num_seqs=max_num_seqs, state_blocks=blocks, capture_sizes=sizes,
                        cap_source=cap_source, need=blocks if has_state and full_graphs else None)
    if blocks is None or not full_graphs:
        return base
    decode_sizes = [s for s in sizes if s <= max_num_seqs]
    if rule == "raise":
        if max_num_seqs <= blocks:
            return base
        return replace(base, starts=False, action="refuses", reason=(
            f"{release} will refuse to start: max_num_seqs {max_num_seqs:,} > {blocks:,} Mamba state "
            f"blocks (\"max_num_seqs ({max_num_seqs}) exceeds available Mamba cache blocks "
            f"({blocks})\": config/compilation.py resolve_cudagraph_mode_and_sizes, after the weights "
            "load and the KV cache is profiled; each decode sequence needs one state block)"))
    if rule == "cap":
        if not sizes or sizes[-1] <= blocks:
            return base
        kept = tuple(s for s in sizes if s <= blocks)
        what = (f"capture sizes capped at {kept[-1]:,}" if kept else "no CUDA graphs captured")
        return replace(base, capture_sizes=kept, action="clamps", reason=(
            f"{release} starts but clamps: {what} to fit {blocks:,} Mamba state blocks "
            "(config/compilation.py adjust_cudagraph_sizes_for_mamba_cache, a warning)"))
    if decode_sizes and decode_sizes[-1] > blocks:
        return replace(base, starts=False, action="refuses", reason=(
            f"{release} will fail to start: the FULL decode CUDA graph of {decode_sizes[-1]:,} "
            f"sequences exceeds the {blocks:,} Mamba state blocks (causal_conv1d_update: assert "
            "num_cache_lines >= batch during capture_model; no check before v0.18, issue #34094)"))
    return base
