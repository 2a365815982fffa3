"""tests/conftest.py's skip reasons: on a free-threaded build a skip for a module that cannot be
installed there says why; elsewhere, and for other modules, the reason is left as it is."""

from __future__ import annotations

from tests.conftest import NO_FREE_THREADED_WHEEL, explained


def test_a_skip_for_a_module_without_a_free_threaded_wheel_says_why_there() -> None:
    message = "could not import 'lightning.pytorch': No module named 'lightning'"
    assert explained(message, free_threaded=True) == (
        f"{message} (not installable on this free-threaded build: {NO_FREE_THREADED_WHEEL['lightning']})"
    )
    moto = "moto is not installed; needs moto for the S3 server"
    assert NO_FREE_THREADED_WHEEL["moto"] in explained(moto, free_threaded=True)


def test_other_skips_and_other_builds_keep_their_reason() -> None:
    lightning = "could not import 'lightning.pytorch': No module named 'lightning'"
    assert explained(lightning, free_threaded=False) == lightning
    assert explained("could not import 'nosuchmodule'", free_threaded=True) == "could not import 'nosuchmodule'"
    said = "needs ray (the frameworks extra; it has no free-threaded wheel)"
    assert explained(said, free_threaded=True) == said
