"""What the store's readers see (hub/store/views): changed listings, run history."""
