"""The ``--help`` of the ``selfevolve`` commands, where typer's own needs help.

- An on/off flag (``--help``, ``--serve``, ``--overwrite``) takes no value, but typer shows ``<bool>`` as its
  type: it is shown without one.
- ``train --help`` lists every configuration key below the command's own help, grouped by section (``model``,
  ``model.lora``, ``algo``, ...) in tables that wrap to the terminal's width: key, type, default, description.
"""

from __future__ import annotations

import click
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from typer.core import TyperCommand, TyperGroup, TyperOption


def untyped_flags(command: click.Command, ctx: click.Context) -> None:
    """Give every flag an empty metavar, which typer's help shows in place of the type (``<bool>``)."""
    for param in command.get_params(ctx):
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""


class Group(TyperGroup):
    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        untyped_flags(self, ctx)
        return super().format_help(ctx, formatter)


class Command(TyperCommand):
    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        untyped_flags(self, ctx)
        return super().format_help(ctx, formatter)


class ConfigCommand(Command):
    """A command whose arguments are configuration keys (``train``): its help ends with all of them."""

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_help(ctx, formatter)  # typer's rich help prints at once, so the sections follow it
        print_config_keys(Console())


WIDE = 120  # columns from which type and default get columns of their own


def config_table(rows: list[tuple[str, str, str, str]], width: int) -> Table:
    """One section's keys: key, type, default and description side by side on a wide terminal; on a narrow one
    the type and default under the key, so that the description keeps most of the width."""
    table = Table.grid(padding=(0, 2), expand=True)
    if width >= WIDE:
        table.add_column(no_wrap=True)
        table.add_column(style="yellow", max_width=24)
        table.add_column(style="green", max_width=24, overflow="fold")
    else:
        table.add_column(max_width=max(34, width // 3))  # the longest key, 33 characters, fits
    table.add_column(ratio=1)
    for key, kind, default, desc in rows:
        # Text, not markup: types, defaults and descriptions hold brackets
        if width >= WIDE:
            table.add_row(Text(key, style="bold cyan"), Text(kind), Text(default), Text(desc))
        else:
            left = Text(key, style="bold cyan")
            left.append(f"\n  {kind}" + (f" = {default}" if default else ""), style="dim")
            table.add_row(left, Text(desc))
    return table


def print_config_keys(console: Console) -> None:
    """Every configuration key, one panel per section (the key, its type, its default, what it does)."""
    from selfevolve.config import config_sections

    console.print(Text("Configuration keys (KEY=VALUE, or in FILE.yaml; docs/configuration.md):", style="bold"))
    for name, rows in config_sections():
        console.print(Panel(config_table(rows, console.width), title=name, title_align="left", border_style="dim"))
