"""Record mode: a proxy to a real upstream that writes what it saw as a dsh session tree."""
