"""The package's version, in one place: pyproject.toml reads it (``dynamic``) and so does
``clustermq.__version__``. A module of its own so that reading it imports nothing else."""

__version__ = "0.1.0"
