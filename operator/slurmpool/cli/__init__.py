"""`kubectl slurmpool`, the on-call's plugin (main.py). Run before any of its modules: pydantic
looks for its plugins among every installed package's entry points before it builds a model,
20 ms of each command's start, and none is used here."""

import os

os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
