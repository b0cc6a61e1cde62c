"""Redis broker adapter of framework-m (not implemented yet)."""
