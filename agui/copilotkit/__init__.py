"""CopilotKit's runtime contract, served by Threadline (issue #44).

A CopilotKitProvider whose ``runtimeUrl`` is ``<server>/copilotkit`` talks to Threadline with no
Node runtime in between. The routes are the ones ``@copilotkit/runtime`` 1.75 serves in its
multi-route form (``dist/v2/runtime/core/fetch-router.mjs`` and ``fetch-handler.mjs``) and
``@copilotkit/core`` 1.74 calls (``dist/index.mjs``: ``ProxiedCopilotRuntimeAgent`` for info, run,
connect and stop; the thread store behind ``useThreads`` for the thread routes). The run is the
AG-UI view itself (agui/views.py); this package adds what CopilotKit asks besides.
"""
