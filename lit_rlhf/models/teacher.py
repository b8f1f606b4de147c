"""Teachers moved to lit_rlhf.teachers; their names here warn and go in the next release (lit_rlhf.lazy_exports)."""

from lit_rlhf.lazy_exports import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {}, globals())
