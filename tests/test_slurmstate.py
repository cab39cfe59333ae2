"""core/slurmstate.py: what each Slurm node state means, as the parsers give it."""

from slurmbridge.models import SlurmNode

from slurmpool.core import slurmstate


def node(state: str, *flags: str) -> SlurmNode:
    return SlurmNode(name="gpu01", state=state, flags=frozenset(flags), reason=None, gres="gpu:8", gres_used="", features=(), partitions=())


def test_idle_usable_node():
    sn = node("IDLE")
    assert slurmstate.usable(sn) and slurmstate.idle(sn) and slurmstate.responding(sn)
    assert not slurmstate.busy(sn) and not slurmstate.down(sn) and not slurmstate.parked(sn)


def test_drained_busy_node_is_not_drained_yet():
    sn = node("MIXED", "DRAIN")
    assert slurmstate.drain_set(sn) and slurmstate.busy(sn) and not slurmstate.drained(sn) and not slurmstate.usable(sn)
    assert slurmstate.drained(node("IDLE", "DRAIN"))
    assert not slurmstate.drained(node("IDLE", "DRAIN", "COMPLETING"))


def test_not_responding_and_fail_are_down():
    assert slurmstate.down(node("IDLE", "NOT_RESPONDING"))
    assert slurmstate.down(node("DOWN"))
    assert slurmstate.down(node("IDLE", "FAIL"))
    assert slurmstate.down(node("FUTURE"))
    assert not slurmstate.down(node("ALLOCATED"))


def test_power_states_are_parked_and_not_responding():
    lendable = node("IDLE", "POWERED_DOWN")  # sinfo idle~
    held = node("IDLE", "DRAIN", "POWERED_DOWN")  # sinfo drain~
    going = node("IDLE", "POWERING_DOWN")  # sinfo idle%
    asked = node("MIXED", "NOT_RESPONDING", "POWERING_UP")  # sinfo mix#
    for sn in (lendable, held, going):
        assert slurmstate.parked(sn) and not slurmstate.responding(sn) and not slurmstate.usable(sn) and not slurmstate.idle(sn)
    assert not slurmstate.parked(asked) and not slurmstate.powered(asked) and slurmstate.busy(asked)


def test_verdict_and_text():
    sn = node("IDLE", "DRAIN", "INVALID_REG")
    assert slurmstate.verdict(sn) == {"INVALID_REG"}
    assert slurmstate.text(sn) == "IDLE+DRAIN+INVALID_REG"
    assert slurmstate.verdict(node("IDLE")) == frozenset()
