"""The contract suite: one mixin per area, each in the module named after it.

:class:`~.broker.BrokerContract` is their union (``AREAS`` lists them); the
requirements a test declares (:mod:`.requirements`) and the table of tests by
requirement (:mod:`.catalogue`) go with them.
"""
