"""``python -m kvplan.ui.launch [streamlit run options]``: serve the dashboard (``app.py`` of this
checkout) warm.

Before the server listens, it imports what the first run of ``app.py`` needs (pandas, Plotly,
the views, the presets, the validated chart template), so the first visitor does not pay those
imports (≈ 2 s on 2 CPUs), and fills the caches of the default page's answer and first chart;
the PNG export browser starts meanwhile (``kvplan.png.warm_up_in_background``) and is waited for
(at most ``WARM_UP_WAIT``), so the first PNG download does not pay Chromium's start and the first
render does not share the CPU with it; then the loaded objects are frozen out of the garbage
collector (``gc.freeze``), so Streamlit's full collection after every rerun walks only what the
sessions created.
``./dev app``, the browser tests and the benchmarks serve the app this way.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Sequence
from pathlib import Path

APP = Path(__file__).resolve().parents[2] / "app.py"
#: Seconds the launcher waits for the PNG export browser's warm-up before listening (it goes on
#: in the background after that).
WARM_UP_WAIT = 30.0


def preload() -> None:
    """Import and build once what every first run uses (the script's own imports then hit
    ``sys.modules`` and the caches)."""
    import inspect

    # besides the views app.py imports, what the first run still imported: the download buttons,
    # st.image's PIL, Streamlit's magic and component-manifest helpers (bench/README.md)
    import pandas
    import PIL.ImageFile  # noqa: F401
    import plotly.graph_objects  # noqa: F401
    import streamlit.components.v2.manifest_scanner  # noqa: F401
    import streamlit.emojis  # noqa: F401  (set_page_config's icon check compiles its big regex)
    import streamlit.runtime.scriptrunner.magic_funcs  # noqa: F401
    from streamlit.elements import plotly_chart  # noqa: F401

    from kvplan.png import warm_up_in_background
    from kvplan.presets import gpus, model_presets
    from kvplan.report import named_scenarios
    from kvplan.ui import (  # noqa: F401
        calibrate_view,
        exports_ui,
        instances_view,
        offload_view,
        recommend_view,
        serving_view,
        views,
    )
    from kvplan.ui.theme import apply_template, new_figure

    warm_up = warm_up_in_background()
    model_presets()
    gpus()
    named_scenarios()
    apply_template(new_figure())
    pandas.DataFrame({"text": ["x"]})  # the first text column starts pandas' Arrow strings
    _default_scenario_once()
    # Streamlit's first element of a process calls env_util.is_repl(), i.e. inspect.stack(): its
    # first call resolves the path of every loaded module (inspect.getmodule's cache); do it here.
    inspect.stack()
    # The export browser's start (Chromium, kaleido's page, its pipe read by a Python thread of
    # this process) took CPU and the GIL from the first visitor's render when it overlapped it
    # (≈ 0.15 s of a 1.4 s first render, bench/README.md): finish it before the server listens.
    if warm_up is not None:
        warm_up.join(timeout=WARM_UP_WAIT)
    # Streamlit collects garbage after every run: ScriptRunner._on_script_finished
    # (streamlit/runtime/scriptrunner/script_runner.py) calls gc.collect(2) when
    # ``runner.postScriptGC`` is on (the default), holding the GIL while the run's last deltas wait
    # to be sent. What was loaded up to here lives as long as the server: freeze it out of them.
    gc.collect()
    gc.freeze()


def _default_scenario_once() -> None:
    """Fill the caches the default page's first run reads (``kvplan.ui.cached.answers``, the
    context view's data, figure and static SVG, each by the default scenario's ``cache_key``), so
    the first visitor of the plain address reads them, as every later visitor does, instead of
    computing them in the render (≈ 50–130 ms of its first run on 2 CPUs, bench/README.md); what
    that path initialises on first use (pandas' index and concat paths, the capacity code,
    Plotly's property validators) is then ready for any other scenario too. Streamlit's data caches
    are the process's (global scope), created here before its runtime exists; its note that no
    runtime exists yet is not printed."""
    import logging

    from kvplan.scenario import Scenario
    from kvplan.ui import views
    from kvplan.ui.cached import answers, cache_key

    def no_runtime_note(record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("No runtime found")

    # a filter, not a level: Streamlit sets its loggers' levels again when its config loads
    logger = logging.getLogger("streamlit.runtime.caching.cache_data_api")
    logger.addFilter(no_runtime_note)
    try:
        key = cache_key(Scenario())
        answers(key)
        views._context_data(key)
        views._kv_context_svg(key)  # and the figure it is drawn from (views._kv_context_fig)
    finally:
        logger.removeFilter(no_runtime_note)


def main(argv: Sequence[str] | None = None) -> None:
    """``streamlit run app.py`` with ``argv`` as its options, after ``preload``."""
    from streamlit.web import cli

    preload()
    sys.argv = ["streamlit", "run", str(APP), *(sys.argv[1:] if argv is None else argv)]
    cli.main()


if __name__ == "__main__":
    main()
