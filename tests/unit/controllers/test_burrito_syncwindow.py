"""burrito's sync-window test cases (internal/utils/syncwindow/syncwindow_test.go), translated.

burrito asks `IsSyncBlocked(windows, action, layer)`; ours is `sync_windows_allow(...)`, whose `allowed` is the
opposite of `blocked` and whose reason names burrito's (`inside-deny-window` → `SyncWindowDenied`,
`outside-allow-window` → `OutsideSyncWindow`). burrito reads the clock; we pass the time of its suite.
"""

from __future__ import annotations

from datetime import UTC, datetime

from burrito_py.controllers.layer.sync_windows import Window, sync_windows_allow

NOW = datetime(2023, 5, 8, 11, 21, 53, tzinfo=UTC)  # testTime of burrito's suite
EVERY_MINUTE = "* * * * *"
NEVER = "0 0 31 2 *"  # February 31st


def blocked(windows: list[Window], layer: str = "test-layer", action: str = "plan") -> tuple[bool, str]:
    verdict = sync_windows_allow(windows, action, layer, NOW)
    return (not verdict.allowed, "" if verdict.allowed else verdict.reason)


def test_no_sync_windows_do_not_block():
    """With no sync windows / Should not block sync."""
    assert blocked([]) == (False, "")


def test_deny_window_blocks():
    """With deny windows / Should block sync when in deny window."""
    deny = Window("deny", EVERY_MINUTE, "1h", actions=("plan",), layers=("test-*",))
    assert blocked([deny]) == (True, "SyncWindowDenied")


def test_deny_window_for_other_layers_does_not_block():
    """With deny windows / Should not block sync when layer doesn't match pattern."""
    deny = Window("deny", EVERY_MINUTE, "1h", actions=("plan",), layers=("prod-*",))
    assert blocked([deny]) == (False, "")


def test_allow_window_open_allows():
    """With allow windows / Should allow sync during allow window."""
    allow = Window("allow", EVERY_MINUTE, "1h", actions=("plan",), layers=("*",))
    assert blocked([allow]) == (False, "")


def test_allow_window_that_never_opens_blocks():
    """With allow windows / Should block sync outside allow window (a schedule that never fires: Feb 31).

    Issue 11 item 6: today this raises and blocks as `InvalidSyncWindow`; a cron that never fires is a window
    never active, so outside the (only) allow window."""
    allow = Window("allow", NEVER, "1h", actions=("plan",), layers=("*",))
    assert blocked([allow]) == (True, "OutsideSyncWindow")


def test_deny_wins_over_allow():
    """With mixed windows / Should block sync when in deny window, even if in allow window."""
    allow = Window("allow", EVERY_MINUTE, "1h", actions=("plan",), layers=("*",))
    deny = Window("deny", EVERY_MINUTE, "1h", actions=("plan",), layers=("test-*",))
    assert blocked([allow, deny]) == (True, "SyncWindowDenied")


def test_allow_open_and_deny_never_active_allows():
    """With mixed windows / Should allow sync when in allow window and not in deny window.

    Issue 11 item 6: the never-firing deny window raised today."""
    allow = Window("allow", EVERY_MINUTE, "1h", actions=("plan",), layers=("*",))
    deny = Window("deny", NEVER, "1h", actions=("plan",), layers=("test-*",))
    assert blocked([allow, deny]) == (False, "")


def test_exact_layer_names_match():
    """With layer patterns / Should match exact layer names."""
    deny = Window("deny", EVERY_MINUTE, "1h", actions=("plan",), layers=("test-layer",))
    assert blocked([deny], "test-layer")[0]
    assert not blocked([deny], "other-layer")[0]


def test_wildcard_patterns_match():
    """With layer patterns / Should match wildcard patterns."""
    deny = Window("deny", EVERY_MINUTE, "1h", actions=("plan",), layers=("test-*",))
    assert blocked([deny], "test-layer")[0]
    assert blocked([deny], "test-other")[0]
    assert not blocked([deny], "prod-layer")[0]


def test_star_matches_every_layer():
    """With layer patterns / Should match all layers with *."""
    deny = Window("deny", EVERY_MINUTE, "1h", actions=("plan",), layers=("*",))
    assert all(blocked([deny], name)[0] for name in ("test-layer", "prod-layer", "any-layer"))


def test_invalid_schedule_blocks_visibly():
    """With invalid configurations / Should handle invalid schedule formats.

    Differs on purpose: burrito logs the error and does not block; we refuse with `InvalidSyncWindow` (shown as
    the layer's IsInSyncWindow condition), because silently ignoring a deny window nobody can read is the
    unsafe choice. The CRD's schema refuses such a schedule before it is stored anyway."""
    deny = Window("deny", "invalid-cron", "1h", actions=("plan",), layers=("*",))
    assert blocked([deny]) == (True, "InvalidSyncWindow")


def test_invalid_duration_blocks_visibly():
    """With invalid configurations / Should handle invalid duration formats (differs on purpose, as above)."""
    deny = Window("deny", EVERY_MINUTE, "invalid-duration", actions=("plan",), layers=("*",))
    assert blocked([deny]) == (True, "InvalidSyncWindow")


def test_empty_actions_and_layers_mean_all():
    """Not a burrito case: burrito matches nothing when `actions` or `layers` is empty; our CRD documents
    "empty: all" (a window without a filter covers everything), and we keep that."""
    assert blocked([Window("deny", EVERY_MINUTE, "1h")]) == (True, "SyncWindowDenied")
