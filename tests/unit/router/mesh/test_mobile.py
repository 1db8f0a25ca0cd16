"""Mobile address sync bookkeeping: batching into differential MAUs, sequence checks, MAR recovery."""

from __future__ import annotations

from router.mesh.messages import MobileAddressUpdate
from router.mesh.mobile import LocalAddresses, RemoteAddresses


def test_local_changes_are_batched_into_one_differential_mau():
    loc = LocalAddresses("A")
    assert loc.flush() is None and loc.mobile_seq == 0
    loc.add("M0a", 3)
    loc.add("M0b", 2)
    mau = loc.flush()
    assert (mau.mobile_seq, mau.add, mau.delete, mau.hints, mau.exist) == (1, ["M0a", "M0b"], [], [3, 2], None)
    assert loc.flush() is None                       # nothing new: no MAU, no seq bump
    loc.remove("M0a")
    loc.add("M0c", 1)
    mau = loc.flush()
    assert (mau.mobile_seq, mau.add, mau.delete, mau.hints) == (2, ["M0c"], ["M0a"], [1])


def test_add_then_remove_between_ticks_sends_nothing():
    loc = LocalAddresses("A")
    loc.add("M0a", 3)
    loc.remove("M0a")
    assert not loc.pending() and loc.flush() is None and loc.mobile_seq == 0


def test_only_synced_key_classes_are_kept():
    loc = LocalAddresses("A")
    for key in ("M0q", "Cpre", "Dpre", "Ea.#", "Fa.*", "Hedge1", "Llocal", "Ttopo", "RRouter.B", "Aarea", ""):
        loc.add(key, 3)
    assert loc.flush().add == ["Cpre", "Dpre", "Ea.#", "Fa.*", "Hedge1", "M0q"]


def test_absolute_mau_reflects_the_published_set():
    loc = LocalAddresses("A")
    loc.add("M0b", 2)
    loc.add("M0a", 3)
    loc.flush()
    loc.add("M0c", 1)                                # not yet published: not in the absolute set
    mau = loc.absolute()
    assert (mau.mobile_seq, mau.exist, mau.hints) == (1, ["M0a", "M0b"], [3, 2])


def test_remote_applies_in_sequence_and_ignores_duplicates():
    rem = RemoteAddresses()
    change, mar = rem.apply(MobileAddressUpdate("A", 1, add=["M0a", "M0b"], hints=[3, 2]))
    assert change == ({"M0a": 3, "M0b": 2}, set()) and not mar
    change, mar = rem.apply(MobileAddressUpdate("A", 1, add=["M0a", "M0b"], hints=[3, 2]))
    assert change is None and not mar                # the same MAU again (a flood through a cycle)
    change, mar = rem.apply(MobileAddressUpdate("A", 2, delete=["M0a"]))
    assert change == ({}, {"M0a"}) and rem.keys == {"M0b": 2} and rem.mobile_seq == 2


def test_gap_asks_for_a_mar_and_absolute_replaces_everything():
    rem = RemoteAddresses()
    rem.apply(MobileAddressUpdate("A", 1, add=["M0a", "M0b"], hints=[3, 3]))
    change, mar = rem.apply(MobileAddressUpdate("A", 3, add=["M0z"], hints=[3]))
    assert change is None and mar and rem.mobile_seq == 1 and "M0z" not in rem.keys
    assert rem.behind(3) and not rem.behind(1)
    change, mar = rem.apply(MobileAddressUpdate("A", 3, exist=["M0b", "M0z"], hints=[3, 1]))
    assert change == ({"M0z": 1}, {"M0a"}) and not mar
    assert rem.keys == {"M0b": 3, "M0z": 1} and rem.mobile_seq == 3
    # a stale absolute answer (older seq) changes nothing
    change, _ = rem.apply(MobileAddressUpdate("A", 2, exist=[], hints=[]))
    assert change is None and rem.keys == {"M0b": 3, "M0z": 1}


def test_missing_hints_default_to_balanced_and_reset_forgets():
    rem = RemoteAddresses()
    rem.apply(MobileAddressUpdate("A", 1, add=["M0a"]))
    assert rem.keys == {"M0a": 3}
    assert rem.reset() == {"M0a"} and rem.keys == {} and rem.mobile_seq == 0
