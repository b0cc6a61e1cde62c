"""Which framework-m this is: its version, and the versions of the adapters installed.

The distribution names ``framework-m-core`` and ``framework-m`` on the Python
package index belong to another project with an import package of the same name;
:data:`PROJECT` tells this one's ``framework_m_core`` from that one's.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, entry_points, version

__version__ = "0.1.0"
PROJECT = "framework-m: leaderless scheduled and background jobs"
DISTRIBUTION = "framework-m-core"


def installed_versions() -> list[tuple[str, str]]:
    """(distribution, version) of core and of every installed adapter distribution."""
    out = [(DISTRIBUTION, __version__)]
    seen = {DISTRIBUTION}
    for ep in entry_points(group="framework_m.adapters"):
        dist = ep.dist
        if dist is not None and dist.name not in seen:
            seen.add(dist.name)
            out.append((dist.name, dist.version))
    return out


def mismatch() -> str | None:
    """Why the installed ``framework-m-core`` metadata is not this package, if it is not.

    A different version there means another distribution's files were installed over
    (or beside) these: its ``m`` and modules would be mixed with this one's.
    """
    try:
        installed = version(DISTRIBUTION)
    except PackageNotFoundError:
        return None  # run from a source tree
    if installed != __version__:
        return (
            f"the installed {DISTRIBUTION} is {installed}, but framework_m_core here is "
            f"{__version__} of {PROJECT}: the package index's {DISTRIBUTION} is another "
            "project's; install this one's wheels built from its repository (see its README)"
        )
    return None
