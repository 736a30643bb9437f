"""Command-line plumbing for the user's commands: a usage error is one line (docs/guarantees.md), and
a reader that stops early (``| head``) ends the command quietly.

argparse prints its usage block above an error; here an unknown option, a bad value, a missing
argument or an option given twice is ``PROG: error: MESSAGE``, exit code 2 (``--help`` still prints
the usage). Used by ``copyseq``'s subcommands that are argparse programs (tasks, predict, export,
eval-options, render-results, retrain).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import NoReturn


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line, ``PROG: error: MESSAGE``, exit code 2, without the usage
    block. The subcommands' parsers are of this class too (``add_subparsers`` makes them of the
    parent's class). argparse's message names the option: "argument --max-len: invalid int value: 'x'"."""

    def error(self, message: str) -> NoReturn:
        refuse(self.prog, message)

    def parse_args(self, args=None, namespace=None) -> argparse.Namespace:  # type: ignore[override]
        parsed = super().parse_args(args, namespace)
        vars(parsed).pop(GIVEN, None)  # Once's record of the options seen
        return parsed


def refuse(prog: str, message: str) -> NoReturn:
    """A refusal of command ``prog``: one line on stderr (no usage block, no traceback), exit code 2."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


GIVEN = "_options_given"  # where Once keeps the options it has seen (dropped from the namespace after parsing)


class Once(argparse.Action):
    """Store an option's value(s), refusing the option given a second time: argparse would keep the last
    one silently (``--valid a.tsv --valid b.tsv`` would drop ``a.tsv``)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        given = namespace.__dict__.setdefault(GIVEN, set())
        if self.dest in given:
            many = " with all its values" if self.nargs == "+" else ""
            raise argparse.ArgumentError(self, f"given twice: give it once{many}")
        given.add(self.dest)
        setattr(namespace, self.dest, values)


CLOSED_PIPE_EXIT = 128 + 13  # the exit code of a Unix tool ended by SIGPIPE (`yes | head`)


def run_command(main: Callable[[], int | None]) -> int:
    """``main()``'s exit code; when the reader of standard output has closed it (``copyseq predict ...
    | head``), quietly the code a Unix tool gives, not a BrokenPipeError traceback. Standard output
    then points at /dev/null, so that the interpreter's last flush does not raise again."""
    try:
        return main() or 0
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return CLOSED_PIPE_EXIT
