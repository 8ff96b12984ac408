"""How a request's events reach the event loop (serve/app.py Feed): a stream gets every event as it
comes; a whole answer wakes the loop once, with everything before its last event kept in order."""

from __future__ import annotations

import asyncio
import threading

from specrun.serve.answers import Feed
from specrun.serve.worker import Event

STEPS = [Event("Hel", [1]), Event("lo", [2, 3]), Event(", wor", [4])]
LAST = Event("ld", [5], done=True, finish_reason="stop")


def _feed(every: bool) -> tuple[Feed, int, list[Event]]:
    """Events sent from another thread, as the engine sends them; how many times the loop was
    woken for them, and what the queue then held."""

    async def run():
        loop = asyncio.get_running_loop()
        feed = Feed(loop, every)
        wakes = 0
        original = loop.call_soon_threadsafe

        def counted(callback, *args):
            nonlocal wakes
            wakes += callback == feed.queue.put_nowait  # not the thread's own hop back
            return original(callback, *args)

        loop.call_soon_threadsafe = counted
        engine = threading.Thread(target=lambda: [feed.sink(e) for e in [*STEPS, LAST]])
        engine.start()
        await asyncio.to_thread(engine.join)
        queued = []
        while not feed.queue.empty():
            queued.append(await feed.get())
        return feed, wakes, queued

    return asyncio.run(run())


def test_a_stream_gets_every_event_as_it_comes():
    feed, wakes, queued = _feed(every=True)
    assert wakes == 4 and queued == [*STEPS, LAST] and feed.before == []


def test_a_whole_answer_wakes_the_loop_once_and_keeps_the_rest_in_order():
    feed, wakes, queued = _feed(every=False)
    assert wakes == 1 and queued == [LAST]
    assert "".join(e.text for e in [*feed.before, LAST]) == "Hello, world"
    assert [t for e in [*feed.before, LAST] for t in e.tokens] == [1, 2, 3, 4, 5]


def test_an_error_reaches_a_whole_answer_at_once():
    async def run():
        feed = Feed(asyncio.get_running_loop(), every=False)
        feed.sink(STEPS[0])
        feed.sink(Event(done=True, error="server_error", message="boom"))
        await asyncio.sleep(0)
        return feed

    feed = asyncio.run(run())
    assert feed.queue.qsize() == 1 and feed.before == [STEPS[0]]
