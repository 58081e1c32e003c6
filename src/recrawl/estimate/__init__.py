"""What the history says of each page: change-rate evidence, the fold, calibration, hint trust. Pure."""
