"""Which backend answers a request: the routes of the config over the backends."""
