"""Model architecture as the KV cache sees it: a list of layers, each with a cache rule.

Layer kinds (what one layer keeps per sequence):

* ``Attention`` — K and V vectors of ``n_kv_heads`` heads per token; ``kind`` says how long:
  ``full`` (every token), ``sliding`` (the last ``window`` tokens), ``chunked`` (the current
  ``window``-token chunk, Llama 4 iRoPE local layers).
* ``MLA`` — one latent of ``kv_lora_rank + qk_rope_head_dim`` per token (DeepSeek-V2 report §2.1.3);
  the expanded per-head sizes are kept for engines that cache K/V after up-projection.
* ``Recurrent`` — a constant state per sequence (Mamba conv + SSM, Gated DeltaNet).
* ``NoCache`` — layers that reuse another layer's KV.
"""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Attention(_Spec):
    """Standard attention (MHA / GQA / MQA) with K and V head dims that may differ."""

    kind: Literal["full", "sliding", "chunked"] = "full"
    n_kv_heads: int = Field(ge=1)
    head_dim_k: int = Field(ge=1)
    head_dim_v: int = Field(ge=1)
    window: int | None = Field(default=None, ge=1)
    #: Heads transformers caches when it broadcasts K/V before ``cache.update`` (Falcon new arch).
    hf_cached_heads: int | None = Field(default=None, ge=1)

    @property
    def elements_per_token(self) -> int:
        return self.n_kv_heads * (self.head_dim_k + self.head_dim_v)


class MLA(_Spec):
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2)."""

    kind: Literal["mla"] = "mla"
    kv_lora_rank: int = Field(ge=1)
    qk_rope_head_dim: int = Field(ge=0)
    n_heads: int = Field(ge=1)
    qk_nope_head_dim: int = Field(ge=0)
    v_head_dim: int = Field(ge=1)
    q_lora_rank: int = Field(default=0, ge=0)
    #: DeepSeek sparse attention (V3.2): head size of the indexer's cached keys (0 = no indexer).
    indexer_head_dim: int = Field(default=0, ge=0)
    window: int | None = Field(default=None, ge=1)

    @property
    def elements_per_token(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim


class Recurrent(_Spec):
    """Constant per-sequence state: a causal conv window plus an SSM / delta-rule state."""

    kind: Literal["recurrent"] = "recurrent"
    variant: Literal["gdn", "mamba1", "mamba2"]
    conv_channels: int = Field(ge=1)
    conv_kernel: int = Field(ge=1)
    ssm_elements: int = Field(ge=1)
    #: Head count that TP shards the state over (value heads for GDN, d_inner for Mamba1).
    tp_shard_unit: int = Field(ge=1)
    #: SSM-state dtype the config asks engines for (``mamba_ssm_cache_dtype``), if any.
    ssm_dtype: str | None = None
    #: Mamba-2 scan chunk (vLLM aligns the attention block to it in "all" cache mode).
    chunk_size: int | None = Field(default=None, ge=1)
    #: The mixer's parameters counted from the config (projections, conv, A, D, dt, norm), when known.
    params: int | None = Field(default=None, ge=0)


class NoCache(_Spec):
    kind: Literal["none"] = "none"


LayerSpec = Annotated[Attention | MLA | Recurrent | NoCache, Field(discriminator="kind")]


class MoE(_Spec):
    n_experts: int = Field(ge=1)
    n_active: int = Field(ge=1)
    n_shared: int = Field(default=0, ge=0)
    expert_intermediate: int = Field(ge=1)
    shared_intermediate: int = Field(default=0, ge=0)
    n_dense_layers: int = Field(default=0, ge=0)


class ModelArch(_Spec):
    """Everything kvplan needs about a model; built from a config.json or a preset."""

    name: str
    model_type: str
    architecture: str | None = None
    layers: tuple[LayerSpec, ...]
    hidden_size: int = Field(ge=1)
    n_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    intermediate_size: int = Field(ge=0)
    vocab_size: int = Field(ge=1)
    max_position_embeddings: int | None = None
    model_dtype: str = "bf16"
    tie_word_embeddings: bool = False
    gated_mlp: bool = True
    moe: MoE | None = None
    params_total: int = Field(ge=0)
    params_active: int | None = None
    params_method: str = ""
    source: str = ""
    notes: tuple[str, ...] = ()

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    def layer_groups(self) -> list[tuple[LayerSpec, int]]:
        """Distinct layer specs with their counts, in first-seen order."""
        return list(Counter(self.layers).items())

    def kind_counts(self) -> dict[str, int]:
        counts: Counter[str] = Counter(layer.kind for layer in self.layers)
        return dict(counts)

    @property
    def is_mla(self) -> bool:
        return any(layer.kind == "mla" for layer in self.layers)

    @property
    def kv_heads(self) -> int:
        """KV heads of the attention layers (1 for MLA latent; max over layers)."""
        heads = [layer.n_kv_heads for layer in self.layers if isinstance(layer, Attention)]
        return max(heads) if heads else 1
