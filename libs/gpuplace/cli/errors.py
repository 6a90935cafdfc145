"""One line for an error that ends a command, instead of a traceback (`gpuplace --debug ...` shows that).

What an operator needs from a failed start is which setting is wrong or which dependency did not answer, and
where; the adapters say so (adapters.dependencies), and this turns the settings' own validation errors into the
same shape. Values are never echoed: a malformed GPUPLACE_DATABASE_URL would carry its password.
"""

from __future__ import annotations

from pydantic import ValidationError

from gpuplace.adapters.dependencies import Misconfigured, Unreachable
from gpuplace.adapters.event_log import BadLogLine, ClusterNotInLog
from gpuplace.adapters.postgres.migrate import SchemaOutOfDate
from gpuplace.settings import ConfigurationError, Settings


def _setting_name(loc: tuple[int | str, ...]) -> str:
    if not loc:
        return ""
    field = str(loc[0])
    if field.startswith("GPUPLACE_") or field.isupper():
        return field
    return f"{Settings.model_config.get('env_prefix', '')}{field}".upper()


def _invalid_settings(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        name = _setting_name(error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        parts.append(f"{name}: {message}" if name else message)
    return "invalid settings: " + "; ".join(parts)


def one_line(exc: BaseException) -> str:
    """The line `gpuplace` prints for an error that ends a command."""
    if isinstance(exc, Unreachable | Misconfigured | SchemaOutOfDate | BadLogLine | ClusterNotInLog |
                  ConfigurationError):
        return str(exc)
    if isinstance(exc, ValidationError) and exc.title == Settings.__name__:
        return _invalid_settings(exc)
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text} (run `gpuplace --debug ...` for the traceback)"


__all__ = ["one_line"]
