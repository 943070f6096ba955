"""An OpenAI-compatible HTTP server with programmable latency and faults: vLLM's stand-in in CI.

    python -m infercrane.serving.testserver --port 8123 --ttft-ms 40 --itl-ms 5

Endpoints: ``POST /v1/completions`` and ``POST /v1/chat/completions`` (streaming SSE and
non-streaming), ``GET /v1/models`` (``--model``, and each ``--also-serve``), ``GET /health``, ``GET /version``,
``POST /reset_prefix_cache`` (HTTP 404 with ``--no-prefix-cache-reset``, as vLLM without ``VLLM_SERVER_DEV_MODE=1``),
and ``GET /stats`` (counters for tests: requests seen, HTTP 500s sent, short outputs, answers cut, cache resets, and
``prompts``: sha256 hex of each prompt text -> how many requests sent it; chat: the messages' text parts joined
with newlines).

Timing model (what the drivers must measure back):
  * the first content token is sent ``ttft_ms`` after the request arrives;
  * token ``i`` (0-based) is sent at ``arrival + ttft_ms + i * itl_ms``: a deadline schedule, so
    sleep overshoot does not accumulate. vLLM's TPOT (AIPerf's inter_token_latency) is then
    ``itl_ms`` and the end-to-end latency is ``ttft_ms + (n - 1) * itl_ms``.
  * chat streams start with a role-only chunk (``delta: {"role": "assistant", "content": ""}``) sent
    at once, as vLLM does: a client that takes it for the first token under-reports TTFT.
  * non-streaming responses are sent whole after ``ttft_ms + (n - 1) * itl_ms``.

Token counts: the prompt is counted as whitespace-separated words (chat: over every message's text
content); each output token is one word from a fixed list, sent as one SSE chunk. These are the
``usage`` numbers the server reports; they need not equal a client tokenizer's count of the prompt.

Output length ``n``: exactly ``max_tokens`` (or ``max_completion_tokens``) when ``ignore_eos`` is true
or ``min_tokens >= max_tokens``; otherwise ``min(max_tokens, max(min_tokens, eos_after))`` where
``eos_after`` (``--eos-after``) is the server's "natural" length (default: never stops early).

Output tokens: token ``i`` is ``WORDS[i % 16]`` (its id ``i % 16``, returned as ``token_ids`` when a completion asks
``return_token_ids``, as vLLM does); with ``--diverge-after K`` tokens from the K-th on are other words, as an engine
whose numerics changed what greedy decoding picks.
The short-output fault (``--short-output-rate``) returns ``max(1, n // 2)`` tokens even when
``ignore_eos`` asks for all of them, as a server that ignores the flag would.

Semantic-quality items (``serving/quality.py``): a completion whose prompt is an item's (``quality.solve`` gives its
answer) and that does not ask ``ignore_eos`` (nor ``min_tokens`` beyond the answer's length) is answered with the
answer: its text is ``" " + answer``, one token per whitespace-separated word (each with its leading space; one SSE
chunk each when streaming), so the output has the answer's length (``eos_after`` and ``--diverge-after`` do not
apply; ``max_tokens`` cuts it, and the short-output fault halves it as any output; ``finish_reason`` is ``stop``, or
``length`` when the output has ``max_tokens`` tokens, as for any output). Each token is chosen by a toy model whose one non-trivial op is the norm kernel ``--norm-kernel``
(``reference``: InferCrane's float32 oracle of fused residual-add + RMSNorm; ``path.py:function``: a candidate file),
built so that a kernel that ignores eps, or errs as much, picks wrong tokens for some items and moves every
log-probability (``serving/testserver_model.py`` says how). Token ids: a word of the fixed list has its index, any
other token a stable hash of its string (``testserver_model.token_id``). Chat completions are never items.

Log-probabilities: a completion that asks ``logprobs`` (an integer N) gets vLLM's block on its choice (streaming: on
each chunk, for its token): ``tokens``, ``token_logprobs`` (the chosen tokens' log-probabilities), ``top_logprobs``
(the chosen token and the N best of the toy model's candidates at each position) and ``text_offset`` (each token's
offset in the completion text). An item's are those of the toy model's picks; the fixed words' are the toy model's
log-probabilities of those words, which it does not change (``ToyModel.forced``). Without ``logprobs`` the block is
``null``.

Access: with ``--api-key KEY`` every ``/v1/...`` request must carry ``Authorization: Bearer KEY`` (as vLLM's
``--api-key`` checks it; ``/health``, ``/version`` and ``/reset_prefix_cache`` are open, as in vLLM); with
``--require-header NAME:VALUE`` (repeatable) every request but ``GET /health`` and ``GET /stats`` must carry that
header with that value, as a gateway in front of a server would. Others are answered 401 and counted in ``/stats``
(``unauthorized``: path -> count). ``/stats`` also counts, over generation requests, the ``X-...`` header names seen
(``header_names``) and the top-level body keys (``body_keys``), so that a test can see what reached the server.

Faults, all deterministic: ``--fail-rate F`` answers HTTP 500 to a fraction F of generation requests,
chosen by a seeded generator over the arrival order (``--seed``), so the number of failures among
the first N requests is fixed; ``--crash-after N`` exits the process (code 17) once N generation
requests have finished; ``--cut-after N`` cuts the answer to every generation request after the N-th short, half-way
through its tokens (streaming; a one-token stream before its end) or its body (not streaming): the server closes the
connection and lives on, as a worker that dropped a request; ``--log-jit-after N`` prints, once N have finished, the line vLLM's JIT monitor logs
when Triton compiles a kernel while serving (``serving/jit.py`` reads it); ``--hang-after N`` leaves every request after the N-th generation request
(and /health) unanswered (N = 0: from the start); ``--startup-delay-s`` sleeps before listening, as an engine loading weights.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field

from infercrane import __version__
from infercrane.errors import InputError

WORDS = ("the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "on", "with", "be", "by", "at")
CRASH_EXIT_CODE = 17


@dataclass
class ServerConfig:
    """Every programmable behaviour of the test server; the CLI flags mirror these fields."""

    port: int
    host: str = "127.0.0.1"
    model: str = "infercrane-test-model"
    ttft_ms: float = 40.0
    itl_ms: float = 5.0
    fail_rate: float = 0.0
    short_output_rate: float = 0.0
    eos_after: int | None = None
    diverge_after: int | None = None
    crash_after: int | None = None
    hang_after: int | None = None
    cut_after: int | None = None
    log_jit_after: int | None = None
    startup_delay_s: float = 0.0
    seed: int = 0
    default_max_tokens: int = 16
    prefix_cache_reset: bool = True
    api_key: str | None = None
    require_header: list[str] = field(default_factory=list)  # NAME:VALUE each
    also_serve: list[str] = field(default_factory=list)  # more model ids /v1/models lists (a multi-model server)
    norm_kernel: str = "reference"  # the toy model's norm kernel (testserver_model.load_norm_kernel)
    slots: int | None = None  # requests generated at once; the rest wait for a slot, their wait part of their TTFT


@dataclass
class _State:
    cfg: ServerConfig
    fail_rng: random.Random = field(init=False)
    short_rng: random.Random = field(init=False)
    generation_requests: int = 0
    finished_requests: int = 0
    failures_sent: int = 0
    short_outputs_sent: int = 0
    answers_cut: int = 0
    prefix_cache_resets: int = 0
    hanging: bool = False
    prompts: dict[str, int] = field(default_factory=dict)
    unauthorized: dict[str, int] = field(default_factory=dict)
    header_names: dict[str, int] = field(default_factory=dict)
    body_keys: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Two independent streams so that turning one fault on does not move the other's choices.
        self.fail_rng = random.Random(f"fail-{self.cfg.seed}")
        self.short_rng = random.Random(f"short-{self.cfg.seed}")
        self.hanging = self.cfg.hang_after == 0  # --hang-after 0: not even /health answers


def count_prompt_tokens(body: dict) -> int:
    """Whitespace-separated words of the prompt (chat: of every text part of every message)."""
    if "messages" in body:
        total = 0
        for msg in body.get("messages") or []:
            content = msg.get("content")
            if isinstance(content, str):
                total += len(content.split())
            elif isinstance(content, list):
                total += sum(len(str(p.get("text", "")).split()) for p in content if isinstance(p, dict))
        return total
    prompt = body.get("prompt", "")
    if isinstance(prompt, list):
        return sum(len(p) if isinstance(p, list) else len(str(p).split()) for p in prompt)
    return len(str(prompt).split())


def prompt_digest(body: dict) -> str:
    """sha256 hex of the prompt text (chat: every message's text parts, joined with newlines)."""
    import hashlib

    if "messages" in body:
        parts = []
        for msg in body.get("messages") or []:
            content = msg.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts += [str(p.get("text", "")) for p in content if isinstance(p, dict)]
        text = "\n".join(parts)
    else:
        prompt = body.get("prompt", "")
        text = prompt if isinstance(prompt, str) else json.dumps(prompt)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def output_length(body: dict, cfg: ServerConfig) -> int:
    """Tokens this request asks for, per the module docstring's rule (before the short-output fault)."""
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or cfg.default_max_tokens
    max_tokens = max(1, int(max_tokens))
    min_tokens = int(body.get("min_tokens") or 0)
    if body.get("ignore_eos") or min_tokens >= max_tokens:
        return max_tokens
    natural = cfg.eos_after if cfg.eos_after is not None else max_tokens
    return min(max_tokens, max(min_tokens, natural))


class _Items:
    """What answers item prompts: ``quality.solve`` and the toy model, loaded on first use (torch is imported only by
    a server that is sent an item or asked for log-probabilities), or at once by ``load``."""

    def __init__(self, norm_kernel: str) -> None:
        self.norm_kernel = norm_kernel
        self._model = None

    def load(self):
        if self._model is None:
            from infercrane.serving.testserver_model import ToyModel, load_norm_kernel

            self._model = ToyModel(load_norm_kernel(self.norm_kernel))
        return self._model

    @staticmethod
    def answer_tokens(body: dict) -> list[str] | None:
        """The item's answer tokens when ``body`` is a completion of an item prompt that may stop at its end."""
        prompt = body.get("prompt")
        if body.get("ignore_eos") or not isinstance(prompt, str) or "\nAnswer:" not in prompt:
            return None
        from infercrane.serving.quality import solve

        answer = solve(prompt)
        if answer is None:
            return None
        tokens = [" " + w for w in answer.split()]
        return tokens if int(body.get("min_tokens") or 0) <= len(tokens) else None


def logprobs_block(steps: list, start_offset: int, top_n: int) -> dict:
    """vLLM's completions ``logprobs`` block for ``steps`` (``testserver_model.Step``), the first token at
    ``start_offset`` of the completion text; ``top_logprobs`` holds the chosen token and the ``top_n`` best."""
    offsets, at = [], start_offset
    for step in steps:
        offsets.append(at)
        at += len(step.token)
    tops = []
    for step in steps:
        top = {step.token: step.logprob}
        for token, lp in step.top[:max(0, top_n)]:
            top.setdefault(token, lp)
        tops.append(top)
    return {"tokens": [st.token for st in steps], "token_logprobs": [st.logprob for st in steps],
            "top_logprobs": tops, "text_offset": offsets}


def build_app(cfg: ServerConfig, items: _Items | None = None):
    from aiohttp import web

    state = _State(cfg)
    items = items or _Items(cfg.norm_kernel)
    never = asyncio.Event()  # never set: what a hung request waits on
    required = [tuple(part.strip() for part in h.split(":", 1)) for h in cfg.require_header]

    @web.middleware
    async def access(request, handler):
        """The module docstring's access rules: --api-key on /v1/..., --require-header on all but /health, /stats."""
        path = request.path
        ok = True
        if cfg.api_key is not None and path.startswith("/v1"):
            ok = request.headers.get("Authorization") == f"Bearer {cfg.api_key}"
        if path not in ("/health", "/stats"):
            ok = ok and all(request.headers.get(name) == value for name, value in required)
        if not ok:
            state.unauthorized[path] = state.unauthorized.get(path, 0) + 1
            return web.json_response({"error": {"message": "Unauthorized", "code": 401}}, status=401)
        return await handler(request)

    async def maybe_hang() -> None:
        if state.hanging:
            await never.wait()

    async def health(_request):
        await maybe_hang()
        return web.Response(status=200)

    async def version(_request):
        await maybe_hang()
        return web.json_response({"version": f"infercrane-testserver {__version__}"})

    async def models(_request):
        await maybe_hang()
        return web.json_response({
            "object": "list",
            "data": [{"id": m, "object": "model", "created": 0, "owned_by": "infercrane"}
                     for m in (cfg.model, *cfg.also_serve)],
        })

    async def reset_prefix_cache(_request):
        await maybe_hang()
        if not cfg.prefix_cache_reset:
            return web.json_response({"detail": "Not Found"}, status=404)
        state.prefix_cache_resets += 1
        return web.Response(status=200)

    async def stats(_request):
        return web.json_response({
            "generation_requests": state.generation_requests,
            "finished_requests": state.finished_requests,
            "failures_sent": state.failures_sent,
            "short_outputs_sent": state.short_outputs_sent,
            "answers_cut": state.answers_cut,
            "prefix_cache_resets": state.prefix_cache_resets,
            "prompts": state.prompts,
            "unauthorized": state.unauthorized,
            "header_names": state.header_names,
            "body_keys": state.body_keys,
        })

    def after_finish() -> None:
        state.finished_requests += 1
        if cfg.log_jit_after is not None and state.finished_requests == cfg.log_jit_after:
            print(f"(EngineCore pid={os.getpid()}) WARNING {time.strftime('%m-%d %H:%M:%S')} [jit_monitor.py:103] "
                  "Triton kernel JIT compilation during inference: testserver_kernel. This causes a latency spike; "
                  "consider extending warmup to cover this shape/config.", flush=True)
        if cfg.crash_after is not None and state.finished_requests >= cfg.crash_after:
            print(f"testserver: crashing after {state.finished_requests} requests (--crash-after)", flush=True)
            os._exit(CRASH_EXIT_CODE)

    async def send_whole(request, resp):
        """Send a complete response, then count the request as finished (a crash comes after the bytes)."""
        await resp.prepare(request)
        await resp.write_eof()
        after_finish()
        return resp

    slots = asyncio.Semaphore(cfg.slots) if cfg.slots else None

    async def generate(request, chat: bool):
        """One generation request; with ``--slots N`` at most N at once (a server's capacity: past N / request time
        per second the waits grow, and with them the TTFT the client sees)."""
        if slots is None:
            return await _generate(request, chat)
        async with slots:
            return await _generate(request, chat)

    async def _generate(request, chat: bool):
        await maybe_hang()
        arrival = time.perf_counter()
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return web.json_response({"error": {"message": "body is not JSON", "code": 400}}, status=400)
        state.generation_requests += 1
        for name in request.headers:
            if name.lower().startswith("x-"):
                state.header_names[name.lower()] = state.header_names.get(name.lower(), 0) + 1
        for key in body if isinstance(body, dict) else ():
            state.body_keys[key] = state.body_keys.get(key, 0) + 1
        digest = prompt_digest(body)
        state.prompts[digest] = state.prompts.get(digest, 0) + 1
        if cfg.hang_after is not None and state.generation_requests > cfg.hang_after:
            if not state.hanging:
                print(f"testserver: hanging from request {state.generation_requests} on (--hang-after)", flush=True)
            state.hanging = True
            await never.wait()
        if cfg.fail_rate > 0 and state.fail_rng.random() < cfg.fail_rate:
            state.failures_sent += 1
            return await send_whole(request, web.json_response(
                {"error": {"message": "injected failure (--fail-rate)", "type": "InternalServerError", "code": 500}},
                status=500))
        n = output_length(body, cfg)
        answer = None if chat else items.answer_tokens(body)
        if answer is not None:  # an item: the answer's length, cut by max_tokens
            n = min(len(answer), max(1, int(body.get("max_completion_tokens") or body.get("max_tokens")
                                             or cfg.default_max_tokens)))
        if cfg.short_output_rate > 0 and state.short_rng.random() < cfg.short_output_rate:
            n = max(1, n // 2)
            state.short_outputs_sent += 1
        finish_reason = "length" if n == int(body.get("max_completion_tokens") or body.get("max_tokens") or 0) else "stop"
        prompt_tokens = count_prompt_tokens(body)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        created = int(time.time())
        common = {"id": rid, "created": created, "model": body.get("model") or cfg.model}
        wants_logprobs = not chat and body.get("logprobs") is not None and body.get("logprobs") is not False
        steps = None
        if answer is not None:
            from infercrane.serving.testserver_model import token_id

            steps = items.load().decode(str(body["prompt"]), answer[:n])
            words = [step.token for step in steps]
            ids = [token_id(w, WORDS) for w in words]
        else:
            ids = [(i + (7 if cfg.diverge_after is not None and i >= cfg.diverge_after else 0)) % len(WORDS)
                   for i in range(n)]
            words = [" " + WORDS[t] for t in ids]
            if wants_logprobs:
                steps = items.load().forced(prompt_digest(body), words)
        top_n = int(body.get("logprobs") or 0) if wants_logprobs else 0

        async def sleep_until(t: float) -> None:
            delay = t - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)

        def token_time(i: int) -> float:
            return arrival + (cfg.ttft_ms + i * cfg.itl_ms) / 1000.0

        cut = cfg.cut_after is not None and state.generation_requests > cfg.cut_after

        def cut_short(sent: str) -> None:
            state.answers_cut += 1
            print(f"testserver: cutting the answer to request {state.generation_requests} short after {sent} "
                  "(--cut-after)", flush=True)
            request.transport.close()  # the bytes written so far go out, then the connection ends

        if not body.get("stream"):
            await sleep_until(token_time(n - 1))
            text = "".join(words)
            if chat:
                choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason}
                payload = {**common, "object": "chat.completion", "choices": [choice], "usage": usage}
            else:
                choice = {"index": 0, "text": text,
                          "logprobs": logprobs_block(steps, 0, top_n) if wants_logprobs else None,
                          "finish_reason": finish_reason}
                if body.get("return_token_ids"):
                    choice["token_ids"] = ids
                payload = {**common, "object": "text_completion", "choices": [choice], "usage": usage}
            if cut:
                data = json.dumps(payload).encode()
                whole = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
                whole.content_length = len(data)
                await whole.prepare(request)
                await whole.write(data[:len(data) // 2])
                cut_short(f"{len(data) // 2} of {len(data)} bytes")
                return whole
            return await send_whole(request, web.json_response(payload))

        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        obj = "chat.completion.chunk" if chat else "text_completion"

        async def send(payload: dict) -> None:
            await resp.write(f"data: {json.dumps(payload)}\n\n".encode())

        if chat:  # role chunk first, at once, with empty content (vLLM does this)
            await send({**common, "object": obj,
                        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})
        for i, word in enumerate(words):
            if cut and i == max(1, n // 2):
                cut_short(f"{i} of {n} tokens")
                return resp
            await sleep_until(token_time(i))
            last = i == n - 1
            if chat:
                choice = {"index": 0, "delta": {"content": word}, "finish_reason": finish_reason if last else None}
            else:
                block = (logprobs_block(steps[i:i + 1], sum(len(w) for w in words[:i]), top_n) if wants_logprobs
                         else None)
                choice = {"index": 0, "text": word, "logprobs": block, "finish_reason": finish_reason if last else None}
            await send({**common, "object": obj, "choices": [choice]})
        if cut:  # a one-token stream: cut after its token, before its end
            cut_short(f"{n} of {n} tokens, before [DONE]")
            return resp
        if include_usage:
            await send({**common, "object": obj, "choices": [], "usage": usage})
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        after_finish()
        return resp

    async def completions(request):
        return await generate(request, chat=False)

    async def chat_completions(request):
        return await generate(request, chat=True)

    app = web.Application(middlewares=[access])
    app.router.add_get("/health", health)
    app.router.add_get("/version", version)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/stats", stats)
    app.router.add_post("/reset_prefix_cache", reset_prefix_cache)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    return app


async def serve(cfg: ServerConfig, items: _Items | None = None) -> None:
    """Listen on ``cfg.host:cfg.port`` until SIGINT or SIGTERM (``items``: the norm kernel already loaded)."""
    from aiohttp import web

    if cfg.startup_delay_s > 0:
        print(f"testserver: loading (sleeping {cfg.startup_delay_s:g} s before listening)", flush=True)
        await asyncio.sleep(cfg.startup_delay_s)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    runner = web.AppRunner(build_app(cfg, items), access_log=None, shutdown_timeout=1.0)  # hung requests do not delay exit
    await runner.setup()
    site = web.TCPSite(runner, cfg.host, cfg.port)
    await site.start()
    print(f"testserver: serving model {cfg.model!r} on http://{cfg.host}:{cfg.port} "
          f"(ttft_ms={cfg.ttft_ms:g} itl_ms={cfg.itl_ms:g} fail_rate={cfg.fail_rate:g} "
          f"short_output_rate={cfg.short_output_rate:g} crash_after={cfg.crash_after} hang_after={cfg.hang_after}"
          + (f" cut_after={cfg.cut_after}" if cfg.cut_after is not None else "")
          + (f" norm_kernel={cfg.norm_kernel}" if cfg.norm_kernel != ServerConfig.norm_kernel else "") + ")",
          flush=True)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction in [0, 1]")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def _header(text: str) -> str:
    if ":" not in text or not text.split(":", 1)[0].strip():
        raise argparse.ArgumentTypeError(f"{text} is not NAME:VALUE")
    return text


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m infercrane.serving.testserver", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, required=True, help="TCP port to listen on")
    p.add_argument("--host", default="127.0.0.1", choices=["127.0.0.1", "localhost"],
                   help="address to bind; loopback only")
    p.add_argument("--model", default=ServerConfig.model, help="model name served and listed by /v1/models")
    p.add_argument("--ttft-ms", type=_non_negative, default=ServerConfig.ttft_ms, help="first-token delay (ms)")
    p.add_argument("--itl-ms", type=_non_negative, default=ServerConfig.itl_ms, help="delay between tokens (ms)")
    p.add_argument("--fail-rate", type=_fraction, default=0.0, help="fraction of requests answered HTTP 500")
    p.add_argument("--short-output-rate", type=_fraction, default=0.0,
                   help="fraction of requests that return half the asked tokens despite ignore_eos")
    p.add_argument("--eos-after", type=int, default=None, help="natural output length when ignore_eos is off")
    p.add_argument("--diverge-after", type=int, default=None,
                   help="output tokens from the K-th on differ from the default ones")
    p.add_argument("--crash-after", type=int, default=None, help="exit after N generation requests")
    p.add_argument("--hang-after", type=int, default=None, help="stop answering after N generation requests")
    p.add_argument("--cut-after", type=int, default=None,
                   help="cut every answer after the N-th generation request short half-way (the server lives on)")
    p.add_argument("--log-jit-after", type=int, default=None,
                   help="after N generation requests, log a JIT-compile line as vLLM's JIT monitor does")
    p.add_argument("--startup-delay-s", type=_non_negative, default=0.0, help="sleep before listening")
    p.add_argument("--seed", type=int, default=0, help="seed of the fault choices")
    p.add_argument("--slots", type=int, default=None,
                   help="generate at most N requests at once; the others wait (their wait is in their TTFT)")
    p.add_argument("--no-prefix-cache-reset", dest="prefix_cache_reset", action="store_false",
                   help="answer POST /reset_prefix_cache with 404 (vLLM without VLLM_SERVER_DEV_MODE=1)")
    p.add_argument("--also-serve", action="append", default=[], metavar="MODEL",
                   help="another model id /v1/models lists (repeatable): a server of several models")
    p.add_argument("--api-key", default=None, help="require Authorization: Bearer KEY on /v1/... (as vLLM)")
    p.add_argument("--require-header", action="append", default=[], type=_header, metavar="NAME:VALUE",
                   help="require this header on every request but GET /health and /stats (repeatable)")
    p.add_argument("--norm-kernel", default=ServerConfig.norm_kernel, metavar="SPEC",
                   help="the toy model's fused residual-add + RMSNorm: 'reference' (InferCrane's float32 oracle) or "
                        "PATH.py:FUNCTION (a candidate file); it decides the quality items' answers and logprobs")
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    cfg = ServerConfig(**{k: v for k, v in vars(args).items()})
    items = _Items(cfg.norm_kernel)
    if cfg.norm_kernel != ServerConfig.norm_kernel:  # a candidate file is loaded, or fails, before the server listens
        try:
            items.load()
        except InputError as exc:
            print(f"testserver: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None
    asyncio.run(serve(cfg, items))
    print("testserver: stopped", flush=True)


if __name__ == "__main__":
    main()
