"""Score segments with COMET, in the Python environment that has unbabel-comet.

Contract: run as a script (``python comet_worker.py``), never imported by mlx-ssbd: unbabel-comet
needs transformers < 5 and mlx-lm needs transformers >= 5.7, so COMET lives in an environment of
its own and ``scorers.Comet`` talks to this script over a pipe. Reads one JSON object from stdin,
``{"model", "batch_size", "progress", "segments": [{"src", "mt", "ref"}]}``, where ``model`` is a
local checkpoint (``.../checkpoints/model.ckpt``) or a hub name; writes ``{"scores": [...]}`` (one
per segment, in order) to stdout, or ``{"error": "..."}`` and exits 1. unbabel-comet's progress
bar and logs go to stderr. Uses only the standard library and unbabel-comet.
"""

import contextlib
import json
import os
import sys


def score(request: dict) -> list[float]:
    try:
        from comet import download_model, load_from_checkpoint
    except ImportError as error:
        raise RuntimeError(f"unbabel-comet is not installed for {sys.executable} ({error})") from error
    checkpoint = request["model"]
    if not os.path.isfile(checkpoint):
        if checkpoint.endswith(".ckpt"):
            raise RuntimeError(f"COMET checkpoint {checkpoint!r} not found")
        try:
            checkpoint = download_model(checkpoint)
        except Exception as error:  # offline, unknown name, gated
            raise RuntimeError(
                f"COMET model {request['model']!r} could not be downloaded ({type(error).__name__}): give a local "
                "checkpoint (path/to/checkpoints/model.ckpt, with hparams.yaml beside the checkpoints folder) "
                "or run where the Hugging Face hub is reachable"
            ) from error
    model = load_from_checkpoint(checkpoint)
    predicted = model.predict(
        request["segments"],
        batch_size=request.get("batch_size", 16),
        gpus=0,
        progress_bar=request.get("progress", True),
    )
    return [float(s) for s in predicted.scores]


def main() -> int:
    out = sys.stdout
    try:
        with contextlib.redirect_stdout(sys.stderr):  # progress bars and logs stay off the answer
            result = {"scores": score(json.load(sys.stdin))}
    except Exception as error:
        json.dump({"error": str(error)}, out)
        return 1
    json.dump(result, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
