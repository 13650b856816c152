"""`sink: iceberg`: Kafka into Apache Iceberg tables, the positions committed with the files."""
