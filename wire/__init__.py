"""A provider's site as its callers reach it (docs/architecture.md §4): the signed request
(`request`), the client pinned to the site's registered certificate (`client`, `tls`) and the
buyer's serving client with its receipts and journal (`serving`). The market, the oracle and
buyers import this package; the site itself is `provider`."""
