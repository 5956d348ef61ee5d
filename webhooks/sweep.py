def inbox_sweep(*, batch_size: int = 500) -> int:
    """Re-dispatches inbox rows whose message may have been lost; returns how many."""
    return 0  # the processing pipeline fills this in
