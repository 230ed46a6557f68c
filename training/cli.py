"""What the command-line entry points share: flag parsing and exit codes.

Every failure a user can cause (a bad flag or config value, bad input, a run that
cannot go on, a full disk) ends with one `error: ...` line as the last line of
stderr and a non-zero exit; a run stopped by a signal before its end exits with
EXIT_STOPPED, so `train.py ... && eval_glue.py ...` does not go on with a
half-trained model.
"""

from __future__ import annotations

import logging as std_logging
import os
import re
import sys
from collections.abc import Callable

from absl import flags, logging

EXIT_ERROR = 1  # bad input, or a run that cannot go on
EXIT_USAGE = 2  # a bad flag or config value (nothing was started)
EXIT_STOPPED = 75  # SIGTERM/SIGINT: the current step is saved; rerun to continue (EX_TEMPFAIL)


class Stopped(Exception):
    """A signal stopped the run after saving it; the message says how to continue."""


def fail(message: str, code: int = EXIT_ERROR) -> None:
    """Prints one error line (the last line of stderr) and exits."""
    sys.stderr.flush()
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


def checkpoint_step(flag: str, value: str) -> int | str:
    """A --step flag's value: a step number, 'best' or 'latest' (else one error line)."""
    if value in ("best", "latest"):
        return value
    if not value.isdigit():
        fail(f"--{flag}={value}: a step number, best or latest", EXIT_USAGE)
    return int(value)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


HELP_FLAGS = ("--help", "-help", "-h", "--helpshort", "--helpfull", "-?")


def define_print_config() -> None:
    flags.DEFINE_bool("print_config", False, "print the resolved config (the config file "
                      "with its ARGS and every --config.FIELD=VALUE applied) and exit; "
                      "the config file's comments say what each field does")


def maybe_print_config(config) -> None:
    if flags.FLAGS.print_config:
        print(config, end="", flush=True)
        sys.exit(0)


def require_workdir(workdir: str | None) -> None:
    if not workdir:
        fail("--workdir is required: the run's directory (--print_config needs none)",
             EXIT_USAGE)


def enable_compile_cache(config) -> str | None:
    """An entry point's first step, before anything compiles: JAX's persistent
    compilation cache where config.jax_cache says (common/compile_cache.py: auto, none or
    a folder), announced in one line. Never part of a run's identity: a program compiles
    to the same executable whether it is read from the cache or not. A folder that
    cannot be made is a warning, and the run goes on uncached."""
    from common import compile_cache
    from common.console import console

    setting = config.get("jax_cache", compile_cache.AUTO)
    try:
        directory = compile_cache.enable(setting)
    except OSError as e:
        directory = compile_cache.enable("none")
        console(f"warning: jax_cache={setting}: {_describe(e)}; compiling without the cache")
    console(compile_cache.describe(directory))
    return directory


def parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parser with one error line instead of tracebacks; --help exits 0
    (absl's exits 1) and points at --print_config for the config's fields."""
    if any(arg in HELP_FLAGS for arg in argv[1:]):
        try:
            flags.FLAGS(argv)
        except SystemExit:
            pass
        print("\nThe config's fields, resolved: add --print_config (and --config FILE[:ARGS] "
              "with any --config.FIELD=VALUE).", flush=True)
        sys.exit(0)
    try:
        return flags.FLAGS(argv)
    except (AttributeError, KeyError) as e:
        # ml_collections' parser raises these (not flags.Error) for a --config.FIELD
        # that the config does not have.
        # Their message (e.args[0], not str(e): a KeyError's str() is its repr, with
        # literal \' and \n) is the field, then a line "Did you mean "X" instead of ...".
        # (Some wrap such a repr in their own message: undo its escapes too.)
        text = e.args[0] if e.args and isinstance(e.args[0], str) else str(e)
        text = text.replace("\\n", "\n").replace("\\'", "'")
        first, _, hint = text.strip().partition("\n")
        field = first.strip("'\" ")
        guess = re.search(r'Did you mean "([^"]+)"', hint)
        suggestion = f' (did you mean "{guess.group(1)}"?)' if guess else ""
        flag = _config_flag(argv, lambda name, value: field in name.split("."))
        fail(f"{flag or '--config.' + field}: the config has no field {field}{suggestion}",
             EXIT_USAGE)
    except (flags.Error, ValueError, TypeError) as e:
        # A config file that raised (configs/pretrain.py:ARGS) or a value that does not
        # parse: the underlying exception's own message, with the flag it came from.
        cause = e.__cause__ or e.__context__
        if isinstance(e, flags.Error) and isinstance(cause, ValueError | TypeError):
            e = cause
        # A traceback rendered into the message ends with "ValueError: the message".
        message = re.sub(r"^\w+(Error|Exception): ", "", _last_line(str(e))) or type(e).__name__
        flag = _config_flag(argv, lambda name, value: value and value in message
                            and name not in message)
        fail(f"{flag}: {message}" if flag else message, EXIT_USAGE)
    raise AssertionError("unreachable")


def _config_flag(argv: list[str], matches: Callable[[str, str], object]) -> str | None:
    """The first --config.NAME[=VALUE] argument for which matches(NAME, VALUE) holds."""
    for arg in argv[1:]:
        if arg.startswith("--config."):
            name, _, value = arg[len("--config."):].partition("=")
            if matches(name, value):
                return arg
    return None


def run(job: Callable[[], object]) -> None:
    """Runs `job`, mapping the failures a user can cause to one line and an exit code."""
    quiet_background_echoes()
    try:
        job()
    except Stopped as e:
        print(e, flush=True)
        sys.exit(EXIT_STOPPED)
    except (ValueError, RuntimeError, OSError) as e:
        # In the log only (INFO): on the console the error line below is the one message.
        logging.info("%s: %s", type(e).__name__, e)
        print(f"error: {_describe(e)}", file=sys.stderr, flush=True)
        # Skip interpreter shutdown: library threads and tasks that died of the same
        # cause (a full disk under orbax's writers) would print their tracebacks after
        # our line. Everything of ours is closed and flushed by now.
        sys.stdout.flush()
        os._exit(EXIT_ERROR)


class _NoLibraryTracebacks(std_logging.Filter):
    """Orbax's writer threads and asyncio log a failure with its traceback, once per
    thread or task; the same failure reaches the main thread and becomes our error line,
    so their records keep only their message line."""

    def filter(self, record: std_logging.LogRecord) -> bool:
        if record.exc_info and ("orbax" in record.pathname or record.name == "asyncio"):
            record.exc_info, record.exc_text = None, None
        return True


def quiet_background_echoes() -> None:
    logging.get_absl_handler().addFilter(_NoLibraryTracebacks())
    std_logging.getLogger("asyncio").addFilter(_NoLibraryTracebacks())


def _describe(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    if isinstance(error, OSError) and error.filename and str(error.filename) not in text:
        text = f"{error.filename}: {text}"
    return text
