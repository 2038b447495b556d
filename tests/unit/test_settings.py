"""Settings whose default follows another setting: given or not, through flags or built directly."""

from __future__ import annotations

from localserve.cli.flags import build_parser, resolve_settings
from localserve.settings import Settings, default_inflight_bytes


def test_the_in_flight_budget_follows_the_body_limit_however_settings_are_made():
    big = 100 * 1024 * 1024
    assert Settings(max_body_bytes=big).max_inflight_bytes == default_inflight_bytes(big) >= big
    flags = resolve_settings(build_parser().parse_args(["--max-body-bytes", str(big)]), environ={})
    assert flags.max_inflight_bytes == default_inflight_bytes(big)
    assert Settings(max_body_bytes=big, max_inflight_bytes=big).max_inflight_bytes == big
