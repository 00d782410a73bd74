// lmdb_store.c: the LMDB writer and reader (lmdb_store.h).
#include "data/lmdb_store.h"

#include <errno.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "core/file.h"

// The map is address space, not memory or disk: the file grows with the data.
static const size_t kMapBytes = (size_t)1 << 40;
// Records per write transaction: large enough to amortise the commit.
enum { kCommitEvery = 1024, kKeyBytes = 10, kKeyBufBytes = 24 };

struct LmdbWriter {
  MDB_env *env;
  MDB_txn *txn;
  MDB_dbi dbi;
  int64_t count;
  char dir[1024];
  char partial[1100];  // where it is written: dir + ".partial"
};

struct LmdbReader {
  MDB_env *env;
  MDB_dbi dbi;
  int64_t count;
  char dir[1024];
};

struct LmdbTxn {
  LmdbReader *reader;
  MDB_txn *txn;
};

// Ten digits hold every index below 10^10; the writer stops before that.
static void format_key(int64_t index, char key[kKeyBufBytes]) {
  snprintf(key, kKeyBufBytes, "%010lld", (long long)index);
}

void lmdb_record_name(const char *dir, int64_t index, char *buf, size_t buf_bytes) {
  snprintf(buf, buf_bytes, "%s record %lld", dir, (long long)index);
}

// A data set is written into DIR.partial and renamed to DIR by
// lmdb_writer_close, so DIR exists only complete: a converter that fails or
// is killed midway leaves DIR.partial, which no trainer reads and the next
// conversion replaces.
static void partial_name(const char *dir, char *buf, size_t buf_bytes) {
  snprintf(buf, buf_bytes, "%s.partial", dir);
}

static void remove_leftover(const char *partial) {
  const char *files[] = {"data.mdb", "lock.mdb"};
  char path[1200];
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "%s/%s", partial, files[i]);
    if (unlink(path) != 0 && errno != ENOENT) die_input(path, "cannot remove: %s", strerror(errno));
  }
}

LmdbWriter *lmdb_writer_open(const char *dir) {
  struct stat st;
  if (stat(dir, &st) == 0) {
    char data_path[1100];
    snprintf(data_path, sizeof data_path, "%s/data.mdb", dir);
    if (access(data_path, F_OK) == 0)
      die_input(dir, "already holds an LMDB data set (data.mdb); remove it first");
    if (!S_ISDIR(st.st_mode) || rmdir(dir) != 0)
      die_input(dir, "exists and is not an empty directory; the data set goes there");
  }
  LmdbWriter *w = xcalloc(1, sizeof *w);
  snprintf(w->dir, sizeof w->dir, "%s", dir);
  partial_name(dir, w->partial, sizeof w->partial);
  file_make_dirs(w->partial);
  remove_leftover(w->partial);
  CHECK_LMDB(mdb_env_create(&w->env));
  CHECK_LMDB(mdb_env_set_mapsize(w->env, kMapBytes));
  // The data set is rebuilt from the raw files after a crash, so commits need
  // not wait for the disk.
  CHECK_LMDB(mdb_env_open(w->env, w->partial, MDB_NOSYNC, 0644));
  CHECK_LMDB(mdb_txn_begin(w->env, NULL, 0, &w->txn));
  CHECK_LMDB(mdb_dbi_open(w->txn, NULL, 0, &w->dbi));
  return w;
}

void lmdb_writer_put(LmdbWriter *w, const void *value, size_t value_bytes) {
  char key_text[kKeyBufBytes];
  if (w->count >= 10000000000LL) die_input(w->dir, "more than 10^10 records");
  format_key(w->count, key_text);
  MDB_val key = {kKeyBytes, key_text}, val = {value_bytes, (void *)value};
  int rc = mdb_put(w->txn, w->dbi, &key, &val, MDB_APPEND);
  if (rc == MDB_MAP_FULL) die_input(w->dir, "the data set outgrew the %zu-byte LMDB map", kMapBytes);
  CHECK_LMDB(rc);
  if (++w->count % kCommitEvery == 0) {
    CHECK_LMDB(mdb_txn_commit(w->txn));
    CHECK_LMDB(mdb_txn_begin(w->env, NULL, 0, &w->txn));
  }
}

int64_t lmdb_writer_count(const LmdbWriter *w) { return w->count; }

void lmdb_writer_close(LmdbWriter *w) {
  CHECK_LMDB(mdb_txn_commit(w->txn));
  CHECK_LMDB(mdb_env_sync(w->env, 1));
  mdb_env_close(w->env);
  // The lock file is the writer's; readers open with MDB_NOLOCK.
  char lock[1200];
  snprintf(lock, sizeof lock, "%s/lock.mdb", w->partial);
  unlink(lock);
  if (rename(w->partial, w->dir) != 0)
    die_input(w->dir, "cannot move the finished data set %s here: %s", w->partial, strerror(errno));
  free(w);
}

// Returns the size of dir/data.mdb.
static size_t check_reader_dir(const char *dir) {
  struct stat st;
  if (stat(dir, &st) != 0) {
    int missing = errno;
    char partial[1100];
    partial_name(dir, partial, sizeof partial);
    if (stat(partial, &st) == 0)
      die_input(dir, "missing; %s is an unfinished conversion (the converter failed or was "
                "stopped): convert again", partial);
    die_input(dir, "cannot open LMDB directory: %s", strerror(missing));
  }
  if (!S_ISDIR(st.st_mode)) die_input(dir, "is not a directory (an LMDB data set is a directory with data.mdb)");
  char data_path[1100];
  snprintf(data_path, sizeof data_path, "%s/data.mdb", dir);
  if (access(data_path, R_OK) != 0 || stat(data_path, &st) != 0)
    die_input(dir, "no readable data.mdb in it (%s): not an LMDB data set", strerror(errno));
  return (size_t)st.st_size;
}

// The keys must be exactly 0..count-1: the last key names count-1.
static void check_keys(LmdbReader *r) {
  MDB_txn *txn;
  MDB_cursor *cur;
  MDB_val key, val;
  CHECK_LMDB(mdb_txn_begin(r->env, NULL, MDB_RDONLY, &txn));
  CHECK_LMDB(mdb_cursor_open(txn, r->dbi, &cur));
  char want[kKeyBufBytes];
  format_key(r->count - 1, want);
  int rc = mdb_cursor_get(cur, &key, &val, MDB_LAST);
  if (r->count > 0 &&
      (rc != 0 || key.mv_size != kKeyBytes || memcmp(key.mv_data, want, kKeyBytes) != 0))
    die_input(r->dir, "keys are not the record numbers 0..%lld: not written by this suite",
              (long long)r->count - 1);
  mdb_cursor_close(cur);
  mdb_txn_abort(txn);
}

// Every page the environment's metadata names must be in the file: a read
// past the end of a truncated data.mdb is a SIGBUS, not an error code.
static void check_size(const LmdbReader *r, size_t file_bytes) {
  MDB_envinfo info;
  MDB_stat st;
  CHECK_LMDB(mdb_env_info(r->env, &info));
  CHECK_LMDB(mdb_env_stat(r->env, &st));
  size_t need = ((size_t)info.me_last_pgno + 1) * st.ms_psize;
  if (file_bytes < need)
    die_input(r->dir, "data.mdb is truncated: %zu bytes, its LMDB metadata needs %zu (a copy "
              "cut short?): copy or convert it again", file_bytes, need);
}

LmdbReader *lmdb_reader_open(const char *dir) {
  size_t file_bytes = check_reader_dir(dir);
  LmdbReader *r = xcalloc(1, sizeof *r);
  snprintf(r->dir, sizeof r->dir, "%s", dir);
  CHECK_LMDB(mdb_env_create(&r->env));
  // Map the file, not the writer's 1 TiB of address space.
  CHECK_LMDB(mdb_env_set_mapsize(r->env, file_bytes));
  // Random access over a data set larger than memory: no read-ahead.
  int rc = mdb_env_open(r->env, dir, MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS | MDB_NORDAHEAD, 0);
  if (rc != 0) die_input(dir, "cannot open as LMDB: %s", mdb_strerror(rc));
  check_size(r, file_bytes);
  MDB_txn *txn;
  CHECK_LMDB(mdb_txn_begin(r->env, NULL, MDB_RDONLY, &txn));
  CHECK_LMDB(mdb_dbi_open(txn, NULL, 0, &r->dbi));
  MDB_stat st;
  CHECK_LMDB(mdb_stat(txn, r->dbi, &st));
  r->count = (int64_t)st.ms_entries;
  mdb_txn_abort(txn);
  check_keys(r);
  return r;
}

int64_t lmdb_reader_count(const LmdbReader *r) { return r->count; }

int64_t lmdb_split_count(const char *dir, const char *split) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, split);
  LmdbReader *r = lmdb_reader_open(path);
  int64_t n = lmdb_reader_count(r);
  lmdb_reader_close(r);
  if (n == 0) die_input(path, "no records");
  return n;
}
const char *lmdb_reader_dir(const LmdbReader *r) { return r->dir; }

void lmdb_reader_close(LmdbReader *r) {
  mdb_env_close(r->env);
  free(r);
}

LmdbTxn *lmdb_txn_begin(LmdbReader *r) {
  LmdbTxn *t = xcalloc(1, sizeof *t);
  t->reader = r;
  CHECK_LMDB(mdb_txn_begin(r->env, NULL, MDB_RDONLY, &t->txn));
  return t;
}

const void *lmdb_txn_get(LmdbTxn *t, int64_t index, size_t *value_bytes) {
  char key_text[kKeyBufBytes], name[1100];
  if (index < 0 || index >= t->reader->count) {
    lmdb_record_name(t->reader->dir, index, name, sizeof name);
    die_input(name, "no such record (the data set has %lld)", (long long)t->reader->count);
  }
  format_key(index, key_text);
  MDB_val key = {kKeyBytes, key_text}, val;
  int rc = mdb_get(t->txn, t->reader->dbi, &key, &val);
  if (rc != 0) {
    lmdb_record_name(t->reader->dir, index, name, sizeof name);
    die_input(name, "cannot read: %s", mdb_strerror(rc));
  }
  *value_bytes = val.mv_size;
  return val.mv_data;
}

void lmdb_txn_end(LmdbTxn *t) {
  mdb_txn_abort(t->txn);
  free(t);
}
