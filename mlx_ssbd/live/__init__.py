"""Live translation: text streams in, translation updates and captions out.

``source`` (what flows in: ``SourcePartial``, ``Word``), ``methods`` (the method table and
``TranslatorConfig``), ``translator`` (``StreamTranslator``: one stream's state across updates:
draft, stable text, context), ``records`` (what each update gives back), ``multistream`` (many
translators batched), ``prompt`` and ``languages`` (prompts), ``segmenter`` (automatic segments of
never-final ASR partials), ``session`` (``LiveSession``: latest partial wins, captions and
commits) and ``subtitles`` (SRT/VTT cues).
"""
