"""16 concurrent streaming clients, 4 of which leave midway: the others complete, the
leavers' requests are aborted, and the KV pool returns to where it started."""

from __future__ import annotations

import asyncio

import pytest

MODEL = "SmolLM2-135M-Instruct"
TOPICS = ["a dragon", "the sea", "a lighthouse", "a robot", "the moon", "a forest", "a city",
          "a violin", "a storm", "a garden", "a train", "a desert", "a river", "a castle",
          "a comet", "a library"]
LEAVERS = {1, 6, 11, 14}


async def _client(aclient, i: int) -> dict:
    messages = [{"role": "user", "content": f"Write a long story about {TOPICS[i]}."}]
    # NOTE: a leaver asks for more than it can get before it leaves, whatever the speed
    max_tokens = 512 if i in LEAVERS else 24
    stream = await aclient.chat.completions.create(model=MODEL, messages=messages,
                                                   max_tokens=max_tokens, stream=True)
    text, finish, num_chunks = "", None, 0
    async for chunk in stream:
        num_chunks += 1
        text += chunk.choices[0].delta.content or ""
        finish = chunk.choices[0].finish_reason or finish
        if i in LEAVERS and num_chunks == 3:
            await stream.close()  # drops the connection mid-stream
            return {"left": True, "text": text}
    return {"left": False, "text": text, "finish": finish}


def _finished(metrics: dict[str, float], reason: str) -> float:
    return metrics.get(f"agentrt_requests_finished_total{{finish_reason={reason}}}", 0.0)


async def test_concurrent_streams_with_disconnects_free_all_kv(server, aclient):
    before = server.wait_until_idle()
    total = before["agentrt_kv_total_blocks"]
    assert before["agentrt_kv_free_blocks"] + before["agentrt_kv_evictable_blocks"] == total
    async with aclient:
        results = await asyncio.gather(*(_client(aclient, i) for i in range(16)))
    stayed = [r for r in results if not r["left"]]
    assert len(stayed) == 12
    assert all(r["text"] and r["finish"] in ("stop", "length") for r in stayed)

    def counted(m: dict[str, float]) -> tuple[float, float]:
        return (_finished(m, "abort") - _finished(before, "abort"),
                sum(_finished(m, r) - _finished(before, r) for r in ("stop", "length")))

    after = server.wait_until_idle(until=lambda m: counted(m) == (len(LEAVERS), 12))
    assert after["agentrt_num_requests_running"] == 0 == after["agentrt_num_requests_waiting"]
    assert after["agentrt_kv_free_blocks"] + after["agentrt_kv_evictable_blocks"] == total
    assert counted(after) == (len(LEAVERS), 12)


async def test_a_client_that_leaves_a_whole_answer_aborts_it(server):
    """Not streamed: the request is aborted when the connection drops, not run to the end."""
    import httpx

    before = server.wait_until_idle()
    body = {"model": MODEL, "max_tokens": 256, "stop": ["NEVER-SEEN"],
            "messages": [{"role": "user", "content": "Write a very long story about a cat."}]}
    async with httpx.AsyncClient(base_url=server.base_url, timeout=0.3) as http:
        with pytest.raises(httpx.ReadTimeout):  # 256 tokens take seconds: the client leaves
            await http.post("/chat/completions", json=body)
    after = server.wait_until_idle(
        timeout=10, until=lambda m: _finished(m, "abort") - _finished(before, "abort") == 1)
    assert after["agentrt_num_requests_running"] == 0
    assert _finished(after, "abort") - _finished(before, "abort") == 1
    held = after["agentrt_kv_total_blocks"] - after["agentrt_kv_free_blocks"] \
        - after["agentrt_kv_evictable_blocks"]
    assert held == 0
