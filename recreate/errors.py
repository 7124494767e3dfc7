"""Errors a caller fixes by passing something else. Raised to Python callers, the message names the
Python argument (`pass model='PROVIDER:MODEL'`); the command line shows the same error with its option
(`pass --model PROVIDER:MODEL`), through `for_cli`.

    raise ArgumentError("no price for {model}: pass {prices}", model=Arg("model"),
                        prices=Arg("prices", "{'gpt-x': [IN, OUT]}", "gpt-x=IN,OUT", flag="--price"))
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Arg:
    """An argument as an error names it: `name=python` to a Python caller, `flag cli` on the command
    line (`flag` defaults to --name-with-dashes; an empty value names the argument alone)."""

    name: str
    python: str = ""
    cli: str = ""
    flag: str | None = None

    def for_python(self) -> str:
        return f"{self.name}={self.python}" if self.python else self.name

    def for_cli(self, flags: Mapping[str, str]) -> str:
        flag = flags.get(self.name) or self.flag or "--" + self.name.replace("_", "-")
        return f"{flag} {self.cli}" if self.cli else flag


class ArgumentError(ValueError):
    """`template` with `{key}` marks, each replaced by its `Arg` (nothing else in the text is read as a
    field: model names, values and paths may hold braces)."""

    def __init__(self, template: str, **arguments: Arg):
        self.template, self.arguments = template, arguments
        super().__init__(self._render({k: a.for_python() for k, a in arguments.items()}))

    def for_cli(self, flags: Mapping[str, str] | None = None) -> str:
        """The message with the command line's options; `flags` maps argument names whose option is not
        `--name-with-dashes` on the command at hand (e.g. {"agent_model": "--model"})."""
        return self._render({k: a.for_cli(flags or {}) for k, a in self.arguments.items()})

    def renamed(self, name: str, to: str, flag: str | None = None) -> ArgumentError:
        """The same error naming the argument `to` (option `flag`) where it named `name`: for a caller
        that passed its own argument on under another name (its `agent_model` as `model`)."""
        arguments = {
            k: replace(a, name=to, flag=flag) if a.name == name else a for k, a in self.arguments.items()
        }
        return type(self)(self.template, **arguments)

    def _render(self, values: dict[str, str]) -> str:
        text = self.template
        for key, value in values.items():
            text = text.replace(f"{{{key}}}", value)
        return text


def cli_message(exc: BaseException, flags: Mapping[str, str] | None = None) -> str:
    """An error's message as the command line says it: options where it names arguments."""
    return exc.for_cli(flags) if isinstance(exc, ArgumentError) else str(exc)


def one_line(exc: BaseException) -> str:
    """An error as the command line says it: one line, options where it names arguments, secrets masked."""
    from recreate.redact import redact

    text = cli_message(exc).strip() or type(exc).__name__
    return redact(" ".join(text.split()))
