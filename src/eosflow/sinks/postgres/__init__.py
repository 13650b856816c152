"""The warehouse sink: rows, rejected rows, ranges and positions in one Postgres transaction."""
