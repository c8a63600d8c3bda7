"""Real-browser fixtures: Debian chromium through pytest-playwright, one `streamlit run` per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from app_server import served_app

CHROMIUM = os.environ.get("KVPLAN_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.browser)
            if not Path(CHROMIUM).exists():
                item.add_marker(pytest.mark.skip(
                    reason=f"{CHROMIUM} missing: apt-get install -y chromium fonts-liberation"))


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    return {**browser_context_args, "accept_downloads": True,
            "viewport": {"width": 1400, "height": 1000}}


@pytest.fixture(scope="session")
def app_url(tmp_path_factory):
    """The dashboard as ``./dev app`` serves it (``kvplan.ui.launch``), PNG warm-up on."""
    log = tmp_path_factory.mktemp("streamlit") / "server.log"
    with served_app(log, launcher=True, env={**os.environ, "KVPLAN_PNG_WARM_UP": "1"}) as (url, _):
        yield url
