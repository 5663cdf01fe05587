"""Two op modules for the typed-inputs test: a producer and a consumer that does not import it."""
