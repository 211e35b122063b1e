"""Live benchmarks: captions of speech and ASR partials in real time, languages, glossaries."""
