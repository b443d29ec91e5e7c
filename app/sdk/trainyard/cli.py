"""`python -m trainyard.cli` and the `trainyard` command: app/cli."""

from app.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    main()
