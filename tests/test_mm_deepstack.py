"""Qwen3-VL's deepstack under vLLM 0.33 (issue #27), hand-derived from ``qwen3_vl.py``.

* ``Qwen3_VisionTransformer.forward`` concatenates the merger's output with each of the
  ``len(deepstack_visual_indexes)`` deepstack mergers' (``out_hidden_size × (1 + 3)`` per token),
  and ``embed_multimodal`` returns it whole (split only in ``_compute_deepstack_embeds``): the
  profile's encoder outputs are 4 × what the language model's hidden size alone gives.
* ``Qwen3VLForConditionalGeneration.__init__`` allocates ``deepstack_input_embeds``: 3 zero tensors
  of ``max_num_batched_tokens × text hidden_size`` in the model dtype, unless the tower is a
  ``StageMissingLayer`` (``--limit-mm-per-prompt 0`` on v0.33).
"""

from __future__ import annotations

from kvplan.plan import FitQuery, make_plan
from kvplan.presets import get_gpu, load_model

QWEN3_8B = "Qwen/Qwen3-VL-8B-Instruct"


def _reserve(plan):
    return {t.name: t for t in plan.budget.reserve_detail.terms}


def test_qwen3_vl_encoder_outputs_carry_the_deepstack_features():
    plan = make_plan(load_model(QWEN3_8B), get_gpu("h100-sxm"), FitQuery(tokens=32_768, engine="vllm@0.33"))
    terms = _reserve(plan)
    # vLLM's largest item is the 4096×4096 image, 16,384 tokens (test_multimodal_qwen3_vl.py); one
    # item profiled; each token 4,096 × (1 + 3) bf16 elements. Before the deepstack was counted
    # this term was 16,384 × 4,096 × 2 = 134,217,728 B.
    assert terms["mm_encoder_cache"].bytes == 16_384 * 4096 * 4 * 2 == 536_870_912
    assert "× (1 + 3 deepstack)" in terms["mm_encoder_cache"].formula
    # max_num_batched_tokens 8,192 (vLLM 0.33's default for the OpenAI server on an H100)
    assert plan.settings.max_num_batched_tokens == 8192
    assert terms["mm_deepstack_buffers"].bytes == 3 * 8192 * 4096 * 2 == 201_326_592
    assert "Qwen3VLForConditionalGeneration.__init__" in terms["mm_deepstack_buffers"].source


def test_the_buffers_follow_max_num_batched_tokens_and_the_tower():
    arch, gpu = load_model("Qwen/Qwen3-VL-2B-Instruct"), get_gpu("h100-sxm")
    plan = make_plan(arch, gpu, FitQuery(tokens=32_768, engine="vllm@0.33"))
    assert _reserve(plan)["mm_deepstack_buffers"].bytes == 3 * 8192 * 2048 * 2 == 100_663_296
    smaller = plan.vary(settings=plan.query.settings.model_copy(update={"max_num_batched_tokens": 2048}))
    assert _reserve(smaller)["mm_deepstack_buffers"].bytes == 3 * 2048 * 2048 * 2
    text_only = plan.vary(settings=plan.query.settings.model_copy(update={"limit_mm_per_prompt": 0}))
    assert not {"mm_deepstack_buffers", "mm_encoder_cache"} & set(_reserve(text_only))


def test_towers_without_deepstack_have_no_buffers():
    plan = make_plan(load_model("Qwen/Qwen2.5-VL-7B-Instruct"), get_gpu("h100-sxm"),
                     FitQuery(tokens=32_768, engine="vllm@0.33"))
    assert "mm_deepstack_buffers" not in _reserve(plan) and "mm_encoder_cache" in _reserve(plan)


def test_no_buffers_at_limit_zero_in_older_releases_too():
    """vLLM 0.11.0's ``Qwen3VLForConditionalGeneration.__init__`` sets ``visual`` None when both
    limits are 0 and then builds no ``deepstack_input_embeds`` (read in its qwen3_vl.py)."""
    arch, gpu = load_model(QWEN3_8B), get_gpu("h100-sxm")
    plan = make_plan(arch, gpu, FitQuery(tokens=32_768, engine="vllm@0.11"))
    assert _reserve(plan)["mm_deepstack_buffers"].bytes == 3 * plan.settings.max_num_batched_tokens * 4096 * 2
    text_only = plan.vary(settings=plan.query.settings.model_copy(update={"limit_mm_per_prompt": 0}))
    assert "mm_deepstack_buffers" not in _reserve(text_only)
