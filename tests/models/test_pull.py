"""``agentrt pull`` against a fake Hugging Face hub served on 127.0.0.1 (huggingface_hub
honours ``HF_ENDPOINT``): a quant tag picks one file, progress shows, an interrupted transfer
resumes with a Range request, a corrupted file and an unreachable hub give clear errors, and
what was pulled is found offline afterwards (``locate``, ``agentrt models``)."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from test_sources import write_gguf

from agentrt.cli import build_parser, main
from agentrt.models.pull import PullError, ensure_model, pull
from agentrt.models.sources import ModelNotFoundError, list_local_models, locate

_API = re.compile(r"/api/models/(.+?)(?:/revision/([^/]+))?$")
_RESOLVE = re.compile(r"/(.+?/.+?)/resolve/([^/]+)/(.+)$")


class FakeHub:
    """The few endpoints huggingface_hub and agentrt pull use: model info, and HEAD / GET
    (with Range) of a file. ``cut`` serves only the first N bytes of a file's next GET (the
    connection closes early); ``corrupt`` serves other bytes than the etag says."""

    def __init__(self, repos: dict[str, dict[str, bytes]]) -> None:
        self.repos = repos
        self.cut: dict[str, int] = {}
        self.corrupt: set[str] = set()
        self.log: list[tuple[str, str, str | None]] = []  # (method, path, Range)
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:
                hub.answer(self, head=True)

            def do_GET(self) -> None:
                hub.answer(self, head=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    @staticmethod
    def commit(repo: str) -> str:
        return hashlib.sha1(repo.encode()).hexdigest()

    @staticmethod
    def etag(name: str, data: bytes) -> str:  # LFS files: sha256; small files: git blob sha1
        if name.endswith((".gguf", ".safetensors")):
            return hashlib.sha256(data).hexdigest()
        return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()

    def answer(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        self.log.append((h.command, h.path, h.headers.get("Range")))
        if (m := _API.fullmatch(h.path.split("?")[0])) and m[1] in self.repos:
            body = json.dumps({"id": m[1], "sha": self.commit(m[1]), "siblings": [
                {"rfilename": f} for f in self.repos[m[1]]]}).encode()
            return self.send(h, 200, {"Content-Type": "application/json"}, body, head)
        m = _RESOLVE.fullmatch(h.path)
        if m is None or m[1] not in self.repos or m[3] not in self.repos[m[1]]:
            return self.send(h, 404, {"X-Error-Code": "RepoNotFound"}, b"{}", head)
        data = self.repos[m[1]][m[3]]
        headers = {"X-Repo-Commit": self.commit(m[1]), "ETag": f'"{self.etag(m[3], data)}"',
                   "Accept-Ranges": "bytes"}
        if m[3] in self.corrupt:
            data = bytes(b ^ 0xFF for b in data)
        start = int(re.fullmatch(r"bytes=(\d+)-", h.headers.get("Range", "bytes=0-"))[1])
        status = 206 if start else 200
        if start:
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        body = data[start:]
        if not head and m[3] in self.cut:
            cut = self.cut.pop(m[3])
            h.send_response(status)
            for k, v in {**headers, "Content-Length": str(len(body))}.items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(body[:cut])
            h.wfile.flush()
            h.close_connection = True
            return
        self.send(h, status, headers, body, head)

    @staticmethod
    def send(h: BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: bytes,
             head: bool) -> None:
        h.send_response(status)
        for k, v in {**headers, "Content-Length": str(len(body))}.items():
            h.send_header(k, v)
        h.end_headers()
        if not head:
            h.wfile.write(body)

    def gets(self, name: str) -> list[str | None]:
        """The Range header of every GET of ``name``."""
        return [r for method, path, r in self.log if method == "GET" and path.endswith(name)]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, bytes]:
    folder = tmp_path_factory.mktemp("gguf")
    return {name: write_gguf(folder / name).read_bytes() + bytes(300_000) for name in
            ("tiny-Q4_K_M.gguf", "tiny-Q8_0.gguf")}


@pytest.fixture
def hub(files, tmp_path, monkeypatch) -> FakeHub:
    fake = FakeHub({
        "org/tiny-GGUF": {**files, "README.md": b"# tiny\n"},
        "org/tiny": {"config.json": b'{"model_type": "llama"}', "model.safetensors": b"w" * 64,
                     "tokenizer.json": b"{}", "README.md": b"# tiny\n", "train.bin": b"x"},
    })
    monkeypatch.setenv("HF_ENDPOINT", fake.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    yield fake
    fake.server.shutdown()


def test_a_quant_tag_downloads_one_file_with_a_progress_bar(hub, files, capsys):
    pulled = pull("org/tiny-GGUF:q8_0")
    assert pulled.files == ("tiny-Q8_0.gguf",)
    assert pulled.path.read_bytes() == files["tiny-Q8_0.gguf"]
    assert pulled.downloaded_bytes == len(files["tiny-Q8_0.gguf"])
    assert hub.gets("tiny-Q8_0.gguf") == [None] and hub.gets("tiny-Q4_K_M.gguf") == []
    assert "tiny-Q8_0.gguf" in capsys.readouterr().err  # tqdm's bar names the file
    # found offline afterwards, under the name pulled and in `agentrt models`
    assert locate("org/tiny-GGUF:q8_0") == (pulled.path, "huggingface")
    assert "org/tiny-GGUF:tiny-Q8_0.gguf" in {m.name for m in list_local_models()}
    again = pull("org/tiny-GGUF:q8_0", progress=False)
    assert again.downloaded_bytes == 0 and hub.gets("tiny-Q8_0.gguf") == [None]


def test_an_interrupted_transfer_resumes_where_it_stopped(hub, files):
    name, data = "tiny-Q4_K_M.gguf", files["tiny-Q4_K_M.gguf"]
    hub.cut[name] = 100_000
    with pytest.raises(PullError, match=r"stopped at 100,000 of .* run the same command again"):
        pull("org/tiny-GGUF:Q4_K_M", progress=False)
    with pytest.raises(ModelNotFoundError):  # nothing half-written is visible as a model
        locate("org/tiny-GGUF:Q4_K_M")
    pulled = pull("org/tiny-GGUF:Q4_K_M", progress=False)
    assert hub.gets(name) == [None, "bytes=100000-"]
    assert pulled.downloaded_bytes == len(data) - 100_000
    assert pulled.path.read_bytes() == data


def test_a_corrupted_file_is_refused_and_deleted(hub):
    hub.corrupt.add("tiny-Q8_0.gguf")
    with pytest.raises(PullError, match="arrived corrupted .*sha256 .*expected"):
        pull("org/tiny-GGUF:Q8_0", progress=False)
    with pytest.raises(ModelNotFoundError):
        locate("org/tiny-GGUF:Q8_0")
    hub.corrupt.clear()  # the next run downloads it whole, from the first byte
    pull("org/tiny-GGUF:Q8_0", progress=False)
    assert hub.gets("tiny-Q8_0.gguf") == [None, None]


def test_a_safetensors_repository_downloads_the_model_folder_only(hub):
    pulled = pull("org/tiny", progress=False)
    assert set(pulled.files) == {"config.json", "model.safetensors", "tokenizer.json"}
    assert pulled.path.is_dir() and (pulled.path / "model.safetensors").read_bytes() == b"w" * 64
    assert hub.gets("train.bin") == [] and hub.gets("README.md") == []


@pytest.mark.parametrize(("name", "error", "match"), [
    ("org/tiny-GGUF", PullError, r"holds 2 GGUF files: name one.*org/tiny-GGUF:tiny-Q8_0"),
    ("org/tiny-GGUF:Q6_K", PullError, r"no single .gguf .* matches 'Q6_K'"),
    ("org/missing:Q4_K_M", PullError, r"no repository 'org/missing'"),
    ("ollama:llama3", ValueError, r"never writes it; run `ollama pull llama3`"),
    ("not a name", ValueError, r"not a Hugging Face hub name"),
])
def test_names_that_cannot_be_pulled_say_why(hub, name, error, match):
    with pytest.raises(error, match=match):
        pull(name, progress=False)


def test_offline_and_unreachable_hubs_give_clear_errors(hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(PullError, match="HF_HUB_OFFLINE is set"):
        pull("org/tiny-GGUF:Q8_0", progress=False)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    hub.server.shutdown()
    hub.server.server_close()  # nothing listens on that port now
    with pytest.raises(PullError, match=r"could not download from http://127\.0\.0\.1"):
        pull("org/tiny-GGUF:Q8_0", progress=False)


def test_the_command_line_and_ensure_model(hub, files, capsys):
    assert main(["pull", "-q", "org/tiny-GGUF:Q4_K_M"]) == 0
    out, err = capsys.readouterr()
    assert Path(out.strip()).read_bytes() == files["tiny-Q4_K_M.gguf"] and err == ""
    assert main(["models"]) == 0
    assert "org/tiny-GGUF:tiny-Q4_K_M.gguf" in capsys.readouterr().out
    before = len(hub.log)
    ensure_model("org/tiny-GGUF:Q4_K_M")  # already here: the hub is not asked
    assert len(hub.log) == before
    ensure_model("org/tiny-GGUF:Q8_0", progress=False)  # missing: pulled
    assert locate("org/tiny-GGUF:Q8_0")[0].read_bytes() == files["tiny-Q8_0.gguf"]
    assert main(["pull", "org/missing:Q4_K_M"]) == 1
    assert "no repository 'org/missing'" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["run", "hi"], ["chat"], ["serve"]])
def test_pull_is_a_flag_of_every_command_that_loads_a_model(command):
    parser = build_parser()
    assert parser.parse_args([command[0], "--pull", "--model", "org/x:Q4_K_M",
                              *command[1:]]).pull is True
    assert parser.parse_args(command).pull is False
