"""build-cache --dask: a repository's static cache counted on a Dask cluster. build.py (the
client: shards out, partitions merged back), shards.py (dealing files into shards),
progress.py (its terminal progress)."""
