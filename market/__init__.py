"""Job specs, matching, job lifecycle, settlement and the market service (DESIGN §5)."""
