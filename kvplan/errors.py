"""Every message a user can meet, in one table, and the one exception type that carries them.

Callers raise ``KVPlanError("code", **fields)``; the UI and the CLI show ``str(err)``. Tests walk
``MESSAGES`` to check that each code formats and is reachable.
"""

from __future__ import annotations

import re

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
    # weights: quantization_config, checkpoints, the Hub
    "weights.unknown_method": "quantization_config: quant_method {method} is not known to kvplan "
                              "(known: {known}); choose the weight format by hand",
    "weights.bad_quantization": "quantization_config key '{key}' must be {expected}, got {value}",
    "checkpoint.not_found": "no *.safetensors file in '{path}'",
    "checkpoint.bad_file": "'{path}' is not a readable safetensors file: {detail}",
    "checkpoint.header_too_large": "'{path}': safetensors header of {size:,} bytes exceeds the "
                                   "{limit:,}-byte limit",
    "checkpoint.headers_too_large": "the safetensors headers exceed {limit:,} bytes in all (the "
                                    "limit of one checkpoint)",
    "checkpoint.too_large": "'{path}': the tensors' bytes exceed {limit:,} (8 PiB), more than any "
                            "checkpoint holds",
    "checkpoint.bad_total": "'{path}': metadata.total_size {value} is not a whole number of bytes "
                            "from 0 to {limit:,}",
    "checkpoint.bad_shard": "'{path}' names the shard {name}: a shard must be a plain *.safetensors "
                            "file name (no '/', '..', leading '.' or control character)",
    "checkpoint.missing_shard": "'{path}' names {count} shard(s) not in the folder, the first "
                                "'{name}'",
    "checkpoint.too_many_files": "'{path}' holds more than {limit:,} *.safetensors files (the "
                                 "limit of one checkpoint)",
    "checkpoint.index_too_large": "model.safetensors.index.json is {size:,} bytes; the limit is "
                                  "{limit:,} bytes",
    "checkpoint.too_many_uploads": "{count} files uploaded at once; the limit is {limit:,} "
                                   "(the index and the shards' headers)",
    "checkpoint.uploads_too_large": "the uploaded headers are {size:,} bytes in all; the limit is "
                                    "{limit:,} bytes per upload",
    "hub.unavailable": "the Hugging Face Hub could not be reached for '{repo}' ({detail}); the "
                       "rest of the page is unchanged",
    "hub.unauthorized": "the Hugging Face Hub refused '{repo}' ({detail}); set HF_TOKEN for gated "
                        "or private repositories",
    "hub.not_installed": "reading Hub ids needs the optional package huggingface_hub "
                         "(pip install huggingface_hub)",
    "hub.bad_id": "'{repo}' is not a Hub model id (expected org/name)",
    "hub.too_many_shards": "'{repo}': the index names {count} shards; kvplan reads at most "
                           "{limit:,}",
    "hub.header_too_large": "'{repo}': the header of {name} is {size:,} bytes; the limit is "
                            "{limit:,} bytes per header",
    "hub.timeout": "'{repo}': reading config.json and the headers took more than {limit} s "
                   "(the limit of one fetch)",
    # names and choices
    "unknown.model": "no preset is the checkpoint '{value}'{hint} (`python -m kvplan models` lists "
                     "them). To plan another model, supply its config.json: paste or upload it "
                     "in the dashboard, `--config config.json`, `--checkpoint DIR` (a local "
                     "checkpoint) or `--hf-id org/name` (online)",
    "unknown.gpu": "unknown accelerator '{value}' (try `python -m kvplan gpus`)",
    "unknown.dtype": "unknown dtype '{value}'; choose one of: {choices}",
    "unknown.engine": "unknown engine '{value}'; choose one of: {choices}",
    "unknown.release": "kvplan does not model {engine} release '{value}'; choose one of: {choices}",
    "reserve.term": "this engine's runtime reserve has no term '{value}'; its terms: {choices}",
    "unknown.scenario": "unknown scenario '{value}'",
    # numbers
    "value.range": "{field} must be between {low:,} and {high:,}, got {value}",
    "value.not_number": "{field} must be a number, got {value}",
    "value.deprecated_conflict": "{old} (deprecated) contradicts {flag}; give only {flag}",
    "parallel.tp_heads": "tensor parallel size {tp} does not split {heads} KV heads (the engine "
                         "needs kv_heads % tp == 0, or tp % kv_heads == 0 when tp > kv_heads)",
    "parallel.pp_layers": "pipeline parallel size {pp} exceeds the {layers} layers of the model",
    "offload.engine": "offload backend '{backend}' runs under {need}, not {engine}: choose --engine {need}",
    "offload.size": "offload backend '{backend}': {flag} must be a positive size",
    "offload.whole_gb": "--hicache-size is a whole number of GB in SGLang, got {value}",
    "offload.chunk": "the offload chunk of {value} tokens is not a multiple of the GPU block of {block} "
                     "tokens (vLLM build_offloading_config): use {use}",
    "offload.hybrid": "{tier}: kvplan sizes this tier for models with one KV-cache group of full or "
                      "MLA attention; this model has {groups} groups",
    "offload.no_kv": "{tier}: the model has no attention layer whose KV could be stored",
    "offload.dtype": "{tier}: KV dtype {dtype} has no whole-byte element, which the tier stores",
    "offload.host_ram": "{tier} pins {need:,} B of host memory, more than {what} ({ram:,} B entered): "
                        "a smaller tier, or more host RAM",
    "disagg.prompt": "the decode instance's KV pool ({blocks:,} blocks) cannot hold one {prompt:,}-token "
                     "prompt ({need:,} blocks): a larger decode pool (more GPUs, TP) or a shorter prompt",
    "disagg.connector": "unknown KV connector '{value}' (known: {known})",
    "disagg.engine": "disaggregated prefill/decode is modelled for vLLM's connectors; the {side} instance "
                     "runs {engine}",
    "parallel.gpus": "the GPU count {gpus} is not a multiple of tp × pp = {tpp}: use {need} GPUs, "
                     "or a TP × PP that divides {gpus}",
    "lora.release": "--enable-lora: kvplan sizes vLLM's LoRA slots from vLLM 0.33's vllm/lora; "
                    "{release} is not modelled (choose --engine-version 0.33)",
    "lora.rank": "--max-lora-rank {value} is not a rank {release} allows (vllm/config/lora.py "
                 "MaxLoRARanks: {choices})",
    "lora.sharded": "--fully-sharded-loras splits the LoRA rank {rank} and the hidden size {hidden} over "
                    "tp {tp}, which must divide both (vllm/distributed/utils.py divide)",
    "lora.architecture": "--enable-lora: kvplan knows which vocabulary modules vLLM 0.33 wraps for "
                         "{choices}; not for {value}",
    "lora.cpu": "--max-cpu-loras {cpu} must be at least --max-loras {gpu} (vllm/config/lora.py)",
    "lora.vocab": "--enable-lora: the vocabulary of {vocab} tokens exceeds vLLM's LoRA limit of "
                  "{limit} (LogitsProcessorWithLoRA)",
    "lora.model": "--enable-lora: kvplan sizes LoRA slots for dense attention decoders; {model} has "
                  "{what}, whose LoRA wrappers it does not model",
    # several engines on one GPU (kvplan.instances, `kvplan share`)
    "instances.none": "kvplan share: give at least one --instance",
    "instances.too_many": "kvplan share: {count} instances; at most {limit} share one GPU",
    "instances.duplicate": "kvplan share: the instance name '{name}' is given twice",
    "instances.gpu": "instance '{name}' is on {gpu} but '{first}' is on {first_gpu}: instances share "
                     "one accelerator",
    "instances.layout": "instance '{name}' has another TP × PP or GPU count than '{first}': instances "
                        "share one layout",
    "instances.shares": "the instances' shares of the whole device sum to {total}, more than the "
                        "device ({shares}: vLLM's gpu_memory_utilization is a share of the total)",
    "instances.bad": "--instance {text}: {why} (KEY=VALUE,…: name, model, engine, gu, tokens, "
                     "users, kd)",
    "lora.vllm_module": "--lora-target-modules {value} is not a module kvplan sizes vLLM's LoRA "
                        "slots for ({choices}; lora/utils.py is_in_target_modules)",
    "lora.sglang_module": "--lora-target-modules {value} is not a module SGLang normalizes to for a "
                          "dense decoder (lora/utils.py get_normalized_target_modules: {choices})",
    "spec.json": "--speculative-config is not a JSON object: {detail}",
    "spec.key": "--speculative-config: key '{key}' is not one kvplan reads ({keys})",
    "spec.tp_key": "--speculative-config: 'tensor_parallel_size' is not a valid key; pass "
                   "'draft_tensor_parallel_size' (vllm/config/speculative.py _verify_args)",
    "spec.type": "--speculative-config: '{key}' must be {expected}, got {value}",
    "spec.release": "--speculative-config: kvplan sizes speculative decoding from the releases' "
                    "vllm/config/speculative.py and v1/spec_decode it read (ngram and suffix from "
                    "v0.18, every method in v0.33); {release} is not modelled (choose "
                    "--engine-version 0.33)",
    "spec.method": "--speculative-config: method '{method}' is not one {release} supports as kvplan "
                   "models it ({choices})",
    "spec.unmodelled": "--speculative-config: method '{method}' exists in vLLM 0.33 but kvplan does "
                       "not size it (it sizes {choices})",
    "spec.no_model": "--speculative-config: method '{method}' needs 'model' (the draft model or EAGLE "
                     "head)",
    "spec.no_tokens": "--speculative-config: method '{method}' needs 'num_speculative_tokens' "
                      "(vllm/config/speculative.py _verify_args)",
    "spec.draft": "--speculative-config: model '{model}' is neither a kvplan preset nor a directory "
                  "or file with its config.json ({why})",
    "spec.draft_tp": "--speculative-config: draft_tensor_parallel_size {value} must be 1 or the "
                     "target's tensor parallel size {tp} (speculative.py _verify_and_get_draft_tp)",
    "spec.vocab": "--speculative-config: the draft model {draft} has a vocabulary of {vocab} tokens, "
                  "the target {target} {target_vocab}; vLLM requires them equal "
                  "(verify_equal_vocab_size_if_draft_model)",
    "spec.hidden": "--speculative-config: the EAGLE head {draft} has hidden size {hidden}, the target "
                   "{target} {target_hidden}; the head reads the target's hidden states, which must "
                   "match",
    "spec.mtp_model": "--speculative-config: method 'mtp' drafts with the target's next-n layers; "
                      "kvplan reads them for model_type {choices}, not {model_type} ({model})",
    "spec.mtp_layers": "--speculative-config: method 'mtp': {model} has no next-n layers "
                       "(num_nextn_predict_layers is 0 or absent)",
    "spec.mtp_divisible": "--speculative-config: num_speculative_tokens {k} must be a multiple of the "
                          "{n} next-n layers (speculative.py: 'must be divisible by n_predict')",
    "spec.mtp_draft": "--speculative-config: method 'mtp' with a separate model '{model}' is not "
                      "modelled by kvplan (omit 'model' to use the target's own next-n layers)",
    "spec.lookup": "--speculative-config: prompt_lookup_min={low} must be <= prompt_lookup_max={high} "
                   "(vllm/config/speculative.py, ngram)",
    "spec.mamba_all": "--speculative-config with {model}: its Mamba states are cached per block "
                       "(mamba_cache_mode 'all', prefix caching on), where kvplan does not model the "
                       "draft tokens' state pages; turn prefix caching off (--no-enable-prefix-caching)",
    "spec.pp": "--speculative-config: kvplan places the drafter ({method}) with pipeline parallel "
               "size 1 only; pp {pp} is not modelled",
    "sgl_spec.unknown": "--speculative-algorithm '{algorithm}': {release} has no such algorithm "
                        "(\"Unknown speculative algorithm name\", speculative/spec_info.py "
                        "from_string); kvplan sizes {choices}",
    "sgl_spec.release": "--speculative-algorithm {algorithm}: kvplan sizes SGLang's speculative "
                        "decoding from SGLang 0.5.23's code (speculative/, mem_cache/, "
                        "model_executor/); {release} budgets drafts by other rules (sgl-project/"
                        "sglang PR#23862) and is not modelled (choose --engine-version 0.5.23)",
    "sgl_spec.unmodelled": "--speculative-algorithm {algorithm} exists in SGLang 0.5.23 but kvplan "
                           "does not size it (it sizes {choices})",
    "sgl_spec.no_draft": "--speculative-algorithm {algorithm} needs --speculative-draft-model-path for "
                         "{model} ({architecture}): SGLang drafts from the target's own checkpoint "
                         "only for the DeepSeek/GLM/Bailing/… architectures of _handle_eagle_family",
    "sgl_spec.no_nextn": "--speculative-algorithm {algorithm} drafts with {model}'s next-n (MTP) "
                         "layers, but its config has no num_nextn_predict_layers; give "
                         "--speculative-draft-model-path",
    "sgl_spec.vocab": "--speculative-algorithm STANDALONE: the draft {draft} has a vocabulary of "
                      "{vocab} tokens, the target {target} {target_vocab}; the target verifies the "
                      "draft's token ids, which must be the same vocabulary",
    "sgl_spec.hidden": "--speculative-algorithm EAGLE: the head {draft} has hidden size "
                       "{hidden}, the target {target} {target_hidden}; the head reads the target's "
                       "hidden states, which must match",
    "sgl_spec.dp": "--speculative-algorithm {algorithm} does not support DP attention in SGLang "
                   "0.5.23 (speculative_hook.py)",
    "sgl_spec.params": "--speculative-eagle-topk / --speculative-num-draft-tokens need "
                       "--speculative-num-steps (speculative_hook.py _handle_eagle_family asserts "
                       "they are unset when the steps are chosen automatically)",
    "sgl_spec.trtllm_topk": "--speculative-eagle-topk {topk} on {gpu}: SGLang's default attention "
                            "backend there, trtllm_mha, \"only supports topk = 1 for speculative "
                            "decoding\" (speculative_hook.py _handle_eagle_family); set "
                            "--speculative-num-steps N --speculative-eagle-topk 1",
    "sgl_spec.pool": "speculative decoding on {model}: kvplan does not model SGLang's draft KV for "
                     "{why}",
    "trt_spec.key": "speculative_config: key '{key}' is not one kvplan reads for TensorRT-LLM "
                    "({keys})",
    "trt_spec.type": "speculative_config: '{key}' must be {expected}, got {value}",
    "trt_spec.decoding_type": "speculative_config: decoding_type {value} is not one kvplan sizes "
                              "for TensorRT-LLM ({choices}; llmapi/llm_args.py)",
    "trt_spec.unmodelled": "speculative_config: decoding_type {decoding_type} exists in "
                           "TensorRT-LLM but kvplan does not size it (sized: {choices})",
    "trt_spec.max_draft_len": "speculative_config: max_draft_len must be > 0 for {decoding_type} "
                              "(llmapi/llm_args.py)",
    "trt_spec.no_model": "speculative_config: decoding_type {decoding_type} needs "
                         "speculative_model (the draft or EAGLE3 head: a kvplan preset or a "
                         "directory with its config.json; llmapi/llm_args.py)",
    "trt_spec.vocab": "speculative_config: decoding_type Draft_Target: the draft {draft} has a "
                      "vocabulary of {vocab} tokens, the target {target} {target_vocab}; the target "
                      "verifies the draft's token ids, which must be the same vocabulary",
    "trt_spec.no_mtp": "speculative_config: decoding_type MTP drafts with {model}'s next-n layers, "
                       "and its config has no num_nextn_predict_layers",
    "trt_spec.mtp_two_model": "speculative_config: mtp_eagle_one_model false (the deprecated "
                              "two-model MTP-Eagle) is not modelled by kvplan",
    "trt_spec.pp": "speculative_config with pipeline parallel size {pp}: kvplan does not model "
                   "TensorRT-LLM's spec layers on the last PP rank (resource_manager.py "
                   "get_pp_layers)",
    "trt_spec.hybrid": "speculative_config with {model}: kvplan does not model TensorRT-LLM's "
                       "draft KV beside Mamba / linear-attention state",
    "trt_spec.vswa": "speculative_config with {windows} attention window sizes: TensorRT-LLM's V1 "
                     "VSWA pools split the budget between target and draft (PR #12855; before it "
                     "each took the whole budget); kvplan does not model draft KV there",
    "trt_spec.release": "speculative_config: kvplan sizes TensorRT-LLM speculative decoding from "
                        "the main-branch code it read; {release} is not modelled (choose the "
                        "release main)",
    "parallel.ep": "expert parallel size {ep} must divide the tensor parallel size {tp} (experts "
                   "are split over ep ranks, their intermediate size over tp / ep)",
    "engine.dtype": "engine '{engine}' cannot store the KV cache as {dtype}: {why}",
    "engine.unserved": "{engine} ({release}) does not serve {architecture}: {why}",
    # links and uploads
    "link.unknown_key": "link parameter {key} is not known and was ignored",
    "link.bad_value": "link parameter '{key}'={value} was not used: {why}",
    "link.repeated": "link parameter '{key}' is given {count} times; none of its values was used",
    "link.alias": "link parameter '{key}'={value} was read as {canonical}",
    "link.gpus_raised": "link parameter '{key}'={value} needs tp × pp = {need} GPUs; the GPU "
                        "count was set to {need}",
    "link.future_version": "this link was made by a newer kvplan (schema v{value}); "
                           "parameters this version does not know were ignored",
    "scenario.invalid": "scenario file is invalid: {detail}",
    "scenario.too_large": "scenario file is {size:,} bytes; the limit is {limit:,} bytes",
    "csv.invalid": "request-length CSV is invalid: {detail}",
    "csv.too_large": "request-length CSV is {size:,} bytes; the limit is {limit:,} bytes",
    "file.missing": "cannot read '{path}': {detail}",
    "file.not_regular": "cannot read '{path}': it is {kind}, not a regular file",
    "file.not_writable": "cannot write to '{path}': {detail}",
    "file.not_directory": "cannot write to '{path}': it is a file, not a directory (give a directory "
                          "for the report)",
    "link.too_deep": "nested deeper than {limit} levels",
    "link.config_too_large": "the packed config unpacks to more than {limit:,} bytes (the upload limit)",
    "gpu.custom": "accelerator '{value}': {why} (custom:<GiB>[:<TB/s>[:<BF16 TFLOPS>]])",
    "gpu.custom_fields": "accelerator '{value}': {count} numbers given, one to three expected "
                         "(custom:<GiB>[:<TB/s>[:<BF16 TFLOPS>]])",
    # calibration against a vLLM log
    "calibrate.empty": "the vLLM log is empty",
    "calibrate.too_large": "the vLLM log is {size:,} bytes; the limit is {limit:,} bytes "
                           "(the start-up lines are enough)",
    "calibrate.not_text": "the vLLM log is not text ({detail})",
    "calibrate.no_lines": "no vLLM capacity line in the log (looked for 'Available KV cache memory', "
                          "'GPU KV cache size', 'Maximum concurrency for', '# GPU blocks')",
    "calibrate.engine": "calibration compares with vLLM's paged KV pool: {why}",
    "calibrate.bad_value": "the {engine} log's {field} is {value}; kvplan accepts {low:,} to {high:,}",
    "calibrate.not_finite": "the {engine} log's {field} is {value}, which is not a finite number "
                            "(infinite, NaN or beyond a 64-bit float); kvplan accepts {low:,} to {high:,}",
    "calibrate.no_engine_lines": "no {engine} capacity line in the log (looked for {looked})",
    "calibrate.other_model": "the log is not a run of {model} with these settings: {why}. The log "
                             "says: {said}",
    # views
    "view.no_gpu": "no accelerator in the catalogue runs this scenario ({why})",
    # recommending a deployment
    "recommend.empty": "no candidate to search: {detail}",
    "recommend.too_many": "{count} candidates is more than the {limit:,} the search allows; choose "
                          "fewer accelerators, splits or formats",
    "recommend.traffic": "traffic is empty: {detail}",
    "recommend.targets": "impossible latency targets: {detail}",
    "recommend.preset": "unknown target preset '{value}'; choose one of: {choices}",
    "recommend.calibrate": "cannot calibrate the efficiency factor: {detail}",
    "recommend.run": "cannot bound this run: {detail}",
    "prices.csv": "cannot read the price table: {detail}",
    "recommend.rate": "cannot simulate this request rate: {detail}",
    "recommend.none": "no candidate meets every constraint; the tightest is {constraint} ({passing} of "
                      "{count} candidates meet it): {best}",
    # a request's images (kvplan.multimodal)
    "mm.image_size": "image size {size}: {detail}",
    "mm.images": "{count} image(s) per request: {detail}",
    "mm.frames": "video of {count} frames: {detail}",
    "mm.videos": "{count} video(s) per request: {detail}",
    "mm.video_input": "{flag} {value}: {detail}",
    "mm.transport": "{flag} {value}: expected one of {choices}",
    "mm.limit_flag": "{flag} under {engine}: {detail}",
    "mm.kwargs": "--mm-processor-kwargs key {key} for {model}: {detail}",
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


#: Characters that start Markdown (and Streamlit's ``:color[…]``, ``:emoji:``, ``$math$``)
#: constructs; each is backslash-escaped (CommonMark: any ASCII punctuation may be).
_MARKDOWN = frozenset("\\`*_{}[]()<>#+-.!|~$:&@=^\"")
#: First characters a spreadsheet reads as a formula (OWASP "CSV injection").
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


#: What GitHub-flavoured Markdown turns into a link by itself (``https://…``, ``www.…``, e-mail
#: addresses; ``@host.tld`` without a local part too, to be safe): Streamlit finds these in the
#: text after escapes are resolved, so they are shown as code spans instead. The span stops at
#: quotes, brackets and parentheses (a link cannot start after them), never includes a backtick,
#: so a one-backtick fence always closes it.
_AUTOLINK = re.compile(r"(?i)(?:https?://|www\.)[^\s'\"<>()\[\]`]*|[-.\w+]*@[-\w]+(?:\.[-\w]+)+")


def md(value: object) -> str:
    """User text for Streamlit Markdown: one printable line, every Markdown character escaped, so
    ``![a](https://…)``, ``[click](…)``, ``**x**`` or ``:red[x]`` show as typed (st.markdown,
    st.warning, st.caption, … render Markdown); bare addresses become code spans (``_AUTOLINK``)."""
    text = "".join(ch if ch.isprintable() else "?" for ch in " ".join(str(value).splitlines()))
    out, last = [], 0
    for match in _AUTOLINK.finditer(text):
        out.append(_escape(text[last:match.start()]))
        out.append(f"`{match.group()}`")
        last = match.end()
    out.append(_escape(text[last:]))
    return "".join(out)


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def md_name(value: object) -> str:
    """An identifier (``max_requests``, ``fp8_e4m3``, ``h100-sxm``) as is — letters, digits and
    intraword ``_ . -`` form no Markdown construct — and anything else through ``md``."""
    text = str(value)
    return text if _NAME.fullmatch(text) else md(text)


def md_code(value: object) -> str:
    """User text as one inline code span: Markdown inside a span is shown as typed; a backtick
    (which would close it) becomes ``'`` and line breaks become spaces."""
    text = "".join(ch if ch.isprintable() else "?" for ch in " ".join(str(value).splitlines()))
    return f"`{text.replace('`', chr(39))}`"


_LINK_TARGET = re.compile(r"\?[A-Za-z0-9_.~,%=&-]*")


def md_link_target(target: str) -> str:
    """A target for a Markdown link ``[text](target)``: only a relative ``?query`` of
    percent-encoded characters (no parenthesis, space, quote or scheme); anything else is ``?``."""
    return target if _LINK_TARGET.fullmatch(target) else "?"


def _escape(text: str) -> str:
    return "".join(f"\\{ch}" if ch in _MARKDOWN else ch for ch in text)


def plotly_text(value: object) -> str:
    """User text for plotly figure text (titles, labels): plotly renders ``<span style>``, ``<a>``,
    ``<br>``; escaped entities show as typed."""
    import html

    return html.escape(str(value), quote=False)


def csv_cell(value: object) -> object:
    """A table cell for CSV export: text beginning with ``=``, ``+``, ``-``, ``@``, tab or CR gets a
    leading ``'`` so a spreadsheet shows it instead of evaluating it (OWASP CSV injection rule);
    numbers, including negative ones, are kept as numbers."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def is_plain_int(text: str, max_digits: int = 18, signed: bool = False) -> bool:
    """ASCII digits only (``'²'.isdigit()`` is True in Python), at most ``max_digits`` of them."""
    body = text[1:] if signed and text[:1] == "-" else text
    return body.isascii() and body.isdigit() and len(body) <= max_digits
