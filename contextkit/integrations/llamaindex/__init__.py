"""contextkit inside LlamaIndex apps: parser, retriever, postprocessor, prompt path, memory.

``import contextkit`` never imports LlamaIndex; importing this package does, and
checks the installed llama-index-core version first.
"""

from contextkit.integrations.llamaindex._compat import check_version

check_version()
