"""framework-m's RabbitMQ exchange plugin, shipped with the adapter as Erlang sources.

``python -m framework_m_rabbitmq.plugin build`` compiles it against the RabbitMQ
installed on this machine, installs it into that RabbitMQ's plugins directory and
enables it (needs ``erlc`` and root, like ``rabbitmq-plugins``); ``path`` prints
where the sources are, to build them elsewhere (``<path>/build.sh``).
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
    print("usage: python -m framework_m_rabbitmq.plugin build|path", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
