"""``python -m rlforge``: the ``rlforge`` command (what ``torchrun -m rlforge fit ...`` runs on every rank)."""

from rlforge.cli import main

if __name__ == "__main__":
    main()
