"""Typed settings from params sections: an unknown key is an error, not ignored, and a value of the
wrong type or out of range is an error that names the setting."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import TypeVar

T = TypeVar("T")


def dataclass_from_dict(cls: type[T], d: dict, **extra) -> T:
    """Build a settings dataclass from a params section; an unknown key is an error, not ignored."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"unknown {cls.__name__} settings {unknown}; known: {sorted(known)}")
    return cls(**{**d, **extra})


def check_numeric_config(config, checks: Callable[[], list[tuple[bool, str]]]) -> None:
    """Validate an all-numeric config dataclass: ``int`` fields hold ints, the others ints or floats
    (never bools); then every ``(ok, description)`` that ``checks()`` returns holds (a callable, so
    the comparisons run only once the types are known good); the error names every failed one."""
    name = type(config).__name__
    for f in fields(config):
        value = getattr(config, f.name)
        allowed = (int,) if f.type in ("int", int) else (int, float)
        if isinstance(value, bool) or not isinstance(value, allowed):
            raise ValueError(f"{name}.{f.name} must be {f.type}, got {value!r}")
    failed = [msg for ok, msg in checks() if not ok]
    if failed:
        raise ValueError(f"invalid {name} {config}: need {', '.join(failed)}")


class InputError(ValueError):
    """A problem with what the user gave -- a setting, a data file --, whose message says all there is
    to say (what, where, what to do). The commands print the message alone, last, without a
    traceback, and exit 2 (``flows.cli``, ``python -m pipeline.data.tasks``)."""


class SettingsError(InputError):
    """A setting that cannot work, found before any work: the message names the setting and says what
    it must be."""
