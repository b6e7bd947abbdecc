"""Shared behaviour of the absl entry points in ``pipelines/``: errors mapped to one line and an exit code (the
codes: ``retrieval.errors``).

Command-line mistakes are input errors too: a flag that does not parse (``--config.train.batch_size=abc``), an
unknown config key (``--config.train.foo=1``) or a config file that cannot be loaded exits 2 with one line, like an
``InputError`` raised by the program. Config files are therefore defined with :func:`define_config_file`, which
loads them (and applies the overrides) when :func:`run` parses the command line, not while the module is imported.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Callable, Sequence

from absl import app, flags
from ml_collections import config_flags

from retrieval import locations, quiet
from retrieval.errors import (
    EXIT_GATE_REFUSED,
    EXIT_INPUT_ERROR,
    EXIT_LOCKED,
    EXIT_OK,
    LOST_TASK_ADVICE,
    GateError,
    InputError,
    LockedError,
)

# tf.errors raised in the chief when a parameter-server task went away mid-step (matched by name: no TensorFlow here)
LOST_TASK_ERRORS = ("UnavailableError", "AbortedError")
LATEST_KEPT = "latest stays on"  # pipelines.train's last line when a run published to its lineage only
_HELP = re.compile(r"-{1,2}(help|helpshort|helpfull|helpxml|\?)|-h")


flags.disclaim_key_flags()  # flags defined through define_config_file belong to the calling pipeline (--help)
_CONFIG_DEFAULTS: dict[str, str] = {}  # config-file flags defined by define_config_file -> their default file


def define_config_file(name: str, default: str, help_string: str):
    """``config_flags.DEFINE_config_file`` loaded at flag parsing (see the module docstring); ``default`` is the
    file used when ``--<name>`` is not given. Returns the flag holder (``.value`` is the ConfigDict)."""
    _CONFIG_DEFAULTS[name] = default
    holder = config_flags.DEFINE_config_file(name, None, help_string)
    flags.FLAGS[name].default_as_str = repr(default)  # what --help shows; the file is loaded by parse_flags
    return holder


class RunDirFlags:
    """``--run_dir`` and ``--lineage``, defined alike by every entry point that reads a trained run (evaluate,
    recommend, serve, export) and resolved by one function (``locations.resolve_run_dir``): a run directory, a
    ``latest`` link, or a model directory (its published run; with ``--lineage``, that lineage's)."""

    def __init__(self, what: str):
        self.run_dir = flags.DEFINE_string(
            "run_dir", None, f"The run to {what}: a run directory, a model directory (<output_dir>/<config.name>, "
            "whose 'latest' names the published run) or its 'latest' link.")
        self.lineage = flags.DEFINE_string(
            "lineage", None, "With --run_dir a model directory: the published run of this lineage "
            "(<run_dir>/lineages/<lineage>/latest) instead of <run_dir>/latest.")

    def watched(self) -> str:
        """The directory whose ``latest`` a server follows: the model directory, or the lineage's directory."""
        if self.lineage.value:
            return locations.lineage_dir(self.run_dir.value, self.lineage.value)
        return self.run_dir.value

    def resolve(self) -> Path:
        """The real run directory (InputError naming --run_dir or --lineage when there is none)."""
        return locations.resolve_run_dir(self.run_dir.value, self.lineage.value)


def _innermost(error: BaseException) -> str:
    while error.args and isinstance(error.args[0], BaseException):
        error = error.args[0]
    return " ".join(str(error.args[0] if error.args else error).split())


def _override_error(error: BaseException, argv: Sequence[str]) -> str:
    """One line for an override that names no key of the config (ml_collections raises KeyError/AttributeError)."""
    text = _innermost(error)
    missing = re.match(r"'([^']+)'", text)
    if missing is None:
        return f"bad config override: {text}"
    overrides = [arg.lstrip("-").split("=", 1)[0] for arg in argv[1:] if re.match(r"-{1,2}\w+\.", arg)]
    keys = [key for key in overrides if missing.group(1) in key.split(".")[1:]]
    hint = text[missing.end():].strip()
    return f"unknown config key {keys[0] if keys else missing.group(1)}" + (f" ({hint})" if hint else "")


def _with_default_configs(argv: Sequence[str]) -> list[str]:
    argv = list(argv)
    for name, default in _CONFIG_DEFAULTS.items():
        if not any(re.match(rf"-{{1,2}}{name}(=|$)", arg) for arg in argv[1:]):
            argv.insert(1, f"--{name}={default}")
    return argv


def parse_flags(argv: Sequence[str]) -> list[str]:
    """absl flag parsing where every command-line mistake exits 2 with one line (see the module docstring);
    ``--help`` exits 0; ``--verbosity=1`` or more also shows TensorFlow's start-up lines (``retrieval.quiet``)."""
    try:
        remaining = flags.FLAGS(_with_default_configs(argv))
        for name in _CONFIG_DEFAULTS:
            flags.FLAGS[name].value.get  # noqa: B018  (a config file that failed to load raises OSError here)
    except flags.Error as e:
        _exit_input_error(" ".join(str(e).split()))
    except (KeyError, AttributeError) as e:
        _exit_input_error(_override_error(e, argv))
    except OSError as e:
        _exit_input_error(f"cannot load the config file: {str(e).strip().splitlines()[-1].strip()}")
    except SystemExit as e:  # absl's --help prints the usage and exits 1; asking for help is no failure
        sys.exit(help_exit_code(e.code, argv))
    if flags.FLAGS["verbosity"].value >= 1:
        quiet.verbose()
    return remaining


def help_exit_code(code, argv: Sequence[str]):
    """The exit code for absl's ``SystemExit(code)`` while parsing ``argv``: 0 when it printed the asked-for help
    (absl exits 1 after ``--help``), else ``code``."""
    return EXIT_OK if code == 1 and any(_HELP.fullmatch(arg) for arg in argv[1:]) else code


def check_arguments(argv: Sequence[str], *required: flags.FlagHolder) -> None:
    """Refuses positional arguments and empty ``required`` flags with an ``InputError`` naming them (exit 2)."""
    if len(argv) > 1:
        raise InputError(f"unexpected arguments: {' '.join(argv[1:])}")
    for flag in required:
        if not flag.value:
            raise InputError(f"--{flag.name} is required", field=flag.name)


def _exit_input_error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(EXIT_INPUT_ERROR)


def run(main: Callable[[Sequence[str]], None]) -> None:
    """``absl.app.run`` with user errors mapped to one log line and a documented exit code (flags parsed by
    :func:`parse_flags`)."""

    def guarded(argv: Sequence[str]) -> None:
        try:
            main(argv)
        except InputError as e:  # printed once, not logged too (schedulers alert on the last line)
            print(f"error: {e}", file=sys.stderr)
            sys.exit(EXIT_INPUT_ERROR)
        except GateError as e:
            print(f"quality gate refused to publish: {e}", file=sys.stderr)
            sys.exit(EXIT_GATE_REFUSED)
        except LockedError as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(EXIT_LOCKED)
        except Exception as e:
            if (type(e).__name__ not in LOST_TASK_ERRORS or not type(e).__module__.startswith("tensorflow")
                    or "TF_CONFIG" not in os.environ):  # only a cluster's chief has tasks to lose
                raise
            reason = " ".join(str(getattr(e, "message", e)).split())[:300]
            print(f"error: parameter-server training stopped: a task of the cluster is unreachable ({reason}); "
                  f"{LOST_TASK_ADVICE}", file=sys.stderr)
            sys.exit(EXIT_INPUT_ERROR)

    app.run(guarded, flags_parser=parse_flags)
