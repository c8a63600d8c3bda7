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

import json

from kvplan.errors import KVPlanError

CONNECTORS = ("nixl", "mooncake")
# vLLM 0.33 kv_connector/factory.py register_connector names of the connectors modelled here.
CONNECTOR_NAMES = {"NixlConnector": "nixl", "MooncakeConnector": "mooncake"}
# config/kv_transfer.py KVTransferConfig: the fields read here, and those accepted but not modelled.
_READ_FIELDS = ("kv_connector", "kv_buffer_device")
_ACCEPTED_FIELDS = ("kv_role", "kv_port", "kv_ip", "engine_id", "kv_rank", "kv_parallel_size",
                    "kv_connector_extra_config", "kv_connector_module_path", "kv_load_failure_policy")
_KV_ROLES = ("kv_producer", "kv_consumer", "kv_both")
BUFFER_DEVICES = ("cuda", "cpu")


def parse_kv_transfer_config(text: str) -> tuple[str, str]:
    """``(connector, kv_buffer_device)`` from vLLM's ``--kv-transfer-config`` JSON
    (config/kv_transfer.py ``KVTransferConfig``: ``kv_connector`` a factory name, ``kv_buffer_device``
    default the platform's device, ``cuda``). Raises ``ValueError`` naming what is wrong: not a JSON
    object, a field KVTransferConfig does not have, a connector not modelled, a device or role vLLM
    does not accept."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise ValueError("--kv-transfer-config is not valid JSON") from None
    if not isinstance(data, dict):
        raise ValueError("--kv-transfer-config must be a JSON object, e.g. "
                         '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}')
    unknown = sorted(str(k) for k in data if k not in _READ_FIELDS + _ACCEPTED_FIELDS)
    if unknown:
        raise ValueError(f"--kv-transfer-config has no field {', '.join(map(repr, unknown))} "
                         f"(KVTransferConfig fields read here: {', '.join(_READ_FIELDS)})")
    name = data.get("kv_connector")
    if name not in CONNECTOR_NAMES:
        raise ValueError(f"--kv-transfer-config kv_connector {json.dumps(name)[:60]} is not modelled "
                         f"(modelled: {', '.join(CONNECTOR_NAMES)})")
    device = data.get("kv_buffer_device", "cuda")
    if device not in BUFFER_DEVICES:
        raise ValueError(f"--kv-transfer-config kv_buffer_device {json.dumps(device)[:60]} is not one "
                         f"of {', '.join(BUFFER_DEVICES)}")
    role = data.get("kv_role")
    if role is not None and role not in _KV_ROLES:
        raise ValueError(f"--kv-transfer-config kv_role {json.dumps(role)[:60]} is not one of "
                         f"{', '.join(_KV_ROLES)} (config/kv_transfer.py KVRole)")
    return CONNECTOR_NAMES[name], device


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
