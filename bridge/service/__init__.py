"""Units of work: the transactions in which a decision of the rules is applied to the store.

Each one opens a transaction (:meth:`bridge.storage.database.Database.session`),
locks and reads through the gateways of :mod:`bridge.storage`, builds a
row's state once, decides through :mod:`bridge.rules` and writes through
storage again. Storage runs statements and hands back values; it decides
nothing. The processes (beat, the workers) call a unit of work where a
decision is taken, and storage's gateways directly where none is (claiming
rows, heartbeats, releases).
"""
