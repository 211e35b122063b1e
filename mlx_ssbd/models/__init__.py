"""Models: cards and their preparation from PyPI (``registry``), GGUF import (``gguf_import``),
and loading a model ready for translation (``loading``)."""
