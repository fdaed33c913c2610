"""`vllm serve` on openreg (`make test-vllm`, docs/vllm.md): the OpenAI-compatible server started as a
user starts it, on 127.0.0.1, answering /v1/completions and /v1/chat/completions, streamed and not,
to an HTTP client (httpx), several requests at once; every generated token id equal to Hugging
Face's greedy generate on the CPU; the server stops on SIGINT with exit status 0 and leaves no
process behind."""

from __future__ import annotations

import concurrent.futures
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import httpx
import psutil
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import tiny_models

MAX_TOKENS = 16
STARTUP_SECONDS = 600


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> pathlib.Path:
    return tiny_models.build("llama", tmp_path_factory.mktemp("vllm-serve") / "llama")


@pytest.fixture(scope="module")
def server(model, tmp_path_factory):
    """The server process and its base URL; on teardown, stopped with SIGINT (Ctrl-C)."""
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm-serve-log") / "server.log"
    command = [
        str(pathlib.Path(sys.executable).with_name("vllm")), "serve", str(model),
        "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
        "--max-model-len", str(tiny_models.MAX_POSITIONS), "--gpu-memory-utilization", "0.5", "--seed", "0",
    ]  # fmt: skip
    with log.open("w") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=dict(os.environ))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        assert process.poll() is None, f"vllm serve exited with {process.returncode}:\n{log.read_text()[-6000:]}"
        try:
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"vllm serve not up after {STARTUP_SECONDS} s:\n{log.read_text()[-6000:]}"
        time.sleep(2)
    handle = psutil.Process(process.pid)
    yield {"url": url, "process": process, "log": log, "children": handle.children(recursive=True)}
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=120)


def _completion(url: str, model: pathlib.Path, prompt: str, stream: bool) -> tuple[list[int], int]:
    """The generated token ids of one /v1/completions request, and the number of chunks received."""
    body = {
        "model": str(model), "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0.0,
        "ignore_eos": True, "return_token_ids": True, "stream": stream,
    }  # fmt: skip
    return _post(f"{url}/v1/completions", body, stream, delta_key=None)


def _chat(url: str, model: pathlib.Path, messages: list[dict], stream: bool) -> tuple[list[int], int]:
    body = {
        "model": str(model), "messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0.0,
        "ignore_eos": True, "return_token_ids": True, "stream": stream,
    }  # fmt: skip
    return _post(f"{url}/v1/chat/completions", body, stream, delta_key="delta")


def _post(url: str, body: dict, stream: bool, delta_key: str | None) -> tuple[list[int], int]:
    if not stream:
        response = httpx.post(url, json=body, timeout=300)
        assert response.status_code == 200, response.text
        choice = response.json()["choices"][0]
        assert choice["finish_reason"] == "length", choice
        return choice["token_ids"], 1
    tokens: list[int] = []
    chunks = 0
    with httpx.stream("POST", url, json=body, timeout=300) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choice = json.loads(line[len("data: ") :])["choices"]
            if not choice:
                continue
            tokens += choice[0].get("token_ids") or []
            chunks += 1
    return tokens, chunks


@pytest.fixture(scope="module")
def chat_messages() -> list[list[dict]]:
    return [
        [{"role": "user", "content": "What does a stream hold?"}],
        [{"role": "system", "content": "Answer in one line."}, {"role": "user", "content": "Graphs"}],
    ]


@pytest.fixture(scope="module")
def expected(model, chat_messages) -> dict:
    """Hugging Face's greedy tokens on the CPU for every prompt and chat the tests send."""
    tokenizer = tiny_models.transformers.AutoTokenizer.from_pretrained(model)
    # The chat template renders the messages to text, which is then tokenized (as vLLM's server does).
    chats = [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in chat_messages]
    return {
        "prompts": tiny_models.hf_greedy(model, tiny_models.PROMPTS, MAX_TOKENS),
        "chats": tiny_models.hf_greedy(model, chats, MAX_TOKENS),
    }


@pytest.mark.parametrize("stream", [False, True])
def test_completions_tokens_equal_hf_greedy_on_cpu(server, model, expected, stream):
    for index in (0, 3, 5):
        tokens, chunks = _completion(server["url"], model, tiny_models.PROMPTS[index], stream)
        assert tokens == expected["prompts"][index], (index, stream)
        if stream:
            assert chunks > 1, "streamed in one chunk"


@pytest.mark.parametrize("stream", [False, True])
def test_chat_completions_tokens_equal_hf_greedy_on_cpu(server, model, expected, chat_messages, stream):
    for messages, want in zip(chat_messages, expected["chats"], strict=True):
        tokens, chunks = _chat(server["url"], model, messages, stream)
        assert tokens == want, (messages, stream)
        if stream:
            assert chunks > 1, "streamed in one chunk"


def test_concurrent_requests_each_equal_hf_greedy_on_cpu(server, model, expected):
    """All ten prompts at once, half of them streamed: the engine batches them (continuous
    batching) and each answer is still the CPU's."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(tiny_models.PROMPTS)) as pool:
        futures = [
            pool.submit(_completion, server["url"], model, prompt, index % 2 == 1)
            for index, prompt in enumerate(tiny_models.PROMPTS)
        ]
        answers = [future.result()[0] for future in futures]
    assert answers == expected["prompts"]
    metrics = httpx.get(f"{server['url']}/metrics", timeout=30).text
    assert "vllm:num_requests_running" in metrics


def test_server_runs_on_openreg_and_stops_cleanly_on_sigint(server):
    log = server["log"].read_text()
    assert "OPENREG KV cache size" in log, log[-4000:]  # vLLM names the platform's device here
    process = server["process"]
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=120) == 0, server["log"].read_text()[-4000:]
    leftover = [child.pid for child in server["children"] if child.is_running() and child.status() != "zombie"]
    assert not leftover, f"processes left after the server stopped: {leftover}"
