"""The SDK's back ends in this package: embedded (``Client.local``), a Redis pool's client
(``Client.connect``), the store back end both share, and what they read back for clients
(results, run listings, the op catalogue, what is served)."""
