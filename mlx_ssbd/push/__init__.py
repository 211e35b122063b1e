"""Captions pushed where the audience is: Zoom, YouTube Live, Teams CART and OBS.

``spec`` parses and checks what the user names (``PLATFORM[:LANG]=URL``), ``senders`` speaks each
platform's protocol, ``delivery`` queues and retries off the model's thread, ``text`` cuts lines.
docs/push.md says how to connect each platform.
"""
