"""The dashboard's "Several engines on one GPU" section (kvplan/ui/instances_view.py) through AppTest:
the numbers are the core's (``kvplan.instances.share``), the lines travel in the link (``in=``), user
text is never Markdown, bad lines are named."""

from __future__ import annotations

import logging

from md_text import unmd
from test_app import make_app, open_boxes

from kvplan.scenario import Scenario

logging.getLogger("streamlit.runtime.scriptrunner_utils.script_run_context").setLevel(logging.ERROR)

CHAT = "name=chat,model=llama-3.1-8b,engine=vllm@0.33,gu=0.45,tokens=8192,users=8"
SG = "name=*bold*,model=llama-3.1-8b,engine=sglang,gu=0.8,tokens=8192,users=8"


def test_instances_from_the_link_draw_the_chart_and_the_table() -> None:
    at = open_boxes(make_app(**{"in": f"{SG};{CHAT}"}), "box_instances")
    assert not at.exception
    errors = [unmd(e.value) for e in at.error]
    # SGLang first holds 546,534,588 (held before loading) + int((85,027,979,264 − 546,534,588) × 0.8)
    # = 68,131,690,328 B; vLLM v0.33 then finds 15.74 GiB free
    assert errors == ["2. chat (vLLM (v1 paged blocks), vLLM v0.33) does not start: Free memory on device "
                      "cuda:0 (15.74/79.19 GiB) on startup is less than desired GPU memory utilization "
                      "(0.45, 35.63 GiB). Decrease GPU memory utilization or reduce GPU memory used by "
                      "other processes."]
    ok = [unmd(s.value) for s in at.success if unmd(s.value).startswith("1. ")]
    # 393,101 tokens before SGLang's weights held the RoPE cache and allocator segments (68,673,536 B)
    assert ok == ["1. *bold* (SGLang (token pool), SGLang 0.5.23): starts; 47 requests of 8,192 tokens fit "
                  "(KV pool 392,577 tokens)"]
    assert "\\*bold\\*" in at.success[1].value  # the name's '*' is escaped, not emphasis
    table = next(d.value for d in at.dataframe if "held_by_others_bytes" in d.value.columns)
    assert list(table["instance"]) == ["*bold*", "chat"]
    assert list(table["holds_bytes"]) == [68_131_690_328, 0]
    assert list(table["held_by_others_bytes"]) == [0, 68_131_690_328]


def test_instances_widget_goes_into_the_link() -> None:
    at = open_boxes(make_app(), "box_instances")
    at.text_area(key="w_in").input(f"{CHAT}\n{SG}").run()
    assert not at.exception
    assert at.query_params["in"] == f"{CHAT};{SG}"  # lines joined by ';': no control character
    assert Scenario.from_query({"in": f"{CHAT};{SG}"}) == (Scenario(instances=f"{CHAT};{SG}"), [])
    assert len(next(d.value for d in at.dataframe if "held_by_others_bytes" in d.value.columns)) == 2


def test_a_bad_instance_line_is_named() -> None:
    at = open_boxes(make_app(**{"in": "model=llama-3.1-8b,zz=1"}), "box_instances")
    assert not at.exception
    assert [unmd(e.value) for e in at.error] == [
        "--instance 'model=llama-3.1-8b,zz=1': unknown key 'zz' (KEY=VALUE,…: name, model, engine, gu, "
        "tokens, users, kd)"]
