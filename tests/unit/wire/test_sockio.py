"""wire/sockio.py: the driver's direct reads and writes on plain TCP sockets."""

import trio
import trio.testing

from wire import sockio
from wire.sockio import READ_VIEW, PlainSocket, plain_socket


def _pair():
    a, b = trio.socket.socketpair()
    return trio.SocketStream(a), trio.SocketStream(b)


async def test_read_returns_what_was_sent_and_zero_at_end():
    left, right = _pair()
    sock = PlainSocket(left)
    await right.send_all(b"hello")
    assert await sock.read(1024) == 5
    assert bytes(READ_VIEW[:5]) == b"hello"
    await right.aclose()
    assert await sock.read(1024) == 0
    await left.aclose()


async def test_read_waits_for_data_and_respects_the_size():
    left, right = _pair()
    sock = PlainSocket(left)
    got = []

    async def reader():
        got.append(await sock.read(3))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []  # nothing to read yet: it waits
        await right.send_all(b"abcdef")
    assert got == [3] and bytes(READ_VIEW[:3]) == b"abc"
    assert await sock.read(sockio.READ_SIZE) == 3 and bytes(READ_VIEW[:3]) == b"def"
    await left.aclose()
    await right.aclose()


async def test_send_all_waits_for_room_and_delivers_everything_in_order():
    left, right = _pair()
    sock = PlainSocket(left)
    data = bytes(range(256)) * 20_000  # 5 MB: far beyond the socket buffers, so the writer must wait
    assert sock.try_send(b"") == 0
    received = bytearray()

    async def drain():
        while len(received) < len(data):
            chunk = await right.receive_some(1 << 16)
            assert chunk
            received.extend(chunk)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sock.send_all, data)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(drain)
    assert received == data
    await left.aclose()
    await right.aclose()


async def test_try_send_reports_a_full_socket_as_zero():
    left, right = _pair()
    sock = PlainSocket(left)
    block = b"x" * 65536
    total = 0
    for _ in range(10_000):
        n = sock.try_send(block)
        if n == 0:
            break
        total += n
    else:
        raise AssertionError("the socket never filled")
    assert total > 0
    await left.aclose()
    await right.aclose()


async def test_a_closed_socket_raises_closed_resource_instead_of_using_its_old_number():
    left, right = _pair()
    sock = PlainSocket(left)
    await left.aclose()
    for call in (lambda: sock.try_send(b"x"),):
        try:
            call()
        except trio.ClosedResourceError:
            pass
        else:
            raise AssertionError("a closed socket was written")
    try:
        await sock.read(10)
    except trio.ClosedResourceError:
        pass
    else:
        raise AssertionError("a closed socket was read")
    await right.aclose()


async def test_a_reader_waiting_when_the_socket_closes_is_woken_with_closed_resource():
    left, right = _pair()
    sock = PlainSocket(left)
    outcome = []

    async def reader():
        try:
            await sock.read(10)
        except trio.ClosedResourceError:
            outcome.append("closed")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        await left.aclose()
    assert outcome == ["closed"]
    await right.aclose()


async def test_only_plain_socket_streams_take_the_direct_path():
    left, right = _pair()
    assert isinstance(plain_socket(left), PlainSocket)
    stapled = trio.testing.memory_stream_pair()[0]
    assert plain_socket(stapled) is None
    await left.aclose()
    await right.aclose()
