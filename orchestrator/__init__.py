"""The run core: the loop, its steps, model calls, tool calls, sub-agents, waits and compaction, with
the tools and the model providers. It knows nothing of Django, HTTP or AG-UI (tests/project/
test_layering.py): the composition root, agents/runtime.py, hands it settings as values."""
