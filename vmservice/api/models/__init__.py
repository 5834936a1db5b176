"""
The JSON shapes of the API (requests and responses) as attrs records, one
module per topic: :mod:`.meta` (errors, info, images), :mod:`.nodes`,
:mod:`.files`, :mod:`.background` (background execs), :mod:`.secrets` and
:mod:`.stats`; :mod:`.fields` declares request fields whose schema says more
than their type.

They are the single description of every body: the input parser structures
requests into them, the renderer unstructures responses from them, and the
OpenAPI document is generated from them.
"""
