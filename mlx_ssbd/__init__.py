"""mlx-ssbd: streaming LLM re-translation with Self-Speculative Biased Decoding on MLX.

Import this before ``mlx.core``: ``platform.backend`` loads an optimized BLAS (and the sgemv shim
that ``pip install`` built) before ``mlx.core`` is first imported. Importing compiles nothing and
writes nothing.
"""

from .platform import backend  # noqa: F401  (must come first)

# isort: split
from .live.methods import (
    DEFAULT_BETA,
    DEFAULT_METHOD,
    DEFAULT_POLICY,
    METHODS,
    POLICIES,
    SPEECH_METHOD,
    TranslatorConfig,
    method_config,
)
from .live.multistream import MultiStreamTranslator
from .live.records import Update, UpdateStats
from .live.segmenter import SegmenterConfig
from .live.session import CaptionCommit, CaptionUpdate, LiveSession, SessionError
from .live.source import SourcePartial
from .live.translator import StreamTranslator, stream_translate, translate
from .platform.info import backend_info

__version__ = "0.1.0"

__all__ = [
    "CaptionCommit",
    "CaptionUpdate",
    "LiveSession",
    "MultiStreamTranslator",
    "SegmenterConfig",
    "SessionError",
    "DEFAULT_BETA",
    "DEFAULT_METHOD",
    "DEFAULT_POLICY",
    "METHODS",
    "POLICIES",
    "SPEECH_METHOD",
    "SourcePartial",
    "StreamTranslator",
    "TranslatorConfig",
    "Update",
    "UpdateStats",
    "backend_info",
    "method_config",
    "stream_translate",
    "translate",
]
