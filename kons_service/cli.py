"""The ``kons`` command: ``kons serve``, ``kons learners``, a learner's lifecycle (``kons versions``,
``rollback``, ``fork``, ``shadow``, ``challengers``, ``promote``), ``kons state inspect FILE``,
``kons bench NAME``, ``kons --version``.

``kons learners`` and the lifecycle verbs talk to a running service through :class:`kons_service.Client`:
at ``--url``, else ``$KONS_URL``, else http://127.0.0.1:8000, with the key ``$KONS_API_KEY`` if set. The
lifecycle verbs are the client's methods of the same names (``shadow`` is ``create_shadow``) and print
the service's answer as JSON (docs/lifecycle.md), so that a script can read it.

``kons serve``'s flags are generated from :class:`kons_service.settings.Settings`: each field is a flag
(``redis_url`` -> ``--redis-url``) whose value, when given, overrides the ``KONS_*`` variable of the
same name; the server itself is ``python -m kons_service``'s. Heavy imports (the server, uvicorn) wait
until a subcommand needs them, so ``--help`` starts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import types
import typing
from collections.abc import Callable, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import BaseModel
    from pydantic.fields import FieldInfo

    from kons_service.client import Client
    from kons_service.settings import Settings

__all__ = ["main"]

BENCHMARKS = ("quality", "scaling", "load", "reliability")
_NO_SERVICE = "kons serve needs the service's dependencies: pip install 'kons[service]'"


def _settings() -> type[Settings] | None:
    """The service's settings class; None where the service extra is not installed."""
    try:
        from kons_service.settings import Settings
    except ImportError:
        return None
    return Settings


def _value_type(annotation: Any) -> Any:
    """``X`` of ``X | None``; the annotation itself otherwise."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return next(a for a in typing.get_args(annotation) if a is not type(None))
    return annotation


def _is_secret(field: FieldInfo) -> bool:
    """A credential (``settings.SECRET``): no flag, since every user can read a command line in ps."""
    extra = field.json_schema_extra
    return isinstance(extra, dict) and extra.get("secret") is True


def _add_setting(parser: argparse.ArgumentParser, name: str, field: FieldInfo) -> None:
    env = f"KONS_{name.upper()}"
    default = field.get_default(call_default_factory=True)
    help_text = f"{field.description or ''} [env {env}; default {default}]".lstrip()
    flag = "--" + name.replace("_", "-")
    kind = _value_type(field.annotation)
    if kind is bool:
        parser.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None,
                            help=help_text)
    else:
        metavar = {int: "INT", float: "SECONDS" if name.endswith("seconds") else "FLOAT",
                   Path: "PATH"}.get(kind, "TEXT")
        parser.add_argument(flag, dest=name, type=str, default=None, metavar=metavar, help=help_text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kons", description="Online kernel learning (kons) and its prediction service.")
    parser.add_argument("--version", action="version", version=f"kons {version('kons')}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser(
        "serve", help="run the HTTP service (uvicorn; an embedded Redis unless --redis-url)",
        allow_abbrev=False,  # else --api-keys (a credential, no flag) would silently mean --api-keys-file
        description="Run the kons service. Every flag overrides the KONS_* variable of the same name; "
                    "unset flags keep the environment's (or .env's) value, else the default.")
    settings = _settings()
    if settings is None:
        serve.description = _NO_SERVICE
    else:
        for name, field in settings.model_fields.items():
            if not _is_secret(field):
                _add_setting(serve, name, field)
        secrets = [f"KONS_{name.upper()}" for name, field in settings.model_fields.items()
                   if _is_secret(field)]
        serve.epilog = (f"Credentials ({', '.join(secrets)}) are read only from the environment, .env or "
                        "--api-keys-file: a command line is visible to every user of the machine (ps).")

    learners = commands.add_parser(
        "learners", help="list a running service's learners: name, algorithm, version",
        description="List the learners of the service at --url (default: $KONS_URL, else "
                    "http://127.0.0.1:8000), with the API key $KONS_API_KEY if it is set.")
    learners.add_argument("--url", default=None, help="the service's address [env KONS_URL]")
    _add_lifecycle(commands)

    state = commands.add_parser("state", help="kons state blobs (GET /v1/learners/{name}/state)")
    state_commands = state.add_subparsers(dest="state_command", required=True, metavar="ACTION")
    inspect = state_commands.add_parser("inspect", help="header, learner, rounds and checksum of a blob")
    inspect.add_argument("file", type=Path)

    bench = commands.add_parser(
        "bench", help="run a benchmark (python -m benchmarks.NAME; needs a checkout of the repository)")
    bench.add_argument("name", choices=BENCHMARKS)
    bench.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the benchmark")
    return parser


def _add_lifecycle(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The lifecycle verbs: one subcommand per client method, each with ``--url``."""
    def verb(name: str, help_text: str) -> argparse.ArgumentParser:
        description = f"{help_text[0].upper()}{help_text[1:]} (docs/lifecycle.md); prints the answer as JSON."
        parser = commands.add_parser(name, help=help_text, allow_abbrev=False, description=description)
        parser.add_argument("name", help="the learner")
        parser.add_argument("--url", default=None, help="the service's address [env KONS_URL]")
        return parser

    verb("versions", "list the versions a learner can be restored to")
    rollback = verb("rollback", "make a learner exactly its state after a version")
    rollback.add_argument("version", type=int, help="the version to restore")
    fork = verb("fork", "create a learner starting from another one's state")
    fork.add_argument("--from", dest="source", required=True, help="the learner to fork")
    fork.add_argument("--version", type=int, default=None, help="its version to start from (default: newest)")
    shadow = verb("shadow", "create a shadow challenger that learns a champion's feedback")
    shadow.add_argument("--of", dest="champion", required=True, help="the champion it shadows")
    shadow.add_argument("--algorithm", default="auto", help="its algorithm (default: auto)")
    shadow.add_argument("--dim", type=int, default=None, help="its input dimension (default: any)")
    shadow.add_argument("--params", type=_json_object, default=None, help="its parameters, a JSON object")
    shadow.add_argument("--task", default=None, help="regression or classification (default: the champion's)")
    verb("challengers", "compare a champion's shadow challengers with it")
    promote = verb("promote", "make a champion serve its challenger's state and configuration")
    promote.add_argument("challenger", help="the challenger to promote")


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError('not a JSON object (e.g. {"eta": 0.1})')
    return value


_LIFECYCLE: dict[str, Callable[[Client, argparse.Namespace], BaseModel]] = {
    "versions": lambda client, o: client.versions(o.name),
    "rollback": lambda client, o: client.rollback(o.name, o.version),
    "fork": lambda client, o: client.fork(o.name, o.source, o.version),
    "shadow": lambda client, o: client.create_shadow(o.name, o.champion, o.algorithm, o.dim, o.params,
                                                     o.task),
    "challengers": lambda client, o: client.challengers(o.name),
    "promote": lambda client, o: client.promote(o.name, o.challenger),
}


def _serve(options: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    settings = _settings()
    if settings is None:
        parser.error(_NO_SERVICE)
    from pydantic import ValidationError

    given = {name: getattr(options, name) for name, field in settings.model_fields.items()
             if not _is_secret(field)}
    for name, value in given.items():
        if value is not None:
            os.environ[f"KONS_{name.upper()}"] = str(value).lower() if isinstance(value, bool) else value
    try:
        settings()  # report a bad flag here, as a usage error, before anything starts
    except ValidationError as exc:
        problems = "; ".join(f"--{'-'.join(map(str, e['loc'])).replace('_', '-')}: {e['msg']}"
                             for e in exc.errors())
        parser.error(problems)
    from kons_service.__main__ import main as serve_main

    serve_main()
    return 0


def _with_client(command: str, url: str | None, action: Callable[[Client], None]) -> int:
    """Run ``action`` with a client of the service at ``url``: 0, or 1 (the service's error on stderr),
    or 2 without the client's dependencies."""
    try:
        from kons_service.client import Client, KonsServiceError
    except ImportError:
        print(f"kons {command} needs the client's dependencies: pip install 'kons[client]'", file=sys.stderr)
        return 2
    try:
        with Client(url) as client:
            action(client)
            return 0
    except KonsServiceError as exc:
        print(f"kons {command}: {exc}", file=sys.stderr)
        return 1


def _list_learners(client: Client) -> None:
    print(f"{'name':<32} {'algorithm':<16} {'version':>9}")
    cursor: str | None = None
    while True:
        page = client.list_learners(cursor)
        for learner in page.learners:
            algorithm = learner.config.get("algorithm", "")
            print(f"{learner.name:<32} {algorithm:<16} {learner.version:>9}")
        cursor = page.next_cursor
        if cursor is None:
            return


def _lifecycle(options: argparse.Namespace) -> int:
    def action(client: Client) -> None:
        print(_LIFECYCLE[options.command](client, options).model_dump_json(indent=2))

    return _with_client(options.command, options.url, action)


def inspect_state(path: Path) -> tuple[list[str], bool]:
    """Lines describing a state blob, and whether it is valid (format, checksum, loadable)."""
    import kons
    from kons import _state

    blob = path.read_bytes()
    lines = [f"file:      {path} ({len(blob)} bytes)"]
    try:
        header, arrays = _state.decode(blob)  # checks the magic, the format version and the checksum
    except kons.StateFormatError as exc:
        return [*lines, f"checksum:  FAILED ({exc})"], False
    lines += [f"format:    KONSSTAT version {_state.FORMAT_VERSION}", "checksum:  ok (sha256)"]
    names = [name for name, cls in kons.LEARNERS.items() if cls.__name__ == header.get("class")]
    lines.append(f"learner:   {header.get('class')} ({names[0] if names else 'unknown'}), "
                 f"state version {header.get('state_version')}, dim {header.get('dim')}")
    lines.append(f"params:    {header.get('params')}")
    rounds, cumulative, _, _ = header.get("counters") or [None] * 4
    lines.append(f"rounds:    {rounds} (cumulative loss {cumulative})")
    lines += [f"array:     {name} {a.dtype.str} {list(a.shape)}" for name, a in arrays.items()]
    try:
        kons.load(blob)
    except kons.StateFormatError as exc:
        return [*lines, f"loads:     FAILED ({exc})"], False
    return [*lines, "loads:     ok"], True


def _checkout() -> Path | None:
    """The repository this command runs from (the current directory or the installed package's parent),
    if it has the benchmarks: they are not part of the wheel."""
    for root in (Path.cwd(), Path(__file__).resolve().parents[1]):
        if (root / "benchmarks" / "__init__.py").is_file():
            return root
    return None


def _bench(name: str, args: Sequence[str]) -> int:
    root = _checkout()
    if root is None:
        print(f"kons bench {name}: the benchmarks are not installed with the package; run this command in "
              "a checkout of the kons repository (with `pip install -e '.[service,bench]'`).",
              file=sys.stderr)
        return 2
    return subprocess.call([sys.executable, "-m", f"benchmarks.{name}", *args], cwd=root)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    options = parser.parse_args(argv)
    if options.command == "serve":
        return _serve(options, parser)
    if options.command == "learners":
        return _with_client("learners", options.url, _list_learners)
    if options.command in _LIFECYCLE:
        return _lifecycle(options)
    if options.command == "state":
        if not options.file.is_file():
            parser.error(f"no such file: {options.file}")
        lines, ok = inspect_state(options.file)
        print("\n".join(lines))
        return 0 if ok else 1
    return _bench(options.name, [a for a in options.args if a != "--"])


if __name__ == "__main__":
    sys.exit(main())
