__version__ = "0.3.0"  # the one version: pyproject.toml reads it, the changelog in README.md names it
