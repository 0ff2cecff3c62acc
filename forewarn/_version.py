__version__ = "0.5.0"  # the one version: pyproject.toml reads it, docs/changelog.md names it
