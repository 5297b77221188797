#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "json.h"
#include "utf8.h"

json_t *ember__json_str(const char *s) {
  if (s == NULL) return json_null();
  size_t len = strlen(s);
  if (ember__utf8_valid(s, len)) return json_stringn_nocheck(s, len);
  json_t *j = NULL;
  ember_buf_t clean;
  ember_buf_init(&clean, SIZE_MAX - 1);
  for (size_t i = 0; i < len;) {
    size_t step = 0;
    for (size_t l = 1; l <= 4 && i + l <= len && step == 0; l++)
      if (ember__utf8_valid(s + i, l)) step = l;
    int rc = step ? ember_buf_append(&clean, s + i, step) : ember_buf_puts(&clean, "\xef\xbf\xbd");
    if (rc != 0) goto cleanup;
    i += step ? step : 1;
  }
  j = json_stringn_nocheck(clean.data ? clean.data : "", clean.len);
cleanup:
  ember_buf_free(&clean);
  return j;
}

int ember__json_set(json_t *obj, const char *key, json_t *val) {
  return json_object_set_new_nocheck(obj, key, val) == 0 ? 0 : -ENOMEM;
}

int ember__json_push(json_t *arr, json_t *val) {
  return json_array_append_new(arr, val) == 0 ? 0 : -ENOMEM;
}

typedef struct dump_ctx {
  ember_buf_t *out;
  int rc;
} dump_ctx_t;

static int dump_cb(const char *buffer, size_t size, void *data) {
  dump_ctx_t *c = data;
  c->rc = ember_buf_append(c->out, buffer, size);
  return c->rc == 0 ? 0 : -1;
}

int ember__json_dump(const json_t *j, ember_buf_t *out) {
  dump_ctx_t c = {out, 0};
  if (json_dump_callback(j, dump_cb, &c, JSON_COMPACT) == 0) return 0;
  /* jansson failed on its own: it allocates while dumping. */
  return c.rc != 0 ? c.rc : -ENOMEM;
}
