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
        assert slurmstate.parked(sn) and not slurmstate.responding(sn)
    # Slurm powers a lendable node up for the job it chose: capacity it has, idle; a held one is not.
    assert slurmstate.usable(lendable) and slurmstate.idle(lendable) and slurmstate.usable(going)
    assert not slurmstate.usable(held) and not slurmstate.idle(held)
    assert not slurmstate.usable(asked) and not slurmstate.idle(asked)
    assert not slurmstate.parked(asked) and not slurmstate.powered(asked) and slurmstate.busy(asked)
    # 24.11 and 26.05 mark a lent node NOT_RESPONDING once its slurmd has been gone SlurmdTimeout,
    # and still power it up for a job (sinfo idle~): usable; held or DOWN ones are not.
    gone = node("IDLE", "POWERED_DOWN", "NOT_RESPONDING")
    assert slurmstate.usable(gone) and slurmstate.idle(gone) and slurmstate.parked(gone) and not slurmstate.down(gone)
    assert not slurmstate.usable(node("IDLE", "DRAIN", "POWERED_DOWN", "NOT_RESPONDING"))
    assert not slurmstate.usable(node("DOWN", "POWERED_DOWN", "NOT_RESPONDING"))
    assert not slurmstate.usable(node("IDLE", "NOT_RESPONDING"))


def test_verdict_and_text():
    sn = node("IDLE", "DRAIN", "INVALID_REG")
    assert slurmstate.verdict(sn) == {"INVALID_REG"}
    assert slurmstate.text(sn) == "IDLE+DRAIN+INVALID_REG"
    assert slurmstate.verdict(node("IDLE")) == frozenset()


def test_power_saving_is_no_failure_but_a_down_node_powered_off_is_down():
    for parked in (node("IDLE", "POWERED_DOWN"), node("IDLE", "DRAIN", "POWERED_DOWN"), node("IDLE", "POWERING_DOWN")):
        assert not slurmstate.down(parked) and slurmstate.resumable(parked)
    assert not slurmstate.down(node("MIXED", "NOT_RESPONDING", "POWERING_UP"))  # asked back: Slurm's ResumeTimeout judges it
    assert not slurmstate.resumable(node("MIXED", "NOT_RESPONDING", "POWERING_UP"))
    assert slurmstate.down(node("DOWN", "POWERED_DOWN"))  # sinfo down~
    assert slurmstate.resumable(node("IDLE", "DRAIN")) and not slurmstate.resumable(node("IDLE", "DRAIN", "NOT_RESPONDING"))


def test_without_power_flags_every_meaning_is_what_the_node_record_said_before():
    """The core asked SlurmNode's own properties until issue 35: on a cluster without power
    saving (the lab's), each answer here is the same as theirs."""
    import itertools

    flags = ("DRAIN", "NOT_RESPONDING", "COMPLETING", "FAIL", "INVALID_REG", "RESERVED")
    for state in ("IDLE", "MIXED", "ALLOCATED", "DOWN", "UNKNOWN", "FUTURE", "COMPLETING", "FAIL"):
        for k in range(len(flags) + 1):
            for chosen in itertools.combinations(flags, k):
                sn = node(state, *chosen)
                assert slurmstate.responding(sn) == sn.responding and slurmstate.resumable(sn) == sn.responding
                assert slurmstate.drain_set(sn) == sn.drain_set and slurmstate.busy(sn) == sn.busy and slurmstate.drained(sn) == sn.drained
                assert slurmstate.down(sn) == (not sn.responding or "FAIL" in sn.flags or sn.state == "FAIL")
