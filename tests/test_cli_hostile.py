"""The real `mrtr call` (and `mrtr list`) against a hostile server: what a person sees.

The server is `tests/servers/hostile_cli_server.py` over stdio. What reaches the screen is
checked in a real terminal: tmux runs the command in a pane, the answers are typed with
`send-keys`, and `capture-pane -p -e` gives the screen with its escape sequences, so a control
sequence that got through (a colour, a cleared screen, an erased line) shows; tmux's own state
tells whether the pane's title was set (OSC 0) or the clipboard written (OSC 52, kept as a
paste buffer with `set-clipboard on`). Needs tmux (`scripts/test.sh` installs it).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SERVER = "tests/servers/hostile_cli_server.py"
SERVE = [sys.executable, "-m", "mrtr.cli", "serve", SERVER]
LABEL = shlex.join(SERVE)  # how `mrtr call` names the server
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
WAIT = 15  # seconds a screen may take to show what is awaited: a guard, never a measurement
ESC = "\x1b"


class Pane:
    """One tmux server (its own socket) with one pane running bash, 250x60."""

    def __init__(self) -> None:
        if shutil.which("tmux") is None:
            pytest.fail("tmux is not installed (scripts/test.sh installs it)")
        self.socket = f"mrtr-test-{uuid.uuid4().hex[:12]}"
        self.tmux("new-session", "-d", "-s", "t", "-x", "250", "-y", "60",
                  "env", "PS1=$ ", "bash", "--norc", "--noprofile")  # fmt: skip
        self.tmux("set-option", "-g", "set-clipboard", "on")
        self.title = self.tmux("display-message", "-p", "-t", "t", "#{pane_title}")

    def tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, "-f", "/dev/null", *args],
            capture_output=True, text=True, timeout=10, check=True, cwd=ROOT, env=ENV,
        )  # fmt: skip
        return done.stdout

    def run(self, words: list[str]) -> None:
        """Type a command line running `words` (in the repository, this tree's mrtr)."""
        line = f"cd {shlex.quote(str(ROOT))} && PYTHONPATH={shlex.quote(ENV['PYTHONPATH'])} "
        # Split in the line typed, so that only the echo shows "[exit N]" whole.
        line += shlex.join(words) + '; echo "[ex""it $?]"'
        self.type(line)

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", "t", "-l", text)
        self.tmux("send-keys", "-t", "t", "Enter")

    def screen(self) -> str:
        """The visible screen, wrapped lines joined, with escapes for what is not plain."""
        return self.tmux("capture-pane", "-p", "-e", "-J", "-t", "t")

    def wait_for(self, text: str, seconds: float = WAIT) -> str:
        """The screen once `text` shows on it; fails after `seconds`."""
        deadline = time.monotonic() + seconds
        while True:
            screen = self.screen()
            if text in screen:
                return screen
            if time.monotonic() > deadline:
                pytest.fail(f"{text!r} never showed; the screen:\n{screen}")
            time.sleep(0.05)

    def buffers(self) -> str:
        """tmux's paste buffers: where an OSC 52 clipboard write lands."""
        return self.tmux("list-buffers", "-F", "#{buffer_sample}")

    def pane_title(self) -> str:
        return self.tmux("display-message", "-p", "-t", "t", "#{pane_title}")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=10)


@pytest.fixture
def pane() -> Iterator[Pane]:
    terminal = Pane()
    try:
        terminal.wait_for("$ ")
        yield terminal
    finally:
        terminal.close()


def mrtr_call(tool: str, *words: str) -> list[str]:
    """The words after `mrtr` that call `tool` on the hostile server."""
    return ["call", tool, *words, "--", *SERVE]


def call(tool: str, *words: str) -> list[str]:
    """The command line of `mrtr call` calling `tool` on the hostile server."""
    return [sys.executable, "-m", "mrtr.cli", *mrtr_call(tool, *words)]


def run_cli(*args: str, stdin: str = "", timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mrtr.cli", *args],
        input=stdin, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=ENV,
    )  # fmt: skip


def assert_untouched(pane: Pane, screen: str) -> None:
    """No escape sequence of the server's reached the screen or the terminal's state."""
    assert ESC not in screen, f"an escape sequence reached the screen:\n{screen!r}"
    assert pane.pane_title() == pane.title  # no OSC 0
    assert "evil" not in pane.buffers()  # no OSC 52


# --- 1: a server takes over the terminal --------------------------------------------------------


def test_a_spoofed_line_cannot_erase_the_line_naming_the_server(pane: Pane) -> None:
    pane.run(call("spoof"))
    asked = pane.wait_for("Respond?").splitlines()
    assert f"The server ({LABEL}) asks:" in asked
    assert not any(line.startswith("The server (https://accounts.google.com)") for line in asked)
    assert "  \\x1b[1A\\x1b[2K\\x0dThe server (https://accounts.google.com) asks:" in asked
    pane.type("a")
    pane.wait_for("2) Blue")
    pane.type("1")
    screen = pane.wait_for("[exit ")
    assert "spoof accept" in screen and "[exit 0]" in screen
    assert f"The server ({LABEL}) asks:" in screen  # the screen was not cleared either
    assert_untouched(pane, screen)


def test_logs_progress_stderr_and_the_result_reach_the_screen_escaped(pane: Pane) -> None:
    pane.run(call("noisy"))
    screen = pane.wait_for("[exit ")
    assert "[exit 0]" in screen
    assert "server: stderr \\x1b[2J\\x1b[H\\u202egnp.exe" in screen
    assert "server log [warning] log \\x1b]0;pwned title\\x07 line" in screen
    assert "half \\x1b[31mred" in screen
    assert "result \\x1b[2J" in screen and "\\x9b31m end" in screen
    assert "\u202e" not in screen
    assert_untouched(pane, screen)


def test_json_output_stays_json_and_carries_no_raw_control() -> None:
    done = run_cli(*mrtr_call("noisy", "--json"))
    assert done.returncode == 0, done.stderr
    assert not any(c in done.stdout for c in (ESC, "\x9b", "\x07"))
    [block] = json.loads(done.stdout)["content"]
    assert block["text"].startswith(f"result {ESC}[2J") and "\x9b31m end" in block["text"]


def test_list_shows_a_hostile_description_escaped(pane: Pane) -> None:
    pane.run([sys.executable, "-m", "mrtr.cli", "list", "--", *SERVE])
    screen = pane.wait_for("[exit ")
    assert "[exit 0]" in screen
    assert "looks harmless\\x1b[2J\\x1b[H\\u202egnp.exe" in screen
    assert_untouched(pane, screen)


# --- 2: a URL question shows one address and opens another --------------------------------------


def test_a_url_that_hides_its_real_address_is_declined_unasked(pane: Pane) -> None:
    pane.run(call("link"))
    screen = pane.wait_for("[exit ")
    assert "Did you open it?" not in screen
    assert "link decline" in screen and "[exit 0]" in screen
    [url] = [line for line in screen.splitlines() if line.startswith("  URL:")]
    assert url.startswith("  URL:  https://evil.example/steal\\x08")  # what would be opened
    assert "HOST:" not in screen
    assert "outside printable ASCII" in screen
    assert_untouched(pane, screen)


def test_a_percent_encoded_look_alike_host_is_shown_in_ascii() -> None:
    done = run_cli(*mrtr_call("homograph"), stdin="d\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "homograph decline"
    assert "HOST: xn--pple-43d.com" in done.stderr
    assert "look-alike" in done.stderr


# --- 5: a server's pattern freezes the command --------------------------------------------------


def test_a_runaway_pattern_neither_freezes_the_command_nor_its_ctrl_c(pane: Pane) -> None:
    pane.run(call("redos"))
    pane.wait_for("Respond?")
    pane.type("a")
    pane.wait_for("    > ")
    pane.type("a" * 24)  # takes Python's re hours against this pattern
    time.sleep(0.3)
    pane.tmux("send-keys", "-t", "t", "C-c")
    # Before, the match held the terminal for hours and Ctrl-C with it: a generous bound,
    # for a loaded machine, still tells the two apart.
    screen = pane.wait_for("[exit ", seconds=30)
    # Interrupted (130), or the answer was let through once the pattern ran out of time.
    assert "[exit 130]" in screen or "redos accept" in screen


def test_a_runaway_pattern_lets_the_answer_through_in_bounded_time() -> None:
    # The match takes Python's re hours against this answer: the command ending at all, within
    # a bound generous enough for a loaded machine, is what is checked.
    done = run_cli(*mrtr_call("redos"), stdin="a\n" + "a" * 24 + "\n", timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "redos accept: " + "a" * 24


# --- 6: a result nested 1000 deep ---------------------------------------------------------------


def test_a_result_nested_too_deep_is_one_line_of_protocol_violation() -> None:
    server = [sys.executable, SERVER, "deep", "1000"]
    done = run_cli("call", "deep", "--", *server)
    assert done.returncode == 1
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "mrtr call: error: the server broke the protocol: its result nests more than 64 "
        "levels deep (not shown)"
    ]
    shallow = run_cli("call", "deep", "--", sys.executable, SERVER, "deep", "5")
    assert shallow.returncode == 0, shallow.stderr
    assert '"bottom"' in shallow.stdout


# --- 7: a form asking for a secret --------------------------------------------------------------


def test_a_form_asking_a_password_warns_hides_it_and_asks_before_sending(pane: Pane) -> None:
    pane.run(call("bank"))
    screen = pane.wait_for("Respond?")
    assert "'Bank password' looks like a secret" in screen
    assert "Servers MUST NOT use form mode elicitation" in screen
    pane.type("a")
    pane.wait_for("    > ")
    pane.type("bob")
    pane.wait_for("(typed without echo)")
    pane.type("hunter22")
    screen = pane.wait_for("Send it? [y/N]")
    assert 'to send: {"user": "bob", "password": "••••"}' in screen
    pane.type("y")
    screen = pane.wait_for("[exit ")
    assert "bank accept: user=bob password length 8" in screen
    assert "hunter22" not in screen  # neither echoed nor printed
    assert_untouched(pane, screen)
    pane.type(": echo is back")  # the terminal echoes again what is typed
    pane.wait_for("$ : echo is back")


def test_ctrl_c_at_the_password_gives_the_terminal_its_echo_back(pane: Pane) -> None:
    pane.run(call("bank"))
    pane.wait_for("Respond?")
    pane.type("a")
    pane.wait_for("    > ")
    pane.type("bob")
    pane.wait_for("(typed without echo)")
    time.sleep(0.2)
    pane.tmux("send-keys", "-t", "t", "C-c")
    pane.wait_for("[exit 130]")
    # Split in the line typed, so that only the output shows "state:" whole.
    pane.type(
        """stty -a | tr ' ' '\\n' | grep -x -e -echo -e echo | awk '{print "st" "ate:" $0}'"""
    )
    assert "state:echo" in pane.wait_for("state:").splitlines()


def test_a_piped_password_is_masked_in_the_transcript_and_a_no_declines() -> None:
    done = run_cli(*mrtr_call("bank"), stdin="a\nbob\nhunter22\nn\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "bank decline"
    assert "hunter22" not in done.stderr
    assert "(not sent: replying decline)" in done.stderr
