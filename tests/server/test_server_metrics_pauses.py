"""``/metrics`` shows the requests paused with their KV (a tool running) and what became of
their KV: the interception policy's choices, the host pool, preemptions."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from agentrt import SamplingParams  # noqa: E402
from agentrt.server import create_app  # noqa: E402


def _samples(http: TestClient) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(http.get("/metrics").text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def test_metrics_count_paused_requests_and_the_policy_s_choices(engine):
    preserved = "agentrt_interception_resumes_total{strategy=preserve}"
    with TestClient(create_app(engine)) as http:
        before = _samples(http)
        out = engine.generate("The tool says", SamplingParams(max_tokens=2), keep_kv=True)
        try:
            paused = _samples(http)
            assert paused["agentrt_num_requests_paused"] == before[
                "agentrt_num_requests_paused"] + 1
            assert paused["agentrt_interceptions_total"] == before[
                "agentrt_interceptions_total"] + 1
            engine.resume(out.request_id, " 42.", SamplingParams(max_tokens=2))
        finally:
            engine.release(out.request_id)
        after = _samples(http)
    assert after["agentrt_num_requests_paused"] == before["agentrt_num_requests_paused"]
    assert after[preserved] == before[preserved] + 1  # a short pause keeps its KV
    for strategy in ("swap", "discard"):
        name = f"agentrt_interception_resumes_total{{strategy={strategy}}}"
        assert after[name] == before[name]
    for name in ("agentrt_kv_host_free_blocks", "agentrt_kv_host_total_blocks",
                 "agentrt_preemptions_total", "agentrt_recomputed_tokens_total",
                 "agentrt_swapped_out_tokens_total", "agentrt_swapped_in_tokens_total"):
        assert name in after, name
    assert after["agentrt_kv_host_free_blocks"] == after["agentrt_kv_host_total_blocks"]
