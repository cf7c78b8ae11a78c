-- Export the status_intervals table as Parquet files partitioned by date and cluster (hive layout).
--
-- Answers nothing itself: it hands the history to other engines (Spark, Trino, pandas, DuckDB).
-- Layout: $dest/date=YYYY-MM-DD/cluster=NAME/data_0.parquet, the date being the UTC date of
-- valid_from (the connection runs in UTC).  Every column is kept (JSON columns become strings, MAP columns
-- Parquet maps).  The partition columns are in the paths, not in the files.
-- Parameters:
--   $dest   VARCHAR, the directory to write (must not exist yet; the exporter checks)
COPY (
    SELECT *, CAST(valid_from AS DATE) AS date FROM status_intervals
) TO $dest (FORMAT PARQUET, PARTITION_BY (date, cluster))
