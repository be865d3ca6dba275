"""A model answering requests (docs/architecture.md §12): what a serving lease runs on Ray Serve,
and what the oracle runs to check its answers. It knows no site and no chain.

`load_predictor` builds the lease's model: a built-in one from its seed, a train job's result,
or a transformers checkpoint (a classifier for `predict`, a causal LM for `generate`). A
predictor checks one request's input on its own (`check`), so a malformed one is refused
before it joins a batch, and answers a batch of checked inputs at once (`__call__`), with no
randomness: greedy decoding, the model in eval mode, so the oracle's run of the same model on
the same input gives the same answer, up to float rounding.

`BatchTuner` adapts `@serve.batch`'s size and wait to the load the replica sees (see its
docstring); `compute.runners.serve` puts the deployment and its ingress together.

torch, transformers and the modules that load a model (`compute.hf`, `compute.models`, the
infer runner) are imported where a model is loaded or run: the oracle's canaries and a lease's
ingress import this module for a request's shape alone."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from compute.errors import InvalidJob
from compute.runners.params import ServeParams

MAX_PROMPT_CHARS = 8_192
MAX_INPUT_VALUES = 65_536


class BadRequest(ValueError):
    """A request the model cannot take: one sentence for the caller (HTTP 400)."""


# ── batching that adapts to load ──────────────────────────────────────────────────────


@dataclass
class BatchTuner:
    """`@serve.batch`'s batch size and wait, adapted to what the last batches looked like.

    A batch closes when it is full or when its wait has passed. Under light load batches close
    on the wait half empty: waiting longer only adds latency, so the wait halves (down to
    `min_wait_s`), and when they are a quarter full or less the size shrinks toward what
    arrives. Under heavy load batches close full: the size doubles (up to `cap`), so each
    forward pass serves more requests, and the wait grows back (up to `max_wait_s`) so a larger
    batch can fill. Each
    decision looks at the last `window` batches, so one burst does not swing it."""

    cap: int
    max_wait_s: float
    min_wait_s: float = 0.0005
    window: int = 8
    size: int = 0
    wait_s: float = 0.0
    _recent: deque[int] = field(default_factory=deque)

    def __post_init__(self) -> None:
        self.cap = max(1, self.cap)
        self.min_wait_s = min(self.min_wait_s, self.max_wait_s)
        self.size = self.size or min(self.cap, 8)
        self.wait_s = self.wait_s or self.max_wait_s

    def observe(self, batch: int) -> tuple[int, float]:
        """After a batch of `batch` requests: the size and wait for the next ones."""
        self._recent.append(batch)
        if len(self._recent) > self.window:
            self._recent.popleft()
        if len(self._recent) < min(self.window, 4):
            return self.size, self.wait_s
        full = sum(1 for b in self._recent if b >= self.size) / len(self._recent)
        mean = sum(self._recent) / len(self._recent)
        if full >= 0.5 and self.size < self.cap:
            self.size = min(self.cap, self.size * 2)
            self.wait_s = min(self.max_wait_s, max(self.wait_s * 2, self.min_wait_s))
            self._recent.clear()
        elif mean <= self.size / 2:  # batches close on their wait, half empty: wait less
            if mean <= self.size / 4:
                self.size = max(1, min(self.size, 2 ** math.ceil(math.log2(max(1.0, mean * 2)))))
            self.wait_s = max(self.min_wait_s, self.wait_s / 2)
            self._recent.clear()
        return self.size, self.wait_s


# ── the model ─────────────────────────────────────────────────────────────────────────


class Predictor:
    """One lease's model: `check` one request's body, then answer a batch of checked inputs."""

    task = "predict"
    name = ""

    def check(self, body: Any) -> Any:
        raise NotImplementedError

    def __call__(self, inputs: list[Any]) -> list[dict[str, Any]]:
        raise NotImplementedError


class TensorPredictor(Predictor):
    """A built-in model (an MLP over features, a tiny transformer over token ids): the input is
    one row, the output its logits."""

    def __init__(self, model: Any, name: str, integer: bool, width: int, vocab: int | None = None) -> None:
        self.model = model.eval()
        self.name = name
        self.integer = integer
        self.width = width
        self.vocab = vocab

    def check(self, body: Any) -> list[float] | list[int]:
        row = body.get("input") if isinstance(body, dict) else None
        what = f"{self.width} token ids below {self.vocab}" if self.integer else f"{self.width} numbers"
        if not isinstance(row, list) or len(row) != self.width:
            raise BadRequest(f"the body must be {{\"input\": [...]}} with {what}.")
        if self.integer:
            vocab = self.vocab or 0
            if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < vocab for v in row):
                raise BadRequest(f"the input must be {what}.")
            return row
        if not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in row):
            raise BadRequest(f"the input must be {what}, all finite.")
        return [float(v) for v in row]

    def __call__(self, inputs: list[Any]) -> list[dict[str, Any]]:
        import torch

        with torch.no_grad():
            batch = torch.tensor(inputs, dtype=torch.long if self.integer else torch.float32)
            logits = self.model(batch).float()
        return [{"output": row} for row in logits.tolist()]


class TextClassifier(Predictor):
    """A transformers sequence classifier: the input is a text, the output its logits."""

    def __init__(self, directory: str) -> None:
        from compute import hf  # torch: see the module's docstring

        self.model, self.tokenizer = hf.load(directory)
        self.name = "transformers:" + str(self.model.config.model_type)

    def check(self, body: Any) -> str:
        text = body.get("input") if isinstance(body, dict) else None
        if not isinstance(text, str) or not 0 < len(text) <= MAX_PROMPT_CHARS:
            raise BadRequest(f"the body must be {{\"input\": \"text\"}} with 1 to {MAX_PROMPT_CHARS} "
                             "characters.")
        return text

    def __call__(self, inputs: list[Any]) -> list[dict[str, Any]]:
        import torch

        from compute import hf  # torch: see the module's docstring

        with torch.no_grad():
            logits = hf.logits(self.model, self.tokenizer, list(inputs), batch_size=len(inputs))
        return [{"output": row} for row in logits.float().tolist()]


@dataclass(frozen=True)
class Completion:
    prompt: str
    max_tokens: int


class Generator(Predictor):
    """A transformers causal LM completing prompts greedily: the batch is left-padded, each
    prompt generates up to its own `max_tokens` (at most the lease's), and stops at the end of
    text."""

    task = "generate"

    def __init__(self, directory: str, max_tokens: int) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from compute import hf  # torch: see the module's docstring

        found = hf.find(directory)
        if found is None:
            raise InvalidJob(f"no transformers checkpoint at {directory}; give a causal language model "
                             "save_pretrained wrote.")
        hf.quiet()
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(found, local_files_only=True, padding_side="left")
            self.model = AutoModelForCausalLM.from_pretrained(found, local_files_only=True).eval()
        except (OSError, ValueError, KeyError) as exc:
            raise InvalidJob(f"the checkpoint {found.name} is not a causal language model transformers "
                             "loads: "
                             f"{str(exc).strip().splitlines()[0]}") from None
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.max_tokens = max_tokens
        self.name = "transformers:" + str(self.model.config.model_type)

    def check(self, body: Any) -> Completion:
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object {\"prompt\": \"text\", \"max_tokens\": N}.")
        prompt, tokens = body.get("prompt"), body.get("max_tokens", 16)
        if not isinstance(prompt, str) or not 0 < len(prompt) <= MAX_PROMPT_CHARS:
            raise BadRequest(f"prompt must be a text of 1 to {MAX_PROMPT_CHARS} characters.")
        if not isinstance(tokens, int) or isinstance(tokens, bool) or not 1 <= tokens <= self.max_tokens:
            raise BadRequest(f"max_tokens must be a whole number from 1 to {self.max_tokens}.")
        if body.get("temperature", 0) not in (0, 0.0):
            raise BadRequest("only greedy completion is served: leave temperature out or set it to 0.")
        room = int(self.model.config.n_positions) if hasattr(self.model.config, "n_positions") else None
        if room is not None and len(self.tokenizer(prompt)["input_ids"]) + tokens > room:
            raise BadRequest(f"the prompt and max_tokens exceed the model's {room} positions; shorten the "
                             "prompt or ask for fewer tokens.")
        return Completion(prompt, tokens)

    def __call__(self, inputs: list[Any]) -> list[dict[str, Any]]:
        import torch

        encoded = self.tokenizer([c.prompt for c in inputs], return_tensors="pt", padding=True)
        longest = max(c.max_tokens for c in inputs)
        with torch.no_grad():
            out = self.model.generate(**encoded, max_new_tokens=longest, do_sample=False,
                                      pad_token_id=self.tokenizer.pad_token_id)
        answers = []
        width = encoded["input_ids"].shape[1]
        for i, completion in enumerate(inputs):
            new = out[i, width:width + completion.max_tokens].tolist()
            eos = self.tokenizer.eos_token_id
            stopped = eos in new
            if stopped:
                new = new[:new.index(eos)]
            answers.append({"text": self.tokenizer.decode(new), "tokens": new,
                            "prompt_tokens": int(encoded["attention_mask"][i].sum()),
                            "finish_reason": "stop" if stopped else "length"})
        return answers


def load_predictor(params: ServeParams, seed: int) -> Predictor:
    """The lease's model, as its replicas and the oracle's canaries load it."""
    import torch

    # torch, and Ray with the infer runner: see the module's docstring.
    from compute import hf
    from compute.models import build_model
    from compute.runners.infer import load_for_inference

    torch.manual_seed(seed)
    if params.task == "generate":
        return Generator(params.checkpoint, params.max_tokens)
    if params.checkpoint and hf.is_checkpoint(params.checkpoint):
        return TextClassifier(params.checkpoint)
    if params.checkpoint:
        model, meta = load_for_inference(params.checkpoint)
        name, config = meta["model"], meta.get("config", {})
    else:
        model, name, config = build_model(params.model), params.model, {}
    if name == "tiny-transformer":
        width, vocab = int(config.get("seq_len", 16)), int(config.get("vocab", 64))
        return TensorPredictor(model, name, True, width, vocab)
    return TensorPredictor(model, name, False, int(config.get("in_features", 16)))


def answer_shape(predictor: Predictor, answer: dict[str, Any], model: str, request_id: str) -> dict[str, Any]:
    """The body a request gets back: `predict`'s output, or an OpenAI-style completion."""
    if predictor.task == "predict":
        return {"model": model, "output": answer["output"]}
    tokens = len(answer["tokens"])
    return {"id": request_id, "object": "text_completion", "model": model,
            "choices": [{"index": 0, "text": answer["text"], "finish_reason": answer["finish_reason"]}],
            "usage": {"prompt_tokens": answer["prompt_tokens"], "completion_tokens": tokens,
                      "total_tokens": answer["prompt_tokens"] + tokens}}


# ── canaries: the oracle's check that a lease serves its model ───────────────────────

CANARY_WORDS = ("the", "cat", "sat", "on", "a", "mat", "dog", "ran", "in", "park", "sun", "is", "warm",
                "and", "bright", "model", "answers", "every", "request", "with")
# How far a lease's logits may lie from the oracle's own run of the same model: relative to the
# largest of the oracle's logits, plus a floor. fp32 on a CPU differs by about 1e-6 between a batch
# and one row (the sums run in another order); bf16 or TF32 on a GPU by up to about 1e-2. Another
# model's logits, or garbage, differ by the logits' own size.
CANARY_MAX_TOKENS = 4  # a completion canary's: a first token and a few after it
CANARY_RTOL = 2e-2
CANARY_ATOL = 1e-4


def canary_bodies(predictor: Predictor, seed: int, count: int) -> list[dict[str, Any]]:
    """`count` request bodies drawn from `seed` alone, in the shape the lease's model takes: the
    oracle and anyone checking it draw the same ones."""
    import random

    draw = random.Random(seed)
    bodies: list[dict[str, Any]] = []
    for _ in range(count):
        if isinstance(predictor, TensorPredictor):
            row = ([draw.randrange(predictor.vocab or 1) for _ in range(predictor.width)] if predictor.integer
                   else [round(draw.gauss(0.0, 1.0), 6) for _ in range(predictor.width)])
            bodies.append({"input": row})
            continue
        words = " ".join(draw.choice(CANARY_WORDS) for _ in range(draw.randint(3, 8)))
        bodies.append({"input": words} if predictor.task == "predict"
                      else {"prompt": words, "max_tokens": CANARY_MAX_TOKENS})
    return bodies


def canary_matches(expected: dict[str, Any], answered: Any) -> tuple[bool, str]:
    """Whether a lease's answer is the oracle's own, within CANARY_RTOL for logits and token for
    token for a completion's first token and most of the rest; and a sentence saying how far."""
    import math

    if not isinstance(answered, dict):
        return False, "the answer is not a JSON object"
    if "output" in expected:
        got = answered.get("output")
        want = expected["output"]
        if not isinstance(got, list) or len(got) != len(want) or \
                not all(isinstance(v, int | float) and math.isfinite(v) for v in got):
            return False, f"the output is not {len(want)} finite numbers"
        scale = max(abs(v) for v in want) if want else 0.0
        worst = max(abs(a - b) for a, b in zip(got, want, strict=True)) if want else 0.0
        bound = CANARY_ATOL + CANARY_RTOL * scale
        return worst <= bound, f"the largest difference is {worst:.3g}, the bound {bound:.3g}"
    choices = answered.get("choices")
    text = choices[0].get("text") if isinstance(choices, list) and choices and isinstance(choices[0], dict) \
        else None
    if not isinstance(text, str):
        return False, "the answer has no completion"
    want_text = expected["text"]
    same = text == want_text
    return same, "the completion is the oracle's" if same else f"the completion {text!r} is not {want_text!r}"
