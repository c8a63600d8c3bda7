"""Test-wide settings: the in-process app tests do not start the PNG export browser in the
background (``kvplan.png.warm_up_in_background``); the real-server tests in tests/browser do."""

from __future__ import annotations

import os

os.environ.setdefault("KVPLAN_PNG_WARM_UP", "0")
