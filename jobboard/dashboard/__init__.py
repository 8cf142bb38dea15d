"""A web dashboard for a board and its plans (``jobboard dashboard URL``; extra ``jobboard[dashboard]``).

Modules: :mod:`.model` (what is shown, from one live view), :mod:`.html` (escaping building blocks),
:mod:`.pages` (page bodies), :mod:`.api` (JSON and actions), :mod:`.sse` (live updates), :mod:`.app`
(the Starlette application). Only :mod:`.model`, :mod:`.html` and :mod:`.pages` import without Starlette.
"""
