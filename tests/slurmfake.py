"""The base of the tests' Slurm backends: a whole SlurmBackend that refuses every call, so a fake
overrides only what its test needs and the rest fails plainly (SlurmUnsupported), never with an
AttributeError. tests/test_metrics_init.py checks it, and every fake, against the Protocol."""

from __future__ import annotations

from typing import NoReturn

from slurmbridge import SlurmUnsupported


class Refusing:
    commands_run = 0
    filters_jobs = True

    async def _refuse(self, *_: object, **__: object) -> NoReturn:
        raise SlurmUnsupported(f"{type(self).__name__} is a fake that does not make this call")

    nodes = jobs = drain = resume = requeue = cancel = ping = _refuse
    reservations = partition_max_times = create_reservation = delete_reservation = topology = _refuse
    power_down = power_up = power_save = signal = _refuse

    async def can_reserve(self) -> bool:
        return False

    async def close(self) -> None:
        return None
