"""The recording format dsh writes (pure): its names, chunks, the header, the reader and the writer."""
