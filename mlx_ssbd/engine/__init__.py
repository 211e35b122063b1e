"""The engine: how one SSBD update runs on a model, for one stream or many.

``update`` holds the algorithm (verify the draft in one biased pass, decide, decode on, check
lookahead proposals) once, as a generator of model calls and host syncs (``requests``: what it
asks and what a feeder answers); ``verify`` the acceptance
rule; ``sampling`` biased speculative sampling; ``lookahead`` resync and n-gram proposals; ``stops``
which tokens end an output; ``cache`` one stream's KV cache and ``batch`` many streams' persistent
batched cache, the two feeders ``update.run`` drives.
"""
