"""Dev-time generator: SGLang 0.5.23's HiCache host-pool sizing, run on CPU.

Writes ``tests/fixtures/offload/hicache_truth.json``; ``tests/test_offload_truth.py`` compares
``kvplan.engines.sglang.hicache.hicache_tier`` with every case, exactly. Environment: the SGLang
venv of ``tools/sglang_truth/setup.sh`` and its stubs (``tools/sglang_truth/generate.py``
``install_stubs``: torchvision, CUDA platform); see README.md.

Called as is: ``MHATokenToKVPoolHost.get_size_per_token`` (pool_host/mha.py, on the MHA geometry of
each case) and ``HostKVCache.__init__`` (pool_host/base.py) with ``is_dummy=True`` — its token count
from ``--hicache-ratio`` / ``--hicache-size``, the page rounding, ``page_num`` and ``size`` — on a
subclass whose data-moving methods are never called; ``host_memory_budget_bytes`` with the host's
available memory given (``available_host_memory_bytes`` replaced by the case's RAM, one rank per
host) for SGLang's own refusal.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "offload" / "hicache_truth.json"
sys.path.insert(0, str(ROOT / "tools" / "sglang_truth"))

# (layers, kv heads per rank, head dim, dtype bytes, page, device tokens, ratio, size GB, RAM GiB)
CASES = [
    (32, 8, 128, 2, 1, 418_493, 2.0, 0, None),
    (32, 8, 128, 2, 1, 418_493, None, 100, None),
    (32, 8, 128, 2, 64, 418_432, 3.5, 0, None),
    (80, 1, 128, 2, 16, 1_419_664, 1.25, 0, None),
    (80, 1, 128, 1, 32, 2_000_000, None, 37, None),
    (32, 8, 128, 2, 1, 418_493, None, 100, 64),
    (28, 4, 128, 2, 1, 1_000_001, 0.7, 0, 512),
]


def main() -> int:
    from generate import install_stubs

    install_stubs()
    import importlib.metadata

    import torch
    from sglang.srt.mem_cache.pool_host import base
    from sglang.srt.mem_cache.pool_host.base import HostKVCache
    from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost

    class _Probe(HostKVCache):  # sizing only: the data-moving hooks are never called
        def get_size_per_token(self) -> int:
            return self.size_per_token

        def init_kv_buffer(self):
            raise AssertionError("not called with is_dummy=True")

        backup_from_device_all_layer = get_data_page = get_dummy_flat_data_page = init_kv_buffer
        load_to_device_per_layer = set_from_flat_data_page = init_kv_buffer

    _Probe.__abstractmethods__ = frozenset()
    dtypes = {1: torch.uint8, 2: torch.bfloat16}
    cases = []
    for layers, heads, head, item, page, device, ratio, size_gb, ram_gib in CASES:
        geometry = types.SimpleNamespace(head_dim=head, v_head_dim=head, head_num=heads, layer_num=layers,
                                         dtype=dtypes[item])
        per_token = MHATokenToKVPoolHost.get_size_per_token(geometry)
        probe = _Probe(dtype=dtypes[item], device_capacity_tokens=device, size_per_token=per_token,
                       start_layer=0, end_layer=layers, host_to_device_ratio=ratio or 0.0,
                       host_size=size_gb, page_size=page, layout="layer_first", pin_memory=False,
                       device="cpu", is_dummy=True)
        case = {"layers": layers, "heads": heads, "head_dim": head, "dtype_bytes": item, "page_size": page,
                "device_tokens": device, "hicache_ratio": ratio, "hicache_size": size_gb,
                "host_ram_gib": ram_gib, "size_per_token": per_token, "host_tokens": probe.size,
                "page_num": probe.page_num, "host_bytes": probe.size * per_token}
        if ram_gib is not None:
            base.available_host_memory_bytes = lambda allow_cgroup_fallback=True, _r=ram_gib: _r * 1024**3
            base.ranks_per_host = lambda: 1
            allowance = base.host_memory_budget_bytes(case["host_bytes"])
            case["allowance"] = allowance
            case["refused"] = case["host_bytes"] > allowance
        cases.append(case)
        print(case, file=sys.stderr)
    OUT.write_text(json.dumps({"generator": "tools/offload_truth/hicache.py",
                               "versions": {"sglang": importlib.metadata.version("sglang"),
                                            "torch": torch.__version__},
                               "cases": cases}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
