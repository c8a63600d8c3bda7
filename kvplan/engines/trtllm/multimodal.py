"""TensorRT-LLM (PyTorch backend) and multimodal checkpoints: what its start-up profile does with
the encoder, and why kvplan refuses a request that brings images or videos under it (issue #27).

Read on main, ``tensorrt_llm/_torch/pyexecutor/_util.py`` at 00043967 (the commit the ``main``
record cites), ``KvCacheCreator``:

* ``_create_dummy_context_requests``: the LLM's dummy requests are text only ("Keep the LLM dummy
  text-only so it can always fill max_num_tokens"; an M-RoPE model gets zero position ids, no image).
* ``_create_dummy_encoder_inputs``: one processed encoder batch at the scheduling limits, for every
  model that is a ``MultimodalModelMixin`` — unless ``disable_mm_encoder``, the encoder was removed
  (E/P disaggregation), ``encoder_max_num_tokens`` ≤ 0 or the input processor has no
  ``get_dummy_mm_data`` — whatever the served requests will bring: the modality with the most tokens
  per item (``get_mm_max_tokens_per_item(encoder_max_num_tokens)``), ``min(encoder_batch_size,
  encoder_max_num_tokens // tokens per item)`` items.
* ``configure_kv_cache_capacity``: ``_encode_dummy_inputs`` runs that batch through the tower after
  the peak statistics are reset (its activation is in ``torch_peak``) and keeps a detached copy of
  its output (``numel × element_size``) alive while the text dummy fills ``max_num_tokens``; then
  ``_get_multimodal_encoder_memory_reserve`` adds to the peak ``max(0, mm_encoder_output_budget_bytes
  − that copy)`` (the budget is set only with item scheduling on, ``model_engine.py``) plus
  ``multimodal_config.encoder_cache_max_bytes`` when ``model.encoder_cache_active`` (a model class
  opts in with ``supports_encoder_cache = True``).

kvplan sizes none of these for TensorRT-LLM: the dummy batch depends on each model's input processor
(``get_dummy_mm_data``) and on ``encoder_max_num_tokens`` / ``encoder_batch_size`` defaults that
``model_engine.py`` and ``engine/multimodal.py`` (``MultimodalItemScheduler``) resolve per model, and
TensorRT-LLM's vision towers are its own modules (its attention backends), so vLLM's ``mm_encoder_peak``
rule (``kvplan.engines.vllm.multimodal.tower_peak``) is not known to hold for them. So:

* a request that brings images or videos is refused by name (``trtllm_media_refusal``);
* a text-only request of a multimodal checkpoint is answered with a note (``trtllm_tower_note``):
  the profile does not skip the encoder for it, so the answer leaves those bytes out and overstates
  the KV pool by them. Releases before main (1.1, 1.2.0): their encoder profile was not read; the same
  refusal and note, saying so (an older ``_util.py`` in the code index, its release not identified,
  has ``_create_dummy_mm_context_request``: a dummy context request with the image of
  ``input_processor.get_dummy_prompt`` inside the LLM's profile — the encoder is profiled there too;
  NVIDIA/TensorRT-LLM PR #14264, 2026-05: "KV-cache profiling already runs a multimodal dummy through
  the encoder"). ``encoder_cache_max_bytes`` defaults to 128 MiB, lazily allocated, for the models
  that support the cache (PR #15734, 2026-06).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvplan.arch import ModelArch

#: Where the encoder profile was read (the ``main`` record's ``_util.py`` commit).
TRTLLM_MM_SOURCE = ("tensorrt_llm/_torch/pyexecutor/_util.py 00043967 KvCacheCreator."
                    "_create_dummy_encoder_inputs, _encode_dummy_inputs, "
                    "_get_multimodal_encoder_memory_reserve")


def is_multimodal(arch: ModelArch) -> bool:
    """A checkpoint with a vision/audio tower in its weights or an image processor in its preset."""
    return bool(arch.weights.towers) or arch.processor is not None


def _who(release: str, read: str) -> str:
    """The release whose code says it (``read``: ``TrtLlmRelease.mm_profile_read``, where the
    release's own profile was read): the release itself, or main with the release's left unread."""
    return release if read else f"TensorRT-LLM main (read; {release}'s own profile was not read)"


def trtllm_media_refusal(release: str, read: str) -> str:
    """The refusal of a request with images or videos under TensorRT-LLM ``release``."""
    return (f"{_who(release, read)} profiles the multimodal encoder with a dummy batch of its "
            "own (encoder_max_num_tokens, encoder_batch_size) and reserves its output copy, "
            f"mm_encoder_output_budget_bytes and encoder_cache_max_bytes ({TRTLLM_MM_SOURCE}); "
            "kvplan does not size that profile for TensorRT-LLM, so it does not plan requests "
            "that bring images or videos under it")


def trtllm_tower_note(arch: ModelArch, release: str, read: str) -> list[str]:
    """The note on a text-only answer of a multimodal checkpoint (empty for a text model)."""
    if not is_multimodal(arch):
        return []
    return [f"{arch.name} is multimodal: {_who(release, read)} profiles its encoder at "
            "start-up whatever the requests bring (unless disable_mm_encoder): the tower's "
            "activation on a dummy batch, that batch's output copy, mm_encoder_output_budget_bytes "
            f"and encoder_cache_max_bytes ({TRTLLM_MM_SOURCE}); kvplan does not size them, so this "
            "KV pool is larger than TensorRT-LLM's by those bytes"]
