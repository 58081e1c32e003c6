"""Where the budget goes: freshness, the allocation, the cycle's tasks. Pure."""
