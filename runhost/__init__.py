"""The live run's one home: which runs this process executes, their leases and cancel, and the
waiting runs any process may go on with (claim, resume, expiry). Protocol-neutral: a surface
(agui/) turns what a run reports into its own events and says where they go."""
