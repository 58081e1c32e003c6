"""What a fetch reported: parsing, validation, classification, fingerprints. Pure."""
