"""mlx-ssbd's benchmarks: committed scripts whose reports are the project's results.

Grouped by what they measure: ``engine`` (passes, kernels, memory, batching), ``live`` (captions in
real time, speech, languages, glossaries), ``service`` (the server under load, faults and attack),
``quality`` (acceptance rules, prompts), ``compare`` (before/after two commits), ``tools``
(collecting reports, making data). Run one as a module from the repository root
(``python -m benchmarks.engine.verify_cost --help``) or every current one with
``python -m benchmarks.run`` (``docs/benchmarks.md``). Nothing runs at import.
"""
