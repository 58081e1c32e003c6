"""The shapes of recrawl's data, shared by the store and the math.

Records and their layouts only (a page's state as an object and as columns,
the outcome codes, the bucket layout): no estimation, no scoring, no I/O.
The store reads and writes these; :mod:`recrawl.estimate`, :mod:`recrawl.health`
and :mod:`recrawl.plan` compute on them. Keeping them here is what lets
:mod:`recrawl.store` import none of the math.
"""
