"""A burst of connections over the connection cap is served up to the cap, and only the excess is refused
(issue #27, item 1), on a real ``manage.py serve``. uvicorn's own limit counted connections whose request
it had not read, so 3,000 reattach streams opened at once against a cap of 2,000 were all refused.

Every request here holds its connection: a reattach stream to a run whose model (FakeAnthropic) is
paused. Loopback has a whole /8, so clients are the machine connecting from 127.0.0.x (not 127.0.0.1,
a trusted proxy by default: FORWARDED_ALLOW_IPS)."""

from __future__ import annotations

import asyncio
import resource
from collections import Counter
from collections.abc import Iterator

import pytest

from tests.burst import Answer, Burst, spread
from tests.fakes.anthropic_api import FakeAnthropic
from tests.held import assert_refused, burst, held_server, info, reattach, websocket_upgrade

GREEDY = "127.0.0.6"  # a client that opens more connections than its own cap


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        yield fake


async def assert_finished(answers: list[Answer]) -> None:
    """Each of these streams was held open, and ends with its run once the model goes on."""
    await asyncio.wait_for(asyncio.gather(*(answer.read_until(b"RUN_FINISHED") for answer in answers)), 120)


def _needs_file_limit(count: int) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < count:
        pytest.skip(f"the hard open-file limit ({hard}) is below the {count} this burst needs")


async def test_a_burst_of_3000_against_a_cap_of_2000_serves_2000_and_refuses_only_the_rest(tmp_path, fake):
    _needs_file_limit(2 * 3000 + 1024)  # the burst's sockets and the server's (one machine)
    env = {"SERVER_MAX_CONNECTIONS": "2000"}  # a client's own cap (a quarter: 500) holds too
    with held_server(tmp_path, fake, env) as (server, held):
        sources = spread(3000, [f"127.0.0.{i}" for i in range(10, 20)])  # 300 each
        opened, answers = await burst(server, [reattach(server)] * 3000, sources)
        try:
            assert opened.statuses() == Counter({200: 2000, 503: 1000})
            for answer in opened.refused():
                assert_refused(answer, "server_full")
            held.resume.set()
            await assert_finished([answer for answer in answers if answer.status == 200])
        finally:
            await opened.close()
        assert "2000 connections, SERVER_MAX_CONNECTIONS: requests past them get 503" in server.log.read_text()


async def test_a_client_past_its_own_cap_in_a_burst_is_refused_as_such_and_others_fill_the_cap(tmp_path, fake):
    env = {"SERVER_MAX_CONNECTIONS": "20", "SERVER_MAX_CONNECTIONS_PER_CLIENT": "5"}
    with held_server(tmp_path, fake, env) as (server, _):
        # 30 from a greedy client and 5 from each of four others, interleaved.
        others = spread(20, ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"])
        sources = [source for pair in zip(spread(20, [GREEDY]), others, strict=True) for source in pair]
        sources += spread(10, [GREEDY])
        opened, answers = await burst(server, [reattach(server)] * 50, sources)
        try:
            greedy = [answer for source, answer in zip(sources, answers, strict=True) if source == GREEDY]
            too_many = [answer for answer in greedy if answer.error_code == "too_many_connections"]
            assert len(too_many) == 25  # the greedy client's five, and no more, count against the cap
            for answer in too_many:
                assert_refused(answer, "too_many_connections")
            assert sum(answer.error_code == "too_many_connections" for answer in answers) == 25
            # 25 within their clients' caps for 20 places: 20 served, 5 refused as the server is full.
            assert opened.statuses() == Counter({200: 20, 503: 30})
            assert sum(answer.error_code == "server_full" for answer in answers) == 5
        finally:
            await opened.close()


async def test_idle_keep_alive_connections_make_room_and_held_streams_do_not(tmp_path, fake):
    env = {
        "SERVER_MAX_CONNECTIONS": "4",
        "SERVER_MAX_CONNECTIONS_PER_CLIENT": "4",
        "SERVER_KEEP_ALIVE_SECONDS": "600",  # an idle connection stays until it makes room
    }
    with held_server(tmp_path, fake, env) as (server, held):
        bursts: list[Burst] = []

        async def one(request: bytes) -> Answer:
            """One connection, from a client of its own (a client's own cap is not what this is about)."""
            opened, answers = await burst(server, [request], [f"127.0.0.{len(bursts) + 2}"])
            bursts.append(opened)
            return answers[0]

        try:
            streams = [await one(reattach(server)) for _ in range(3)]
            idle = await one(info(server))  # the cap is full: three streams and this idle keep-alive
            assert [answer.status for answer in [*streams, idle]] == [200] * 4
            # A newcomer is served in the idle connection's place, and that connection is closed.
            newcomer = await one(info(server))
            assert newcomer.status == 200
            await asyncio.wait_for(idle.closed, 30)
            # A stream takes the place of the newcomer, idle in its turn.
            streams.append(await one(reattach(server)))
            assert streams[-1].status == 200
            await asyncio.wait_for(newcomer.closed, 30)
            # Four streams, none idle: the next request is refused, and no stream was cut.
            assert_refused(await one(info(server)), "server_full")
            held.resume.set()
            await assert_finished(streams)
        finally:
            for opened in bursts:
                await opened.close()


async def test_a_websocket_upgrade_past_the_cap_gets_the_same_503(tmp_path, fake):
    env = {"SERVER_MAX_CONNECTIONS": "2", "SERVER_MAX_CONNECTIONS_PER_CLIENT": "2"}
    with held_server(tmp_path, fake, env) as (server, _):
        # Under the cap the handshake reaches the application, which has no WebSocket route.
        under, under_answers = await burst(server, [websocket_upgrade()], ["127.0.0.1"])
        await under.close()
        assert under_answers[0].status != 503
        held, _ = await burst(server, [reattach(server)] * 2, spread(2, ["127.0.0.1"]))
        try:
            assert held.statuses() == Counter({200: 2})
            refused, refused_answers = await burst(server, [websocket_upgrade()], ["127.0.0.2"])
            await refused.close()
            assert_refused(refused_answers[0], "server_full")
        finally:
            await held.close()
