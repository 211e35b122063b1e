"""The method table and a translator's settings.

Contract: ``METHODS`` is the one table of method names: each is a policy (the per-update decision
rule: ``rt``, ``rt-nocache``, ``ssbd``, ``cd``; ``POLICIES``) plus features, with a one-line
description used by the CLI's help, the bias it runs with by default, and whether it is for research
(``USER_METHODS`` are the others: ``rt``, ``ssbd``, ``ssbd-final0``, ``ssbd-steady``). The method ``ssbd`` is the
policy plus rejoining the old draft after a divergence (``REJOIN``) and committing each segment
at a smaller bias (``COMMIT_BETA``; into the languages of ``COMMIT_BETAS`` at theirs) unless its final
source repeats the last live one, which it commits as shown (``commit_shown``); ``ssbd-plain`` is
the policy alone, the paper's rule.
``DEFAULT_METHOD`` is the CLI's, the service's and ``StreamTranslator``'s; ``SPEECH_METHOD``
is for captions of speech: ``listen``'s, the speaker page's for a microphone or a recording, and
the service's for a session that speech starts without a method named. ``TranslatorConfig``
holds every setting of a ``translator.StreamTranslator`` and checks them (``ValueError`` naming
the bad value); ``method_config(name, **settings)`` is the config of a method name.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.lookahead import Lookahead
from ..engine.verify import DEFAULT_RULE, accept_threshold, bounds
from .languages import language_name

DEFAULT_BETA = 0.2  # the paper's, for its mixture rule
# The default's bias when it commits a segment: with the default prompt its committed captions
# scored within 0.5 chrF++ of RT's on the dev talk at 0.1 and 0.15 (at 0.2: -0.8), within this
# machine's noise of each other in speed; the smaller was chosen (benchmarks/quality/accept_rules.py;
# docs/how-it-works.md)
COMMIT_BETA = 0.1
# ... but where a language's committed captions at COMMIT_BETA fell short of RT's on its own dev
# talk, the smaller bias of the commit sweep (0.05, 0) that kept them within 0.5 chrF++ of RT's
# (benchmarks/quality/accept_rules.py, the commit-beta-LANG steps; docs/how-it-works.md)
COMMIT_BETAS = {"zh": 0.0}  # ssbd-steady's too: at its live beta it lost 4.6 chrF++ on the Chinese dev talk
# the ratio rule's: its speed and flicker nearest the mixture's at 0.2 (benchmarks/quality/accept_rules.py)
RATIO_BETA = 0.8


@dataclass(frozen=True)
class Method:
    """A decoding method by name: its policy (the per-update decision rule, one of the four base
    methods), the lookahead features it turns on, what it is (for help texts), the bias it runs
    with unless told another, and whether it is for research (a baseline, or an experiment the
    project's measurements found no better than ``ssbd`` here: docs/results.md)."""

    policy: str
    about: str
    features: tuple[tuple[str, object], ...] = ()
    beta: float = DEFAULT_BETA
    research: bool = False

    @property
    def help(self) -> str:
        return f"{self.about}{' (research)' if self.research else ''}"

    def settings(self) -> dict:
        return {"policy": self.policy, **dict(self.features)}


# After a divergence the output often rejoins the old draft a few words later (a different word
# early, the same tail): proposing the draft's rest there saved 4-7% of the passes and 3-4% of the
# time on both talks, the committed captions no worse (benchmarks/quality/accept_rules.py; for
# ssbd-final0, whose beta-0 commit diverges more often, 9-10% of the passes). Anchoring it on the
# output's last token too, where its last two do not occur once in the draft's rest, saved 2-5% more
# of the passes but changed committed captions on the held-out talk (chrF++ up to 0.6 lower; "What
# anchors a rejoin" in docs/results.md): the default keeps the two-token anchor.
REJOIN = Lookahead(resync=True)

# The default's features: rejoining, and commits less biased than live updates, but where the
# final source repeats the last live one (real ASR partials: 7 of 21 finals on the dev talk, 15 of
# 23 on the held-out one) the caption on screen is committed as it stands: less flicker and time,
# committed captions no further from RT's there (benchmarks/quality/accept_rules.py;
# docs/how-it-works.md). Sentences revealed a few words at a time never repeat a source at the end.
LANGUAGE_COMMITS = ("final_betas", tuple(sorted(COMMIT_BETAS.items())))  # the default's and ssbd-steady's
DEFAULT_FEATURES = (
    ("lookahead", REJOIN),
    ("final_beta", COMMIT_BETA),
    LANGUAGE_COMMITS,
    ("commit_shown", True),
)


def commit_exceptions() -> str:
    """``COMMIT_BETAS`` in words, for a help text: ``0 into Chinese``."""
    return ", ".join(f"{beta:g} into {language_name(lang)}" for lang, beta in sorted(COMMIT_BETAS.items()))


# The one vocabulary of methods (CLI, bench, ``method_config``).
METHODS = {
    "rt": Method("rt", "re-translate each update, reusing the KV of the prompt and source prefix"),
    "rt-nocache": Method(
        "rt-nocache", "re-translate each update from an empty cache (naive reference)", research=True
    ),
    "ssbd": Method(
        "ssbd",
        f"verify the previous output as a draft with bias beta (at most {COMMIT_BETA:g} when a commit brings "
        f"new source words, {commit_exceptions()}), "
        "decode on where it diverges and rejoin the draft where the output meets it again",
        DEFAULT_FEATURES,
    ),
    "cd": Method(
        "cd", "continuous decoding: keep every draft, only extend (ssbd with beta = 1)", research=True
    ),
    "ssbd-plain": Method(
        "ssbd",
        "the paper's ssbd: decode on where the draft diverges, never rejoining it, committing with the same beta",
        research=True,
    ),
    "ssbd-ngram": Method(
        "ssbd",
        "ssbd, proposing source n-gram continuations too",
        (("lookahead", Lookahead(resync=True, ngram_drafts=True)), ("final_beta", COMMIT_BETA)),
        research=True,
    ),
    "ssbd-pool": Method(
        "ssbd",
        "ssbd-plain with 2-token n-gram guesses from the source and the session's earlier outputs, "
        "checked at beta 0 (the output is ssbd-plain's)",
        (("lookahead", Lookahead(ngram_drafts=True, history_drafts=True, ngram_len=2, ngram_beta=0.0)),),
        research=True,
    ),
    "ssbd-ratio": Method(
        "ssbd",
        "ssbd keeping a draft token while the model gives it at least (1 - beta) of its "
        "top choice's probability",
        (("accept_rule", "ratio"), ("lookahead", REJOIN)),
        beta=RATIO_BETA,
        research=True,
    ),
    "ssbd-final0": Method(
        "ssbd",
        "ssbd, committing with beta = 0 (what RT commits)",
        (("final_beta", 0.0), ("lookahead", REJOIN)),
    ),
    "ssbd-steady": Method(
        "ssbd",
        f"ssbd, committing with the live beta ({commit_exceptions()}): the least flicker and lag, committed "
        "text further from RT's",
        (("lookahead", REJOIN), LANGUAGE_COMMITS),
    ),
}
POLICIES = tuple(dict.fromkeys(method.policy for method in METHODS.values()))
USER_METHODS = tuple(name for name, method in METHODS.items() if not method.research)
DEFAULT_POLICY = "ssbd"
DEFAULT_METHOD = "ssbd"  # of the CLI, the service and a StreamTranslator given no config: the
# paper's rule at beta 0.2 rejoining its draft and committing new words at beta 0.1, whose committed
# captions are RT's quality with less flicker than RT's on the talk sets and their real ASR
# partials, where ssbd-steady flickers least (benchmarks/quality/accept_rules.py; docs/how-it-works.md)
# For captions of speech: on both talks' real ASR partials (espeak-ng through the streaming Whisper)
# ssbd-steady ran faster than ssbd, flickered less, committed earlier and scored nearer RT's chrF++
# (benchmarks/quality/accept_rules.py, the asr-partials steps; docs/how-it-works.md)
SPEECH_METHOD = "ssbd-steady"
DEFAULT_MAX_TOKENS_RATIO = 3.0  # output budget per source token
DEFAULT_MIN_MAX_TOKENS = 16
DEFAULT_AGREEMENT = 2  # LocalAgreement-2, when stable text is asked for
DEFAULT_GLOSSARY_TOKENS = 256  # glossary entries named in one prompt, at most (a talk's few terms fit easily)


@dataclass(frozen=True)
class TranslatorConfig:
    """Decoding settings of a ``StreamTranslator``. The defaults are the paper's SSBD (the mixture
    rule at beta 0.2, no lookahead: ``ssbd-plain``); ``method_config()`` gives the product's default
    method (``DEFAULT_METHOD``, which rejoins the draft).

    Attributes:
        policy: one of ``POLICIES``. Default ``"ssbd"``.
        beta: bias towards the draft in [0, 1] (ssbd only). Default 0.2.
        draft_mask_k: tokens dropped from the end of the draft. Default 0.
        display_mask_k: tokens hidden from the display while not final. Default 0.
        max_tokens_ratio, min_max_tokens: output bound = max(min, ceil(ratio * source tokens)).
        stop_on_newline: end the output at a token containing a newline (captions are one line).
        cut_loops: end an output that falls into a decoding loop, one copy of the repeated block
            kept (``engine.stops.loop_cut``). Default True.
        lookahead: proposals checked while decoding (rejoining the draft, n-gram pools), an
            ``engine.lookahead.Lookahead``; None (the default): none.
        final_beta: beta for the final (committed) update of a segment, at most ``beta`` (so
            that beta 0 is RT throughout); None: ``beta``. With 0 the committed text is exactly
            what RT commits (a bad early draft cannot be locked in), while live updates keep the
            fast biased drafts.
        final_betas: ``(language, beta)`` pairs: into these target languages (ISO 639-1 codes) a
            final update is checked at that beta instead of ``final_beta`` (again at most
            ``beta``). Default none. ``method_config`` drops them where ``final_beta`` is given.
        commit_shown: a final update whose source repeats the last live update's (an ASR that
            confirms the words it showed) commits that update's output as it stands, with no pass
            at ``final_beta``: the viewer has read it, and the source brought nothing new.
            Default False (every final is checked at ``final_beta``).
        temperature: 0 for greedy decoding; > 0 samples (biased speculative sampling for drafts).
        top_p: nucleus mass kept when sampling. seed: the sampler's PRNG seed.
        agreement: lock a token once it stood in this many consecutive outputs of a segment
            (LocalAgreement-n; see the module docstring). 0: nothing is locked before the commit.
        context_tokens: token budget for earlier committed segments kept in the prompt; 0: none.
        glossary_tokens: token budget for the glossary entries named in one prompt: the hits, in
            the order they occur in the source, as many as fit. Default 256.
        accept_rule: how beta biases the verify step (``engine.verify.RULES``): ``mixture`` (the
            paper's biased distribution) or ``ratio`` (accept while p[y] >= (1 - beta) max p).
            Greedy decoding only for ``ratio``.
    """

    policy: str = DEFAULT_POLICY
    beta: float = DEFAULT_BETA
    draft_mask_k: int = 0
    display_mask_k: int = 0
    max_tokens_ratio: float = DEFAULT_MAX_TOKENS_RATIO
    min_max_tokens: int = DEFAULT_MIN_MAX_TOKENS
    stop_on_newline: bool = True
    cut_loops: bool = True
    lookahead: Lookahead | None = None
    final_beta: float | None = None
    final_betas: tuple[tuple[str, float], ...] = ()
    commit_shown: bool = False
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    agreement: int = 0
    context_tokens: int = 0
    glossary_tokens: int = DEFAULT_GLOSSARY_TOKENS
    accept_rule: str = DEFAULT_RULE

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r}; known: {', '.join(POLICIES)}")
        bounds(self.accept_rule, self.beta)  # validates the rule and beta's range
        if self.final_beta is not None:
            accept_threshold(self.final_beta)
        for pair in self.final_betas:
            if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str)):
                raise ValueError(f"final_betas must be (language, beta) pairs, got {pair!r}")
            if pair[0] != pair[0].strip().lower():  # beta_for looks a target up so: it would never match
                raise ValueError(f"final_betas' languages are lowercase ISO 639-1 codes, got {pair[0]!r}")
            accept_threshold(pair[1])
        if self.accept_rule != "mixture" and self.temperature > 0:
            raise ValueError(f"the {self.accept_rule} rule verifies greedy decoding only (temperature 0)")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        for name in (
            "draft_mask_k",
            "display_mask_k",
            "agreement",
            "context_tokens",
            "glossary_tokens",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")

    @property
    def effective_beta(self) -> float:
        """The bias actually applied: 1 for cd, beta for ssbd, 0 (exact greedy) for rt."""
        return {"cd": 1.0, "ssbd": self.beta}.get(self.policy, 0.0)

    def beta_for(self, final: bool, target: str = "") -> float:
        """The bias of one update into ``target``: on a final ssbd update ``final_betas``'s for that
        language, else ``final_beta`` if set, at most ``beta``."""
        if final and self.policy == "ssbd":
            final_beta = dict(self.final_betas).get(target.strip().lower(), self.final_beta)
            if final_beta is not None:
                return min(final_beta, self.beta)
        return self.effective_beta

    @property
    def uses_draft(self) -> bool:
        return self.policy in ("ssbd", "cd")


def method_config(method: str = DEFAULT_METHOD, *, beta: float | None = None, **settings) -> TranslatorConfig:
    """The ``TranslatorConfig`` for a method name of ``METHODS`` plus other settings, which take the
    place of the method's own (``lookahead=None`` turns its proposals off); ``beta`` None: the
    method's own (``Method.beta``). A ``final_beta`` given holds in every language (the method's
    ``final_betas`` dropped, unless those are given too)."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
    if "final_beta" in settings:
        settings.setdefault("final_betas", ())
    named = METHODS[method]
    return TranslatorConfig(**{**named.settings(), "beta": named.beta if beta is None else beta, **settings})
