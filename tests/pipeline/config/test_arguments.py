"""The user's commands' plumbing (pipeline/config/arguments.py): one-line usage errors, and a reader
that closes standard output early (``| head``) ends the command quietly."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pipeline.config.arguments import CLOSED_PIPE_EXIT, Once, OneLineParser
from tests.helpers import REPO

# A command that prints far more than a pipe holds: its reader stops after the first line.
LOUD = (
    "import sys; from pipeline.config.arguments import run_command\n"
    "def main():\n"
    "    for i in range(200000):\n"
    "        print(f'line {i}')\n"
    "    return 0\n"
    "sys.exit(run_command(main))\n"
)


def test_a_reader_that_stops_early_ends_the_command_quietly():
    proc = subprocess.Popen(
        [sys.executable, "-c", LOUD], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline() == "line 0\n"
    proc.stdout.close()  # as `| head -1` does
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == CLOSED_PIPE_EXIT == 141
    assert err == ""  # no BrokenPipeError traceback, no "Exception ignored" at the interpreter's exit


def test_a_usage_error_is_one_line_naming_the_command(capsys):
    parser = OneLineParser(prog="copyseq thing")
    parser.add_argument("--valid", action=Once)
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--valid", "a", "--valid", "b"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "copyseq thing: error: argument --valid: given twice: give it once\n"
    assert vars(parser.parse_args(["--valid", "a"])) == {"valid": "a"}  # Once's record is not left behind
