"""The ``icefab`` command. Thin and lazy: each command module registers itself on the app
and imports heavy libraries inside its command bodies, so ``icefab --help`` stays fast."""

from __future__ import annotations

import importlib

import typer
from typer.core import TyperGroup

from icefabric.errors import IceFabricError


class _Commands(TyperGroup):
    """Every command's bad input or stopped run ends here: one line, exit code 2."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except IceFabricError as e:
            from icefabric.cli.common import fail

            fail(str(e))


app = typer.Typer(
    cls=_Commands,
    name="icefab",
    help="ICE (Intelligent Control Ethernet) for heterogeneous RoCEv2 AI fabrics, "
    "and its digital twin.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

def _version(value: bool) -> None:
    if value:
        from icefabric import __version__
        from icefabric.provenance import source_commit

        commit = source_commit()
        typer.echo(f"icefab (ice-fabric) {__version__}" + (f" ({commit})" if commit else ""))
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version (and source commit) and exit.")):
    """ICE (Intelligent Control Ethernet) for heterogeneous RoCEv2 AI fabrics, and its
    digital twin."""


# Each module defines ``register(app: typer.Typer) -> None``.
COMMAND_MODULES: tuple[str, ...] = (
    "simulate",
    "scenarios",
    "plan",
    "validate",
    "collect",
    "compare",
    "calibrate",
    "controller",
    "agent",
    "twin",
    "report",
    "sweep",
)

for _name in COMMAND_MODULES:
    importlib.import_module(f"icefabric.cli.{_name}").register(app)


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
