"""Live translation: text streams in, translation updates and captions out.

``translator`` (``StreamTranslator``: one stream's state across updates: draft, stable text,
context), ``multistream`` (many translators batched), ``prompt`` and ``languages`` (prompts),
``segmenter`` (automatic segments of never-final ASR partials) and ``session`` (``LiveSession``:
latest partial wins, captions and commits).
"""
