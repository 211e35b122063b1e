"""What a translator gives back for each update: the ``Update`` and its ``UpdateStats``, and the
``PendingUpdate`` between ``StreamTranslator.begin`` and ``finish``.

Contract: frozen dataclasses, no logic beyond ``UpdateStats.to_dict``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..engine import update as engine


@dataclass(frozen=True)
class UpdateStats:
    """What one update cost. Times are wall-clock seconds."""

    policy: str
    beta: float
    draft_tokens: int  # tokens offered for verification
    accepted: int  # leading draft tokens accepted
    decoded: int  # output tokens produced after the accepted prefix (incl. the verify token)
    output_tokens: int
    forward_passes: int  # model calls
    tokens_fed: int  # tokens sent through the model
    reused_tokens: int  # prompt/draft tokens whose KV came from the cache
    prefill_s: float  # prompt tail + verify pass
    decode_s: float
    wall_s: float
    cache_rebuilds: int  # untrimmable cache rebuilt (0 on a full KV cache)
    looped: int = 0  # 1: the output ended in a decoding loop, cut back to one copy (``stops.loop_cut``)
    resynced: int = 0  # tokens accepted by rejoining the old draft after a divergence
    ngram_accepted: int = 0  # tokens accepted from n-gram proposals (source, earlier outputs)
    proposals: int = 0  # lookahead proposals verified (each one forward pass)
    proposal_widths: tuple[int, ...] = ()  # tokens each of those passes fed (token and proposal)
    locked: int = 0  # stable tokens forced at the start of the output (see ``agreement``)
    unchanged: int = 0  # 1: same source as the last update, answered without a forward pass

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Update:
    """The translation after one source partial."""

    source: str
    output_ids: tuple[int, ...]
    output: str
    display: str  # what a viewer sees (display mask-k applied unless final)
    final: bool
    caption: int  # index of the caption (segment) within this translator's life
    stats: UpdateStats
    stable: str = ""  # text that will not change any more in this segment (all of it when final)
    unstable: str = ""  # the revisable rest: ``stable + unstable == display``


@dataclass(frozen=True)
class PendingUpdate:
    """An update between ``StreamTranslator.begin`` and ``finish``: its ``engine.Job`` (None when
    the source is unchanged and the last output stands) and when it began."""

    source: str
    final: bool
    prompt: object  # prompt.Prompt
    job: engine.Job | None
    start: float  # perf_counter()
