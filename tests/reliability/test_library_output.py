"""What libraries print of untrusted text (transformers' warnings quoting a config.json, an exception quoting a
server's reply) reaches the terminal escaped once an app has started."""

import io
import logging
import sys
import threading
import warnings

import pytest

from lit_rlhf.terminal import PLAIN_FORMATWARNING, escape_what_libraries_print


@pytest.fixture
def fresh_hooks():
    """The interpreter's own hooks for the test (pytest replaces threading's), and the test's back afterwards."""
    saved = logging.getLogRecordFactory(), warnings.formatwarning, sys.excepthook, threading.excepthook
    logging.setLogRecordFactory(logging.LogRecord)
    warnings.formatwarning, sys.excepthook, threading.excepthook = (PLAIN_FORMATWARNING, sys.__excepthook__,
                                                                    threading.__excepthook__)
    yield
    logging.setLogRecordFactory(saved[0])
    warnings.formatwarning, sys.excepthook, threading.excepthook = saved[1:]


def raise_a_reply():
    raise RuntimeError("the server said \x1b]0;pwned\x07 and https://user:secret@host/x")


def test_log_records_warnings_and_uncaught_exceptions_print_escaped(fresh_hooks, capsys):
    escape_what_libraries_print()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)  # as a library's own console handler formats its records
    handler.setFormatter(logging.Formatter("[transformers] %(message)s"))
    log = logging.getLogger("tests.library_output")
    log.addHandler(handler)
    try:
        log.warning("You are using a model of type `%s`", "\x1b]0;pwned\x07gpt_neox")
    finally:
        log.removeHandler(handler)
    assert stream.getvalue() == "[transformers] You are using a model of type `\\x1b]0;pwned\\x07gpt_neox`\n"
    assert (warnings.formatwarning("column \x1b[2Jtext", UserWarning, "data.py", 3, line="")
            == "data.py:3: UserWarning: column \\x1b[2Jtext\n")
    try:
        raise_a_reply()
    except RuntimeError as err:
        sys.excepthook(type(err), err, err.__traceback__)
    thread = threading.Thread(target=raise_a_reply, name="reward-call")
    thread.start()
    thread.join()
    stderr = capsys.readouterr().err
    assert stderr.startswith("Traceback (most recent call last):") and "Exception in thread reward-call:" in stderr
    assert stderr.count("RuntimeError: the server said \\x1b]0;pwned\\x07 and https://user:***@host/x") == 2
    assert "\x1b" not in stderr and "secret" not in stderr


def test_a_hook_another_program_installed_stays(fresh_hooks):
    def debugger_hook(*args):
        pass

    sys.excepthook = threading.excepthook = debugger_hook
    escape_what_libraries_print()
    assert sys.excepthook is debugger_hook and threading.excepthook is debugger_hook
    assert warnings.formatwarning is not PLAIN_FORMATWARNING  # the others are installed all the same
