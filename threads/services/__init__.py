"""Writes that touch several models, one module a concept: runs (opening, cancelling, finishing),
sessions (the model's view of a conversation), approvals remembered for a session, and
sub-agent tasks. Import from the module that owns the write."""
