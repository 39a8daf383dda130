//! `mds`: parse MosaicML MDS `index.json` and shard bytes. Pure: bytes in, values out, no I/O.
