"""What vLLM 0.33's disaggregation connectors allocate beside the KV cache, per rank.

* **NIXL** (``kv_connector=NixlConnector``, distributed/kv_transfer/kv_connector/v1/nixl/): with
  ``kv_buffer_device`` = the platform's device (``kv_buffer_device_default_factory``: ``cuda``) the
  worker registers the KV cache tensors themselves with NIXL — no staging copy; with
  ``kv_buffer_device="cpu"`` (``base_worker.py``, ``use_host_buffer``) it allocates
  ``host_xfer_buffers``: one host tensor per layer of the KV cache's own shape (``torch.empty(kv_shape,
  device="cpu")``), i.e. the GPU pool's bytes again, on the host. The decode side pulls every prompt
  block (``pull_scheduler.get_num_new_matched_tokens``: "pull all prompt blocks from remote",
  ``_get_remote_prefill_token_count`` = the prompt less a recompute back-off that is 0 without Mamba
  or multi-module MTP) into blocks it allocates first (``update_state_after_alloc``), out of the same
  pool as the running batch.
* **Mooncake** (``MooncakeConnector``, ``mooncake/mooncake_connector.py``): ``batch_register_memory``
  of the KV cache's own pointers — no staging buffer.
"""

from __future__ import annotations

from kvplan.errors import KVPlanError

CONNECTORS = ("nixl", "mooncake")


def staging_bytes(connector: str, kv_buffer_device: str, pool_bytes: int) -> tuple[int, int, str]:
    """``(GPU bytes, host bytes, formula)`` one rank's connector allocates beside its KV pool."""
    if connector not in CONNECTORS:
        raise KVPlanError("disagg.connector", value=connector, known=", ".join(CONNECTORS))
    if connector == "nixl" and kv_buffer_device == "cpu":
        return 0, pool_bytes, (f"NIXL kv_buffer_device=cpu: host_xfer_buffers of the KV cache's shape = "
                               f"{pool_bytes:,} B per rank on the host (nixl/base_worker.py)")
    where = "nixl/base_worker.py (KV tensors registered in place)" if connector == "nixl" else \
        "mooncake/mooncake_connector.py batch_register_memory"
    return 0, 0, f"{connector}: the KV cache is registered in place, no staging buffer ({where})"


def check_engine(side: str, engine_id: str) -> None:
    """A named error unless ``side``'s instance runs vLLM (whose connectors are modelled here)."""
    if engine_id != "vllm":
        raise KVPlanError("disagg.engine", side=side, engine=engine_id)
