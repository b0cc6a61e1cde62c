"""``python -m framework_m_core`` is the ``m`` command."""

from .cli.main import main

raise SystemExit(main())
