"""The serving lab: launch an engine per recipe, drive it with a workload, measure it.

Data flow: ``recipes`` (how to launch an engine; hashed) and ``workload`` (what to send, the ordered
run plan) -> ``engine`` (lifecycle: start, health, reset prefix cache, stop) -> ``drivers`` (AIPerf,
``vllm bench serve``) -> ``metrics`` (one ``RunMetrics`` per run and concurrency).
``testserver`` is an OpenAI-compatible server with programmable latency and faults that stands in
for vLLM where there is no GPU.

Entry points: ``workload.run_plan`` (A/B, any arm order) and ``workload.run_arm`` (one recipe).
"""
