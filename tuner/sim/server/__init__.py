"""The HTTP server: sglang's endpoints over aiohttp, backed by the simulated scheduler.

One module per endpoint family, all sharing one ``state.ServerState``:

- ``native``: ``POST /generate`` (streaming with cumulative text and ``meta_info``);
- ``openai``: ``/v1/completions``, ``/v1/chat/completions`` (SSE, ``stream_options.include_usage``),
  ``/v1/models``;
- ``info``: ``/health``, ``/health_generate``, ``/ready`` (0.5.23), ``/server_info``
  (+ ``/get_server_info``), ``/model_info`` (+ ``/get_model_info``), ``/metrics`` (with
  ``--enable-metrics``);
- ``control``: ``/flush_cache`` and the simulator-only ``/sim/requests``, ``/sim/hold``,
  ``/sim/release`` (holds of modelled time for a closed-loop client, ``scheduler.holds``);
- ``intake``: a body to a queued request and back to its chunks (native and OpenAI share it);
- ``app``: ``SimServer``, the process: start-up, the app wiring, ``--api-key``, shutdown.

A request body may carry a ``sim`` object: ``{"after": hold key, "at": modelled seconds,
"hold": bool, "order": int}`` (``order``: where the client drew a request that does not continue
a conversation from its queue; ``Scheduler.order_arrivals``). Every streamed chunk carries
the modelled time its tokens were produced:
``sim_time`` / ``sim_arrival`` (and ``sim_late`` when the request came after its ``at``) in
meta_info on /generate, a ``sim`` object on the OpenAI routes; ``/server_info`` says
``sim_modelled_time: true`` so that a client knows to read them.
"""

from __future__ import annotations

from tuner.sim.server.app import SimServer

__all__ = ["SimServer"]
