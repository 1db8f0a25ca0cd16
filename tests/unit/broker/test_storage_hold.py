"""broker.storage: deliveries held until their journal record is on disk come back in order, up to the
record id the group committer reports, as one flat [link, delivery, ...] list (DeliveryPath.accept_durable
takes it so)."""

from __future__ import annotations

from broker.storage import Storage


def _storage() -> Storage:
    s = Storage.__new__(Storage)  # only the holding state is exercised here
    s._held, s._held_ids = [], []
    return s


def test_take_durable_hands_back_what_is_on_disk_in_order():
    s = _storage()
    a, b = object(), object()
    for rid, link, d in ((3, a, "d3"), (4, b, "d4"), (6, a, "d6"), (6, a, "d6b"), (9, b, "d9")):
        s.hold(link, d, rid)
    assert s.holding == 5
    assert s.take_durable(2) == []
    assert s.take_durable(4) == [a, "d3", b, "d4"]
    assert s.take_durable(5) == []
    assert s.take_durable(6) == [a, "d6", a, "d6b"]  # equal ids (a mirror's events) come together
    assert s.holding == 1
    assert s.take_durable(100) == [b, "d9"]
    assert s.holding == 0
    assert s.take_durable(100) == []
    s.hold(a, "d10", 10)  # holding again after everything was taken
    assert s.take_durable(10) == [a, "d10"]
