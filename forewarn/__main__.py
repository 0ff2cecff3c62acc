"""``python -m forewarn`` is the ``forewarn`` command."""
from forewarn.guard.cli import main

if __name__ == "__main__":
    main()
