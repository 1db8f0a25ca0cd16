"""Per-connection limits: an oversized message is refused without hurting anyone else."""

import uuid

from proton import Message
from proton.reactor import AtMostOnce
from proton.utils import BlockingConnection, LinkDetached

LIMIT = 100_000


def test_oversized_message_rejected_and_link_detached_others_keep_flowing(router_factory):
    router = router_factory(listener_extra=f"maxMessageSize: {LIMIT}")
    conn = BlockingConnection(router.url, timeout=10)
    bystander = BlockingConnection(router.url, timeout=10)
    try:
        receiver = bystander.create_receiver("limits", credit=10)
        sender = conn.create_sender("limits", name=f"big-{uuid.uuid4()}")
        assert sender.link.remote_max_message_size == LIMIT

        delivery = sender.link.send(Message(body=b"x" * (LIMIT + 1)))
        try:  # the blocking API reports the detach as an exception
            conn.wait(lambda: bool(sender.link.state & sender.link.REMOTE_CLOSED), timeout=10)
        except LinkDetached:
            pass
        assert delivery.remote_state == delivery.REJECTED
        assert sender.link.remote_condition.name == "amqp:link:message-size-exceeded"

        # The router and the other connection never noticed: a fresh small message flows.
        third = BlockingConnection(router.url, timeout=10)
        try:
            small = third.create_sender("limits", options=AtMostOnce())
            third.wait(lambda: small.link.credit > 0, timeout=10)
            small.send(Message(body=b"y" * 1000))
            # A pre-settled send returns before any I/O: pump until the transfer is written.
            third.wait(lambda: third.conn.transport.pending() <= 0, timeout=10)
            assert len(receiver.receive(timeout=10).body) == 1000
        finally:
            third.close()
    finally:
        conn.close()
        bystander.close()
