"""``python -m forewarn`` is the ``forewarn`` command."""
from .guard.cli import main

if __name__ == "__main__":
    main()
