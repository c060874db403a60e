"""The peer of bench/run_serve_bench.sh: transformers' generate behind Python's http.server.

    peer_serve.py --model DIR --port N --threads T

It answers the subset of /v1/completions that bench_serve_load sends (a prompt of token ids or
a string, max_tokens, min_tokens, temperature 0, stream with include_usage) and GET /health,
the way a simple server does it: connections are accepted on threads, but one lock runs one
generate at a time, so requests queue in arrival order. It prints "serving NAME on
http://HOST:PORT" once it listens, as `libai-actor serve` does.
"""
import argparse
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.generation.streamers import BaseStreamer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    name = os.path.basename(os.path.normpath(args.model))
    lock = threading.Lock()

    class Events(BaseStreamer):
        """Writes one server-sent event per new token; the first put is the prompt."""

        def __init__(self, write):
            self.write, self.prompt_seen, self.count = write, False, 0

        def put(self, value):
            if not self.prompt_seen:
                self.prompt_seen = True
                return
            for t in value.reshape(-1).tolist():
                self.count += 1
                self.write({"object": "text_completion", "model": name,
                            "choices": [{"index": 0, "text": tokenizer.decode([t]),
                                         "finish_reason": None}]})

        def end(self):
            pass

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def answer(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                self.answer(200, {"status": "ok", "model": name})
            else:
                self.answer(404, {"error": {"message": f"no {self.path}"}})

        def do_POST(self):
            if self.path != "/v1/completions":
                return self.answer(404, {"error": {"message": f"no {self.path}"}})
            try:
                req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                prompt = req["prompt"]
                ids = prompt if isinstance(prompt, list) else tokenizer(prompt)["input_ids"]
                if req.get("temperature", 1) != 0:
                    raise ValueError("this peer decodes greedily only: send temperature 0")
                max_tokens = int(req.get("max_tokens", 16))
                min_tokens = int(req.get("min_tokens", 0))
            except (ValueError, KeyError, TypeError) as e:
                return self.answer(400, {"error": {"message": f"bad request: {e}"}})
            stream = bool(req.get("stream", False))
            input_ids = torch.tensor([ids])
            gen = dict(max_new_tokens=max_tokens, min_new_tokens=min_tokens, do_sample=False,
                       attention_mask=torch.ones_like(input_ids),
                       pad_token_id=model.generation_config.eos_token_id)
            if not stream:
                with lock, torch.inference_mode():
                    out = model.generate(input_ids, **gen)[0, len(ids):].tolist()
                return self.answer(200, {
                    "object": "text_completion", "model": name,
                    "choices": [{"index": 0, "text": tokenizer.decode(out), "logprobs": None,
                                 "finish_reason": "length" if len(out) == max_tokens else "stop"}],
                    "usage": {"prompt_tokens": len(ids), "completion_tokens": len(out),
                              "total_tokens": len(ids) + len(out)}})
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            def chunk(text):
                data = text.encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def event(obj):
                chunk("data: " + json.dumps(obj) + "\n\n")

            streamer = Events(event)
            with lock, torch.inference_mode():
                model.generate(input_ids, streamer=streamer, **gen)
            event({"object": "text_completion", "model": name, "choices": [],
                   "usage": {"prompt_tokens": len(ids), "completion_tokens": streamer.count,
                             "total_tokens": len(ids) + streamer.count}})
            chunk("data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    class Server(ThreadingHTTPServer):
        request_queue_size = 1024  # as ours: 32 clients connecting at once are all accepted
        daemon_threads = True

    server = Server((args.host, args.port), Handler)
    print(f"serving {name} on http://{args.host}:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
