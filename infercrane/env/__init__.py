"""What this machine is and what runs on it, as receipts record it; and the runtime-compatibility ledger."""
