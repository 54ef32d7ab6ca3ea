"""The experts of :class:`~kons.Auto`'s mixture, one module per kind."""
