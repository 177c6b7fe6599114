"""The recording format dsh writes (pure): chunks, the header, the reader and the writer."""
