"""mlx-ssbd: streaming LLM re-translation with Self-Speculative Biased Decoding on MLX.

Import order matters: ``backend`` loads an optimized BLAS before ``mlx.core`` is first imported.
"""

from . import backend  # noqa: F401  (must come first)
from .backend import backend_info
from .live.multistream import MultiStreamTranslator
from .live.segmenter import SegmenterConfig
from .live.session import CaptionCommit, CaptionUpdate, LiveSession, SessionError
from .live.translator import (
    DEFAULT_BETA,
    DEFAULT_POLICY,
    METHODS,
    POLICIES,
    SourceUpdate,
    StreamTranslator,
    TranslatorConfig,
    Update,
    UpdateStats,
    method_config,
    stream_translate,
    translate,
)

__version__ = "0.1.0"

__all__ = [
    "CaptionCommit",
    "CaptionUpdate",
    "LiveSession",
    "MultiStreamTranslator",
    "SegmenterConfig",
    "SessionError",
    "DEFAULT_BETA",
    "DEFAULT_POLICY",
    "METHODS",
    "POLICIES",
    "SourceUpdate",
    "StreamTranslator",
    "TranslatorConfig",
    "Update",
    "UpdateStats",
    "backend_info",
    "method_config",
    "stream_translate",
    "translate",
]
