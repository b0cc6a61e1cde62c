"""framework-m's RabbitMQ plugin, shipped with the adapter as Erlang sources.

``python -m framework_m_rabbitmq.plugin build`` compiles it against the RabbitMQ
installed on this machine into an ``.ez`` archive, puts that into the plugins directory
the broker reports and enables it with ``rabbitmq-plugins`` (needs ``erlc`` and write
access there, usually root); ``ez DIR`` only builds the archive into ``DIR`` (for an
image or a node without ``erlc``); ``path`` prints where the sources are.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def sources() -> Path:
    """The plugin's directory (``build.sh`` and ``src/``): inside the installed package,
    or ``packages/adapter-rabbitmq/plugin`` in a checkout of the repository."""
    for candidate in (_HERE / "plugin_src", _HERE.parents[1] / "plugin"):
        if (candidate / "build.sh").is_file():
            return candidate
    raise FileNotFoundError(f"the plugin's sources are not next to {_HERE}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["path"]:
        print(sources())
        return 0
    if args == ["build"]:
        return subprocess.call(["bash", str(sources() / "build.sh")])
    if len(args) == 2 and args[0] == "ez":
        return subprocess.call(["bash", str(sources() / "build.sh"), "--ez", args[1]])
    print("usage: python -m framework_m_rabbitmq.plugin build | ez DIR | path", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
