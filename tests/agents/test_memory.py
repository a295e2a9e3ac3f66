"""The history the model sees is always well formed, whatever was stored."""

from __future__ import annotations

from orchestrator.memory import INTERRUPTED, heal_turns


def test_a_dangling_tool_use_gets_an_interrupted_result():
    turns = [
        {"role": "user", "content": "read it"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "file_read", "input": {}}]},
    ]
    healed, closed = heal_turns(turns)
    assert closed == ["t1"]
    assert healed[-1] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "t1", "content": INTERRUPTED, "is_error": True}],
    }


def test_a_partly_answered_turn_is_completed_and_results_come_first():
    turns = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "a", "name": "glob", "input": {}},
                {"type": "tool_use", "id": "b", "name": "glob", "input": {}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "x"}]},
        {"role": "user", "content": "and then?"},
    ]
    healed, closed = heal_turns(turns)
    assert closed == ["b"]
    assert [b.get("tool_use_id") for b in healed[2]["content"]] == ["b", "a", None]
    assert healed[2]["content"][-1] == {"type": "text", "text": "and then?"}


def test_orphaned_results_at_the_start_are_dropped():
    turns = [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "gone", "content": "x"}]},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "hi"},
    ]
    healed, _ = heal_turns(turns)
    assert healed == [{"role": "user", "content": "hi"}]


def test_a_well_formed_history_is_unchanged():
    turns = [{"role": "user", "content": "a"}, {"role": "assistant", "content": [{"type": "text", "text": "b"}]}]
    assert heal_turns(turns) == (turns, [])
