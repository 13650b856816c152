"""The ledger: immutable range values, the pure planner, plans and positions, backfill rules."""
