from __future__ import annotations

from tests.sse import post_run


def test_demo_chat_streams_a_whole_run(server):
    stream = post_run(
        server.url,
        "coder",
        {
            "threadId": "t-smoke",
            "runId": "r1",
            "messages": [{"id": "m1", "role": "user", "content": "What is this project?"}],
        },
    )
    assert stream.status == 200
    assert stream.types[0] == "RUN_STARTED"
    assert stream.types[-1] == "RUN_FINISHED"
    print(stream.types)
