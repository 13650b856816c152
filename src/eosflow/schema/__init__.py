"""A pipeline's declared record schema -> its typed checks, Arrow columns and target table."""
