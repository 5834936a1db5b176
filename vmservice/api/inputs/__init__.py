"""
The one place where HTTP input is parsed and validated, with
:mod:`vmservice.api.query`: JSON bodies, headers that choose a mode, and the
kinds of value several routes share (guest paths, file modes, ``wait``).

JSON bodies and headers become typed values here, or a
:class:`~vmservice.errors.BadRequest` that names what is wrong.  Query
strings are parsed by :mod:`vmservice.api.query` from each route's
declaration.  Nothing deeper ever sees raw request data.

One module per topic: :mod:`.bodies` (reading and structuring JSON bodies),
:mod:`.nodes` (create), :mod:`.tags`, :mod:`.secrets`, :mod:`.lifecycle`
(``wait``, ``timeout``, a shutdown's action), :mod:`.background` (a kill's
body), :mod:`.events` (``Last-Event-ID``), :mod:`.filesystem` (mkdir) and
:mod:`.copies` (copy modes and placement, the unpacked size).
"""
