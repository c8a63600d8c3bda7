"""Every message a user can meet, in one table, and the one exception type that carries them.

Callers raise ``KVPlanError("code", **fields)``; the UI and the CLI show ``str(err)``. Tests walk
``MESSAGES`` to check that each code formats and is reachable.
"""

from __future__ import annotations

MESSAGES: dict[str, str] = {
    # config.json import
    "config.not_json": "config.json is not valid JSON: {detail}",
    "config.not_object": "config.json must be a JSON object, got {got}",
    "config.too_large": "config.json is {size:,} bytes; the limit is {limit:,} bytes",
    "config.not_utf8": "config.json is not UTF-8 text",
    "config.missing_key": "config.json is missing '{key}' (needed for {why})",
    "config.bad_value": "config.json key '{key}' must be {expected}, got {value}",
    "config.unsupported": "config.json: {what} is not supported ({detail})",
    "config.too_deep": "config.json is nested deeper than {limit} levels",
    "config.empty": "{source}: the text box is empty",
    # names and choices
    "unknown.model": "unknown model preset '{value}' (try `python -m kvplan models`)",
    "unknown.gpu": "unknown accelerator '{value}' (try `python -m kvplan gpus`)",
    "unknown.dtype": "unknown dtype '{value}'; choose one of: {choices}",
    "unknown.engine": "unknown engine '{value}'; choose one of: {choices}",
    "unknown.release": "kvplan does not model {engine} release '{value}'; choose one of: {choices}",
    "unknown.scenario": "unknown scenario '{value}'",
    # numbers
    "value.range": "{field} must be between {low:,} and {high:,}, got {value}",
    "value.not_number": "{field} must be a number, got {value}",
    "parallel.tp_heads": "tensor parallel size {tp} does not split {heads} KV heads (the engine "
                         "needs kv_heads % tp == 0, or tp % kv_heads == 0 when tp > kv_heads)",
    "parallel.pp_layers": "pipeline parallel size {pp} exceeds the {layers} layers of the model",
    "parallel.gpus": "the GPU count {gpus} is not a multiple of tp × pp = {tpp}: use {need} GPUs, "
                     "or a TP × PP that divides {gpus}",
    "engine.dtype": "engine '{engine}' cannot store the KV cache as {dtype}: {why}",
    "engine.unserved": "{engine} ({release}) does not serve {architecture}: {why}",
    # links and uploads
    "link.unknown_key": "link parameter {key} is not known and was ignored",
    "link.bad_value": "link parameter '{key}'={value} was not used: {why}",
    "link.future_version": "this link was made by a newer kvplan (schema v{value}); "
                           "parameters this version does not know were ignored",
    "scenario.invalid": "scenario file is invalid: {detail}",
    "csv.invalid": "request-length CSV is invalid: {detail}",
    "file.missing": "cannot read '{path}': {detail}",
    # calibration against a vLLM log
    "calibrate.empty": "the vLLM log is empty",
    "calibrate.too_large": "the vLLM log is {size:,} bytes; the limit is {limit:,} bytes "
                           "(the start-up lines are enough)",
    "calibrate.not_text": "the vLLM log is not text ({detail})",
    "calibrate.no_lines": "no vLLM capacity line in the log (looked for 'Available KV cache memory', "
                          "'GPU KV cache size', 'Maximum concurrency for', '# GPU blocks')",
    "calibrate.engine": "calibration compares with vLLM's paged KV pool: {why}",
    # the dashboard's last line of defence (a bug, reported without a traceback)
    "internal.view": "{title} could not be drawn ({kind}: {detail}); the other views are unaffected",
}


class KVPlanError(ValueError):
    """A user-facing error with a message from ``MESSAGES``."""

    def __init__(self, code: str, **fields: object) -> None:
        self.code = code
        self.fields = fields
        super().__init__(MESSAGES[code].format(**fields))

    @property
    def field(self) -> str | None:
        """The input the message is about, when there is one."""
        for key in ("key", "field"):
            if key in self.fields:
                return str(self.fields[key])
        return None


def short(value: object, limit: int = 60) -> str:
    """A printable, bounded rendering of a user-supplied value for messages."""
    text = repr(value)
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def clip(value: object, limit: int = 40) -> str:
    """User text made printable and bounded, without quotes (for ``'{value}'`` templates)."""
    text = "".join(ch if ch.isprintable() else "?" for ch in str(value))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def is_plain_int(text: str, max_digits: int = 18, signed: bool = False) -> bool:
    """ASCII digits only (``'²'.isdigit()`` is True in Python), at most ``max_digits`` of them."""
    body = text[1:] if signed and text[:1] == "-" else text
    return body.isascii() and body.isdigit() and len(body) <= max_digits
