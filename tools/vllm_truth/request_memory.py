"""vLLM's own start-up check beside other processes → ``tests/fixtures/vllm_truth/request_memory.json``.

Dev-time only, with the venv of ``README.md`` (vLLM 0.33.0 wheel, CPU torch):
``python tools/vllm_truth/request_memory.py``. ``tests/test_instances.py`` compares kvplan with it.

Called as is: ``vllm/v1/worker/utils.py`` ``request_memory(init_snapshot, cache_config)`` — the
``ceil(total × gpu_memory_utilization)`` it returns, or the ``ValueError`` it raises when the free
memory at start is below it. Written here: the ``MemorySnapshot`` (``device="cuda:0"``,
``auto_measure=False``, its ``free_memory`` / ``total_memory`` set) and a ``CacheConfig``
with only ``gpu_memory_utilization``. The free memory is kvplan's for the vLLM instance started
after the others of each case (``kvplan.instances.share``: the device total minus what they hold),
so only vLLM's check is compared, as ``sglang_truth/generate.py`` shares the weights.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

#: (case id, instances before the vLLM one as ``kvplan share --instance`` lines, the vLLM line)
CASES = [
    ("after-sglang-0.8", ["name=s,model=llama-3.1-8b,engine=sglang,gu=0.8,tokens=8192,users=8"],
     "name=v,model=llama-3.1-8b,engine=vllm@0.33,gu=0.45,tokens=8192,users=8"),
    ("after-sglang-0.8-fits", ["name=s,model=llama-3.1-8b,engine=sglang,gu=0.8,tokens=8192,users=8"],
     "name=v,model=llama-3.1-8b,engine=vllm@0.33,gu=0.198,tokens=8192,users=8"),
    ("after-vllm-0.45", ["name=a,model=llama-3.1-8b,engine=vllm@0.33,gu=0.45,tokens=8192,users=8"],
     "name=b,model=llama-3.1-8b,engine=vllm@0.33,gu=0.45,tokens=8192,users=8"),
    ("after-trtllm-0.9", ["name=t,model=llama-3.1-8b,engine=trtllm,gu=0.9,tokens=8192,users=8"],
     "name=v,model=qwen3-8b,engine=vllm@0.33,gu=0.1,tokens=4096,users=1"),
    ("h200-after-vllm-0.5", ["name=a,model=llama-3.1-70b,engine=vllm@0.33,gu=0.5,tokens=8192,users=1"],
     "name=b,model=llama-3.1-8b,engine=vllm@0.33,gu=0.48,tokens=8192,users=8"),
]


def main() -> None:
    import torch
    import vllm
    from vllm.utils.mem_utils import MemorySnapshot
    from vllm.v1.worker.utils import request_memory

    from kvplan.instances import parse_instance, share
    from kvplan.presets import get_gpu

    out = {"vllm": vllm.__version__, "torch": torch.__version__,
           "source": "vllm/v1/worker/utils.py request_memory (run unmodified)", "cases": []}
    for case, before, line in CASES:
        gpu = get_gpu("h200" if case.startswith("h200") else "h100-sxm")
        named = [parse_instance(text, gpu, index=i) for i, text in enumerate([*before, line], 1)]
        held = sum(item.held_bytes for item in share(named[:-1]).instances)
        total = named[-1][1].engine.capacity(gpu).bytes
        util = named[-1][1].settings.gpu_util
        snapshot = MemorySnapshot(device="cuda:0", auto_measure=False)
        snapshot.total_memory, snapshot.free_memory = total, total - held
        try:
            requested, message = request_memory(snapshot, SimpleNamespace(gpu_memory_utilization=util)), None
        except ValueError as err:
            requested, message = None, str(err)
        out["cases"].append({"case": case, "gpu": gpu.id, "before": before, "instance": line,
                             "total_memory": total, "free_memory": total - held, "util": util,
                             "requested_memory": requested, "error": message})
    target = ROOT / "tests" / "fixtures" / "vllm_truth" / "request_memory.json"
    target.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {target} ({len(out['cases'])} cases)")


if __name__ == "__main__":
    main()
