// lmdb_store.h: data sets as LMDB environments of numbered records. Keys are
// the record index as ten decimal digits ("0000000017"), 0..count-1, so the
// count is known at open and any record can be read by its index; values are
// records (record.h). Converters write with LmdbWriter, trainers read with
// LmdbReader: read-only and lock-free (MDB_NOLOCK), mapped rather than loaded,
// so a data set larger than memory costs only page cache, and any number of
// threads each reading through their own LmdbTxn.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct LmdbWriter LmdbWriter;
// Creates dir (and its parents) and a new environment in it; a dir that
// already holds a data.mdb is an error, so two data sets never mix.
LmdbWriter *lmdb_writer_open(const char *dir);
// Appends value as record number lmdb_writer_count(w).
void lmdb_writer_put(LmdbWriter *w, const void *value, size_t value_bytes);
int64_t lmdb_writer_count(const LmdbWriter *w);
// Commits and closes.
void lmdb_writer_close(LmdbWriter *w);

typedef struct LmdbReader LmdbReader;
typedef struct LmdbTxn LmdbTxn;
// Opens dir read-only. A missing dir, one without a readable data.mdb, or keys
// that are not 0..count-1 stop with a message naming dir.
LmdbReader *lmdb_reader_open(const char *dir);
int64_t lmdb_reader_count(const LmdbReader *r);
// The records of the LMDB in dir/split, opened and closed; none is an error
// naming it (a data set's split must hold some).
int64_t lmdb_split_count(const char *dir, const char *split);
const char *lmdb_reader_dir(const LmdbReader *r);
void lmdb_reader_close(LmdbReader *r);  // after every txn has ended

// A read transaction; one per reading thread, kept for as long as it reads.
LmdbTxn *lmdb_txn_begin(LmdbReader *r);
// Record `index`; the bytes stay valid until lmdb_txn_end. An index outside
// 0..count-1 stops with a message naming the record.
const void *lmdb_txn_get(LmdbTxn *t, int64_t index, size_t *value_bytes);
void lmdb_txn_end(LmdbTxn *t);

// "dir record 17": how messages name a record.
void lmdb_record_name(const char *dir, int64_t index, char *buf, size_t buf_bytes);

#ifdef __cplusplus
}
#endif
