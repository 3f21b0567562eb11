"""The routes that describe the server: health, server and model info, metrics.

``/server_info`` (and the older ``/get_server_info``) has sglang's resolved server args,
``max_total_num_tokens``, ``max_req_input_len``, ``version`` and ``internal_states`` (the cap the
memory allowed, ``last_gen_throughput``, ``memory_usage`` with 0.5.23's or 0.5.10's keys,
``avg_spec_accept_length`` when speculating), plus ``sim_*`` figures of the simulator itself
(``sim_modelled_time: true`` tells a client to read the chunks' modelled stamps).
"""

from __future__ import annotations

import uuid
from dataclasses import asdict

from aiohttp import web

from tuner.sim import tokens as tok
from tuner.sim.memory import MemoryPlan
from tuner.sim.scheduler import Scheduler
from tuner.sim.server.intake import RequestIntake
from tuner.sim.server.state import JSONDict, ServerState, json_response

GRAPH_PHASES = (
    "prefill",
    "decode",
    "target_verify",
    "draft_prefill",
    "draft_decode",
    "draft_extend",
)


def graph_memory(plan: MemoryPlan, spec: bool) -> dict[str, float]:
    """CUDA graph memory per capture phase, GB, as 0.5.23 reports it (model_executor/
    graph_memory_usage.py keys); the simulator splits its one figure between the phases."""
    phases = dict.fromkeys(GRAPH_PHASES, 0.0)
    if spec:
        share = plan.cuda_graph_gib / 3
        phases.update(target_verify=round(share, 3), draft_decode=round(share, 3))
        phases["draft_extend"] = round(plan.cuda_graph_gib - 2 * share, 3)
    else:
        phases["decode"] = round(plan.cuda_graph_gib, 3)
    return phases


class InfoRoutes:
    def __init__(self, state: ServerState, intake: RequestIntake) -> None:
        self.state = state
        self.intake = intake

    def register(self, router: web.UrlDispatcher) -> None:
        router.add_get("/health", self.health)
        if self.state.new_api:
            router.add_get("/ready", self.health)  # 0.5.23: 200 once ready; 0.5.10: 404
        router.add_get("/health_generate", self.health_generate)
        for path in ("/server_info", "/get_server_info"):
            router.add_get(path, self.server_info)
        for path in ("/model_info", "/get_model_info"):
            router.add_get(path, self.model_info)
        router.add_get("/metrics", self.metrics)

    async def health(self, request: web.Request) -> web.Response:
        """``GET /health`` (and ``/ready``): 503 while starting, 200 once up."""
        return self.state.not_ready() or web.Response(status=200)

    async def health_generate(self, request: web.Request) -> web.Response:
        """``GET /health_generate``: 200 once one token went through the scheduler."""
        not_ready = self.state.not_ready()
        if not_ready:
            return not_ready
        rid = f"health-{uuid.uuid4().hex}"
        req = self.intake.make_request([tok.word_id("hello")], 1, True, rid)
        self.state.loaded_scheduler.submit(req)
        while not req.finished:
            await req.event.wait()
            req.event.clear()
        return web.Response(status=200)

    async def server_info(self, request: web.Request) -> web.Response:
        """``GET /server_info``: the resolved configuration and the live figures."""
        return json_response(self.server_info_dict())

    def server_info_dict(self) -> JSONDict:
        info = self._resolved_args()
        plan, s = self.state.plan, self.state.scheduler
        if plan is not None and s is not None:
            info.update(self._capacity(plan, s))
            info.update(self._sim_figures(plan, s))
        return info

    def _resolved_args(self) -> JSONDict:
        """The flags as sglang resolves them (auto values filled in), no ``sim_*`` flag."""
        state = self.state
        cfg, args, spec = state.config, state.args, state.config.spec
        info: JSONDict = {
            k: v
            for k, v in asdict(args).items()
            if k not in ("argv", "old_flag_names") and not k.startswith("sim_")
        }
        info["api_key"] = None
        strategy = cfg.mamba_strategy or args.mamba_radix_cache_strategy
        info.update(
            {
                "model_path": args.model_path or cfg.model.name,
                "served_model_name": cfg.served_model_name,
                "mem_fraction_static": cfg.mem_fraction_static,
                "chunked_prefill_size": cfg.chunked_prefill_size,
                "cuda_graph_max_bs_decode": cfg.cuda_graph_max_bs_decode,
                "cuda_graph_max_bs": cfg.cuda_graph_max_bs_decode,
                "page_size": cfg.page_size,
                "context_length": cfg.context_length,
                "disable_overlap_schedule": not cfg.overlap_schedule,
                "mamba_radix_cache_strategy": strategy,
                "mamba_scheduler_strategy": strategy,
                "speculative_algorithm": spec.algorithm if spec else None,
                "speculative_num_steps": spec.num_steps if spec else None,
                "speculative_eagle_topk": spec.topk if spec else None,
                "speculative_num_draft_tokens": spec.num_draft_tokens if spec else None,
                "version": cfg.sglang_version,
                "sim_time_scale": float(state.clock.scale),
                "sim_modelled_time": True,
                "sim_hardware": cfg.hardware.name,
                "sim_model": cfg.model.name,
                "sim_ready": state.ready,
            }
        )
        return info

    def _memory_usage(self, plan: MemoryPlan) -> JSONDict:
        """``internal_states[0].memory_usage`` with the release's keys and rounding."""
        if not self.state.new_api:  # managers/scheduler.py get_internal_state (0.5.10)
            return {
                "weight": round(plan.weight_gib + plan.draft_weight_gib, 2),
                "kvcache": round(plan.kv_k_gib + plan.kv_v_gib, 2),
                "token_capacity": plan.max_total_num_tokens,
                "graph": round(plan.cuda_graph_gib, 2),
            }
        # managers/scheduler_components/memory_usage.py (0.5.23): GB rounded to 3 places
        return {
            "weight": round(plan.weight_gib + plan.draft_weight_gib, 3),
            "kvcache": round(plan.kv_k_gib + plan.kv_v_gib, 3),
            "startup_available": round(plan.available_gpu_mem_gib, 3),
            "token_capacity": plan.max_total_num_tokens,
            "token_capacity_swa": None,
            "graph": graph_memory(plan, self.state.config.spec is not None),
        }

    def _capacity(self, plan: MemoryPlan, s: Scheduler) -> JSONDict:
        """sglang's figures of what the memory allows, with the per-rank internal state."""
        cfg = self.state.config
        internal: JSONDict = {
            "effective_max_running_requests_per_dp": plan.max_running_requests,
            "last_gen_throughput": s.stats.last_gen_throughput,
            "memory_usage": self._memory_usage(plan),
        }
        if cfg.spec is not None:
            internal["avg_spec_accept_length"] = s.avg_accept_length()
        return {
            # the resolved flag (48 with speculation when unset); the cap the memory allowed
            # is internal_states[0].effective_max_running_requests_per_dp
            "max_running_requests": cfg.max_running_requests_flag,
            "max_total_num_tokens": plan.max_total_num_tokens,
            "max_req_input_len": plan.max_req_input_len,
            "max_mamba_cache_size": plan.mamba_slots or None,
            "internal_states": [internal],
        }

    def _sim_figures(self, plan: MemoryPlan, s: Scheduler) -> JSONDict:
        """The simulator's own figures: its memory plan and how far modelled time was held."""
        return {
            "sim_memory_plan": plan.as_dict(),
            # how far the host fell behind (modelled time ran slower than K x wall)
            "sim_behind_s": self.state.clock.behind_wall_s,
            # wall seconds modelled time waited for closed-loop clients at holds
            "sim_hold_wait_s": s.holds.wait_s,
            "sim_hold_timeouts": s.holds.timeouts,
            # requests that came after the modelled time their client meant to send them
            "sim_late_requests": s.stats.late_requests,
            "sim_late_s": s.stats.late_s,
            "sim_retracted_requests": s.stats.retracted_total,
            "sim_gpu_cache_tokens": s.cache.gpu_tokens if s.cache else 0,
            "sim_owned_tokens": s.owned_tokens,
            "sim_now_s": self.state.clock.now(),
        }

    async def model_info(self, request: web.Request) -> web.Response:
        """``GET /model_info``: 0.5.23's fields (0.5.10 had fewer)."""
        state = self.state
        model, args = state.config.model, state.args
        info = {
            # entrypoints/http_server.py model_info (0.5.23)
            "model_path": args.model_path or model.name,
            "served_model_name": state.config.served_model_name,
            "tokenizer_path": args.tokenizer_path or args.model_path or model.name,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "load_format": "auto",
            "reasoning_parser": None,
            "tool_call_parser": None,
            "disaggregation_mode": "null",
            "has_image_understanding": model.image_understanding,
            "has_audio_understanding": False,
            "model_type": model.model_type,  # the HF config's, e.g. qwen3_5
            "architectures": [model.architecture],
        }
        if not state.new_api:  # 0.5.10 had none of these
            for key in (
                "served_model_name",
                "load_format",
                "reasoning_parser",
                "tool_call_parser",
                "disaggregation_mode",
            ):
                del info[key]
        return json_response(info)

    async def metrics(self, request: web.Request) -> web.Response:
        """``GET /metrics``: Prometheus text with --enable-metrics, else 404 as sglang."""
        if not self.state.args.enable_metrics:
            return web.Response(status=404, text="Not Found")
        if self.state.metrics is None:
            return web.Response(text="", content_type="text/plain")
        return web.Response(text=self.state.metrics.render(), content_type="text/plain")
