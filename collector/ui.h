/* The dashboard's files (web/), embedded in the binary at build time by
 * cmake/EmbedFiles.cmake and served by the API at / and /ui/NAME
 * (docs/internals/dashboard.md). Nothing is read from disk at run time, so
 * the collector and `ember up` are one file to install. */
#ifndef EMBER_COLLECTOR_UI_H
#define EMBER_COLLECTOR_UI_H

#include <stddef.h>

typedef struct ember__ui_asset {
  const char *name;          /* "app.js": its path under /ui/ */
  const char *ctype;         /* Content-Type */
  const unsigned char *data; /* the bytes, followed by a NUL not counted in len */
  size_t len;
  const char *etag; /* strong ETag, quoted: part of the SHA-256 of the bytes */
} ember__ui_asset_t;

/* Ends with an entry whose name is NULL. */
extern const ember__ui_asset_t ember__ui_assets[];

#endif
