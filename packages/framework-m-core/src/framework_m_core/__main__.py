"""``python -m framework_m_core`` is the ``m`` command."""

from .cli import main

raise SystemExit(main())
