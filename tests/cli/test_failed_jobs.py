"""What a sweep prints of a job that failed, before it goes on to the next."""

import pytest

from lit_rlhf.cli.errors import report_failed_job
from lit_rlhf.errors import TRACEBACKS_ASKED, ConfigError


def raised(err: Exception) -> Exception:
    try:
        raise err
    except Exception as caught:
        return caught


@pytest.mark.parametrize("asked", ["0", "1"])
def test_a_user_mistake_is_one_line_and_its_traceback_only_when_asked(asked, capsys, monkeypatch):
    monkeypatch.setenv(TRACEBACKS_ASKED, asked)
    line = report_failed_job(raised(ConfigError("algo.kl_coef=-1.0 must be >= 0.\x1b[2J")))
    stderr = capsys.readouterr().err
    assert line == "algo.kl_coef=-1.0 must be >= 0.\x1b[2J"  # result.json's JSON escapes it
    assert stderr.endswith("error: algo.kl_coef=-1.0 must be >= 0.\\x1b[2J\n")
    assert ("Traceback" in stderr) == (asked == "1") and "\x1b" not in stderr


def test_an_unexpected_error_keeps_its_traceback_with_control_characters_escaped(capsys, monkeypatch):
    monkeypatch.setenv(TRACEBACKS_ASKED, "0")
    line = report_failed_job(raised(RuntimeError("the server said \x1b]0;owned\x07\nsecond line")))
    stderr = capsys.readouterr().err
    assert line == "RuntimeError: the server said \x1b]0;owned\x07"
    assert stderr.startswith("Traceback (most recent call last):") and "in raised" in stderr
    assert "RuntimeError: the server said \\x1b]0;owned\\x07\nsecond line" in stderr and "\x1b" not in stderr
    assert "error:" not in stderr
